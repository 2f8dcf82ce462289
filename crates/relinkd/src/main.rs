//! `relinkd CONFIG.toml`: run the relink block daemon of a configuration
//! file (see the `relinkd` library's docs) until SIGTERM or SIGINT.

use std::path::PathBuf;
use std::process::ExitCode;

/// Logs go to stderr through `tracing`: `RELINKD_LOG` filters them
/// (`info` by default; e.g. `relinkd=debug,relink=debug`), and
/// `RELINKD_LOG_FORMAT=json` writes one JSON object per line.
fn init_logs() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("RELINKD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    if std::env::var("RELINKD_LOG_FORMAT").is_ok_and(|f| f == "json") {
        logs.json().init();
    } else {
        logs.init();
    }
}

/// The relink block daemon: exports volumes over relink sessions (target)
/// and serves relink connections to NBD clients (initiator), as its
/// configuration file says, until SIGTERM or SIGINT. `relink status`,
/// `relink reload`, ... talk to it on its control socket.
///
/// Logs go to stderr: `RELINKD_LOG` filters them (`info` by default;
/// e.g. `relinkd=debug,relink=debug`), `RELINKD_LOG_FORMAT=json` writes
/// one JSON object per line. The progress lines (`export ... listening`,
/// `connect ... serving nbd`, `reload: ...`) go to stdout.
#[derive(clap::Parser)]
#[command(name = "relinkd", version)]
struct Args {
    /// The configuration file (TOML: `[backend]`, `[control]`,
    /// `[[export]]`, `[[connect]]`, `conf_dir`; see docs/RELINKD.md).
    config: PathBuf,
}

fn main() -> ExitCode {
    // `--help` and `--version` print to stdout and exit 0; a missing or
    // extra argument is a usage error (exit 2).
    let args = <Args as clap::Parser>::parse();
    init_logs();
    let path = args.config;
    let config = match relinkd::Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("relinkd: {e}");
            return ExitCode::from(2);
        }
    };
    if matches!(config.backend, relinkd::Backend::RdmaCore { .. }) {
        // Still the only thread: destroys on a lost device then succeed.
        if let Err(e) = relink_verbs::init_environment() {
            eprintln!("relinkd: warning: {e}");
        }
    }
    match relinkd::run(&config) {
        Ok(summary) => {
            println!(
                "relinkd stopped: sessions closed cleanly: {}{}",
                summary.clean_sessions,
                if summary.timed_out {
                    ", shutdown timed out"
                } else {
                    ""
                }
            );
            if summary.sync_failures.is_empty() {
                ExitCode::SUCCESS
            } else {
                for f in summary.sync_failures {
                    eprintln!("relinkd: sync failed: {f}");
                }
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("relinkd: {e}");
            ExitCode::FAILURE
        }
    }
}
