//! The command line of `relink perf`: the two roles, their options, the
//! operation, and the parsers of sizes and durations.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use super::{MAX_DEPTH, MAX_SIZE};

/// `relink perf <server|client> ...`.
#[derive(Debug, Args)]
pub struct PerfArgs {
    #[command(subcommand)]
    pub(super) role: Role,
}

/// Which end to run.
#[derive(Debug, Subcommand)]
pub(super) enum Role {
    /// Accept connections and serve as the target of the traffic, until
    /// killed (or after one connection with --once).
    Server(ServerArgs),
    /// Connect to a server, run the traffic and report the rates. Exit
    /// status 3 if a request fails or the connection ends, 4 if completions
    /// stop arriving for 10 s.
    Client(ClientArgs),
}

/// Options of `relink perf server`.
#[derive(Debug, Args)]
pub(super) struct ServerArgs {
    /// Soft device registry directory [default: $RELINK_SOFT_DIR, else
    /// $XDG_RUNTIME_DIR/relink-soft, else /tmp/relink-soft-<uid>].
    #[arg(long, value_name = "DIR")]
    pub(super) dir: Option<PathBuf>,
    /// Address to listen on: a soft device's address, or 0.0.0.0 / :: for
    /// every device (port 0 picks a port, printed in the `listening` line).
    #[arg(long, value_name = "ADDR:PORT")]
    pub(super) bind: SocketAddr,
    /// Exit after the first connection ends.
    #[arg(long)]
    pub(super) once: bool,
    /// Print each event as one JSON object per line.
    #[arg(long)]
    pub(super) json: bool,
    /// Bytes of the buffer registered per connection; messages may be at
    /// most this long (K and M suffixes: KiB, MiB).
    #[arg(long, value_name = "BYTES", default_value = "1M", value_parser = parse_size)]
    pub(super) buf_size: u32,
}

/// Options of `relink perf client`.
#[derive(Debug, Args)]
pub(super) struct ClientArgs {
    /// Soft device registry directory [default: $RELINK_SOFT_DIR, else
    /// $XDG_RUNTIME_DIR/relink-soft, else /tmp/relink-soft-<uid>].
    #[arg(long, value_name = "DIR")]
    pub(super) dir: Option<PathBuf>,
    /// The server's address.
    #[arg(long, value_name = "ADDR:PORT")]
    pub(super) connect: SocketAddr,
    /// The operation: two-sided SEND or one-sided RDMA WRITE.
    #[arg(long, value_enum)]
    pub(super) op: Op,
    /// Bytes per message (K and M suffixes: KiB, MiB); at most the
    /// server's buffer size.
    #[arg(long, value_name = "BYTES", value_parser = parse_size)]
    pub(super) size: u32,
    /// Requests kept outstanding (1..=16384).
    #[arg(long, value_name = "N", default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_DEPTH)))]
    pub(super) depth: u32,
    #[command(flatten)]
    pub(super) amount: Amount,
    /// Print the result as one JSON object (on the last line).
    #[arg(long)]
    pub(super) json: bool,
}

/// How much traffic to run: exactly one of the two.
#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
pub(super) struct Amount {
    /// Number of requests to complete.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) iters: Option<u64>,
    /// Seconds to post requests for (fractions allowed, e.g. 0.5).
    #[arg(long, value_name = "SECS", value_parser = parse_secs)]
    pub(super) duration: Option<Duration>,
}

/// The operation the client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Op {
    /// SEND: consumes a receive the server posted.
    Send,
    /// RDMA WRITE into the server's buffer.
    Write,
}

impl Op {
    pub(super) fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
        }
    }

    pub(super) fn code(self) -> u8 {
        match self {
            Op::Send => 0,
            Op::Write => 1,
        }
    }

    pub(super) fn from_code(c: u8) -> Option<Op> {
        match c {
            0 => Some(Op::Send),
            1 => Some(Op::Write),
            _ => None,
        }
    }
}

/// Parses a byte count: digits with an optional `K`/`KiB` or `M`/`MiB`
/// suffix, 1..=[`MAX_SIZE`].
fn parse_size(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let (digits, mult) = if let Some(d) = t.strip_suffix("KiB").or(t.strip_suffix(['K', 'k'])) {
        (d, 1u64 << 10)
    } else if let Some(d) = t.strip_suffix("MiB").or(t.strip_suffix(['M', 'm'])) {
        (d, 1u64 << 20)
    } else {
        (t, 1)
    };
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a byte count (digits, optionally K or M)"))?;
    let bytes = n
        .checked_mul(mult)
        .filter(|b| (1..=MAX_SIZE).contains(b))
        .ok_or_else(|| format!("{s:?} is out of range (1 byte ..= {MAX_SIZE} bytes)"))?;
    u32::try_from(bytes).map_err(|_| format!("{s:?} is too large"))
}

/// Parses a positive number of seconds (at most a day).
fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!(
            "{s:?} is out of range (more than 0, at most 86400)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64"), Ok(64));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("2MiB"), Ok(2 << 20));
        assert!(parse_size("0").is_err());
        assert!(parse_size("17M").is_err());
        assert!(parse_size("lots").unwrap_err().contains("lots"));
        assert!(parse_size("99999999999999999999M").is_err());
    }

    #[test]
    fn seconds() {
        assert_eq!(parse_secs("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_secs("0").is_err());
        assert!(parse_secs("-1").is_err());
        assert!(parse_secs("NaN").is_err());
        assert!(parse_secs("soon").is_err());
    }
}
