//! The control socket's server: a Unix stream socket (mode 0600) whose
//! peers are checked by their uid (SO_PEERCRED), newline-delimited JSON
//! requests answered one line each, several clients at once; and the
//! optional HTTP listener serving `GET /metrics`.

use std::io;
use std::path::Path;
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, UnixListener, UnixStream};

use super::metrics;
use super::protocol::{
    parse_request, AckResult, Command, ControlError, ErrorKind, MetricsResult, ReloadResult,
    Response, MAX_LINE,
};
use crate::node_loop::DaemonHandle;
use crate::reload::Reloader;
use crate::serve::Served;

/// Listen on `path`: its directory is made if missing, a stale socket
/// (nobody answering) is replaced, a live one is an error; the socket's
/// mode is 0600.
pub(crate) fn bind(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    if let Ok(m) = std::fs::symlink_metadata(path) {
        if !m.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                "exists and is not a socket",
            ));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another relinkd answers on it",
            ));
        }
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Serve control clients on `listener` until the task is dropped.
pub(crate) async fn serve(
    listener: UnixListener,
    handle: DaemonHandle,
    served: Served,
    reloader: Arc<Reloader>,
) {
    let own = rustix::process::getuid().as_raw();
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                tracing::warn!(error = %e, "control socket: accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        let (h, s, r) = (handle.clone(), served.clone(), reloader.clone());
        tokio::spawn(async move {
            if let Err(e) = client(stream, own, h, s, r).await {
                if e.kind() != io::ErrorKind::BrokenPipe {
                    tracing::warn!(error = %e, "control client");
                }
            }
        });
    }
}

async fn client(
    stream: UnixStream,
    own: u32,
    handle: DaemonHandle,
    served: Served,
    reloader: Arc<Reloader>,
) -> io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let (r, mut w) = stream.into_split();
    if uid != own && uid != 0 {
        let e = ControlError::new(
            ErrorKind::PermissionDenied,
            format!("permission denied: uid {uid} is neither relinkd's ({own}) nor root"),
        );
        w.write_all(Response::err(e).to_line().as_bytes()).await?;
        return w.shutdown().await;
    }
    let mut r = BufReader::new(r);
    loop {
        let mut line = Vec::new();
        let n = (&mut r)
            .take(MAX_LINE as u64 + 2)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(());
        }
        if !line.ends_with(b"\n") && line.len() > MAX_LINE {
            // The rest of the line cannot be told from the next request.
            let e = ControlError::new(
                ErrorKind::BadRequest,
                format!("request line longer than {MAX_LINE} bytes"),
            );
            w.write_all(Response::err(e).to_line().as_bytes()).await?;
            return Ok(());
        }
        let command = match parse_request(&line) {
            Ok(req) => req.command,
            Err(e) => {
                w.write_all(Response::err(e.into()).to_line().as_bytes())
                    .await?;
                continue;
            }
        };
        let response = match command {
            Command::Events { follow: true } => {
                return follow(r, w, &handle).await;
            }
            Command::Events { follow: false } => Response::ok(&AckResult {
                message: "no events without follow".into(),
            }),
            Command::Metrics {} => match handle.status().await {
                Ok(s) => Response::ok(&MetricsResult {
                    text: metrics::render(&s),
                }),
                Err(e) => Response::err(e),
            },
            Command::Disconnect { name } => {
                let r = handle
                    .command(Command::Disconnect { name: name.clone() })
                    .await;
                if r.is_ok() {
                    crate::serve::unserve(&served, &name);
                }
                respond(r)
            }
            Command::Reload {} => match reloader.reload(&handle, &served).await {
                Ok(r) => {
                    log_reload(&r);
                    Response::ok(&r)
                }
                Err(e) => {
                    tracing::error!(reason = %e.message, "reload refused");
                    Response::err(e)
                }
            },
            other => respond(handle.command(other).await),
        };
        w.write_all(response.to_line().as_bytes()).await?;
    }
}

/// Log what a reload did.
pub(crate) fn log_reload(r: &ReloadResult) {
    println!(
        "reload: removed [{}], added [{}], policy changed [{}]",
        r.removed.join(", "),
        r.added.join(", "),
        r.changed.join(", ")
    );
    for f in &r.failed {
        tracing::error!(entry = %f, "reload: an entry could not be applied");
    }
}

fn respond(r: Result<serde_json::Value, ControlError>) -> Response {
    match r {
        Ok(v) => Response {
            version: super::protocol::VERSION,
            ok: true,
            result: Some(v),
            error: None,
        },
        Err(e) => Response::err(e),
    }
}

/// `events` with `follow`: an acknowledgement, then every event as a
/// line until the client closes (or sends anything).
async fn follow(
    mut r: BufReader<tokio::net::unix::OwnedReadHalf>,
    mut w: tokio::net::unix::OwnedWriteHalf,
    handle: &DaemonHandle,
) -> io::Result<()> {
    let mut events = handle.subscribe();
    let ack = Response::ok(&AckResult {
        message: "following events".into(),
    });
    w.write_all(ack.to_line().as_bytes()).await?;
    let mut buf = [0u8; 256];
    loop {
        tokio::select! {
            n = r.read(&mut buf) => {
                if n? == 0 {
                    return Ok(());
                }
            }
            ev = events.recv() => {
                let Some(ev) = ev else { return Ok(()) };
                w.write_all(Response::ok(&ev).to_line().as_bytes()).await?;
            }
        }
    }
}

/// Serve `GET /metrics` (HTTP/1.0, one request per connection) on
/// `listener` until the task is dropped.
pub(crate) async fn serve_metrics(listener: TcpListener, handle: DaemonHandle) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        };
        let h = handle.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let first = head.split(|&b| b == b'\n').next().unwrap_or_default();
            let first = String::from_utf8_lossy(first);
            let mut words = first.split_whitespace();
            let (status, body) = match (words.next(), words.next()) {
                (Some("GET"), Some("/metrics")) => match h.status().await {
                    Ok(s) => ("200 OK", metrics::render(&s)),
                    Err(e) => ("503 Service Unavailable", format!("{e}\n")),
                },
                (Some("GET"), Some(_)) => ("404 Not Found", "try /metrics\n".into()),
                _ => ("400 Bad Request", "GET /metrics\n".into()),
            };
            let reply = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(reply.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}
