//! The process: the node thread ([`Daemon`]) and, on a tokio runtime,
//! an NBD server per connection once its volume is known, until SIGTERM
//! or SIGINT.

use std::path::PathBuf;

use relink_nbd::{BlockSizes, Export, ExportFlags, Server, ServerConfig};
use tokio::signal::unix::{signal, SignalKind};

use crate::config::Config;
use crate::node_loop::{Daemon, DaemonHandle, StartError, Summary};

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// It did not start.
    #[error(transparent)]
    Start(#[from] StartError),
    /// A connection's volume could not be identified.
    #[error("connect {name}: {reason}")]
    Identify {
        /// The connection.
        name: String,
        /// Why.
        reason: String,
    },
    /// An NBD socket cannot be served.
    #[error("connect {name}: {what}: {reason}")]
    Nbd {
        /// The connection.
        name: String,
        /// Which socket.
        what: String,
        /// Why.
        reason: String,
    },
    /// The runtime or the signal handlers cannot be set up.
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
}

/// Run the daemon of `config` until SIGTERM or SIGINT; then close the
/// sessions with goodbyes, sync the exports' files and return what the
/// node thread did.
///
/// # Errors
/// [`RunError`] if anything cannot start; the node thread is stopped
/// first.
pub fn run(config: &Config) -> Result<Summary, RunError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(RunError::Runtime)?;
    let mut daemon = Daemon::start(config)?;
    let handle = daemon.handle();
    let mut sockets = Vec::new();
    let served = rt.block_on(serve(config, &mut daemon, &handle, &mut sockets));
    crate::notify::tell("STOPPING=1");
    handle.stop();
    let summary = daemon.join();
    for s in sockets {
        let _ = std::fs::remove_file(s);
    }
    served.map(|()| summary)
}

async fn serve(
    config: &Config,
    daemon: &mut Daemon,
    handle: &DaemonHandle,
    sockets: &mut Vec<PathBuf>,
) -> Result<(), RunError> {
    let mut term = signal(SignalKind::terminate()).map_err(RunError::Runtime)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RunError::Runtime)?;
    let mut waiting = config.connects.len();
    let mut told_ready = false;
    loop {
        if waiting == 0 && !told_ready {
            // Every export listens (`Daemon::start`) and every NBD socket
            // is bound: tell the service manager (`Type=notify`).
            crate::notify::tell("READY=1");
            told_ready = true;
        }
        let ready = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            r = daemon.next_ready(), if waiting > 0 => r,
        };
        let Some(ready) = ready else {
            return Ok(());
        };
        waiting -= 1;
        let c = &config.connects[ready.connect];
        let info = ready.result.map_err(|reason| RunError::Identify {
            name: c.name.clone(),
            reason,
        })?;
        let flags = if info.read_only {
            ExportFlags::read_only()
        } else {
            ExportFlags::read_write().with_multi_conn(true)
        };
        let (tx, mut rx) = tokio::sync::mpsc::channel(256);
        let h = handle.clone();
        let index = ready.connect;
        tokio::spawn(async move {
            while let Some(req) = rx.recv().await {
                h.submit(index, req);
            }
        });
        // The block service takes whole blocks: clients are told so, and
        // the longest request is the smaller of both sides' max_io.
        let sizes = BlockSizes::new(
            info.block_size,
            info.block_size.max(4096),
            info.max_io.min(c.max_io),
        );
        let export = Export::new(c.name.clone(), info.size, flags, tx)
            .with_block_sizes(sizes)
            .with_description(format!("relink volume from {:?}", c.targets));
        let nbd_err = |what: String, e: &dyn std::fmt::Display| RunError::Nbd {
            name: c.name.clone(),
            what,
            reason: e.to_string(),
        };
        let server = std::sync::Arc::new(
            Server::new(vec![export], ServerConfig::default())
                .map_err(|e| nbd_err("export".into(), &e))?,
        );
        let path = &c.nbd_socket;
        if std::fs::symlink_metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        }) {
            let _ = std::fs::remove_file(path);
        }
        let unix = tokio::net::UnixListener::bind(path)
            .map_err(|e| nbd_err(format!("nbd_socket {}", path.display()), &e))?;
        sockets.push(path.clone());
        let s = server.clone();
        tokio::spawn(async move {
            if let Err(e) = s.serve_unix(unix).await {
                eprintln!("relinkd: nbd unix socket: {e}");
            }
        });
        let mut shown = format!("unix {}", path.display());
        if let Some(addr) = c.nbd_tcp {
            let tcp = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|e| nbd_err(format!("nbd_tcp {addr}"), &e))?;
            let s = server.clone();
            tokio::spawn(async move {
                if let Err(e) = s.serve_tcp(tcp).await {
                    eprintln!("relinkd: nbd tcp: {e}");
                }
            });
            shown.push_str(&format!(" and tcp {addr}"));
        }
        println!("connect {} serving nbd on {shown}", c.name);
    }
}
