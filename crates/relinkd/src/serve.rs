//! The process: the node thread ([`Daemon`]), the control socket and, on
//! a tokio runtime, an NBD server per connection once its volume is known
//! (the configured ones and those added at runtime), until SIGTERM or
//! SIGINT.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use relink_nbd::{BlockSizes, Export, ExportFlags, Server, ServerConfig};
use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;

use crate::config::Config;
use crate::node_loop::{Daemon, DaemonHandle, Ready, StartError, Summary};
use crate::reload::Reloader;

/// The longest NBD read or write a connection takes (its advertised
/// maximum block size): 32 MiB, nbdkit's default and the NBD protocol's
/// bound below which a request is not to be refused as too costly.
/// Clients send requests larger than relinkd's `max_io` (`nbdcopy` sends
/// 256 KiB at its defaults, whatever the server advertises): each is split
/// into commands of at most `max_io` ([`crate::Bridge`]), as many
/// outstanding at once as the queue depth allows.
pub const NBD_MAX_REQUEST: u32 = 32 << 20;

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
    /// The control socket or the metrics listener cannot listen.
    #[error("control {what}: {reason}")]
    Control {
        /// Which one, with its address.
        what: String,
        /// Why.
        reason: String,
    },
    /// The runtime or the signal handlers cannot be set up.
    #[error("runtime: {0}")]
    Runtime(std::io::Error),
}

/// The NBD servers of one connection.
pub(crate) struct ServedNbd {
    tasks: Vec<JoinHandle<()>>,
    socket: PathBuf,
}

/// The connections served over NBD, by name.
pub(crate) type Served = Arc<Mutex<HashMap<String, ServedNbd>>>;

/// Stop serving connection `name` over NBD and remove its socket.
pub(crate) fn unserve(served: &Served, name: &str) {
    let gone = served.lock().map(|mut m| m.remove(name)).ok().flatten();
    if let Some(s) = gone {
        for t in s.tasks {
            t.abort();
        }
        let _ = std::fs::remove_file(&s.socket);
    }
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
    let served: Served = Arc::default();
    let reloader = Arc::new(Reloader::new(config.clone()));
    let mut control_socket = None;
    let result = rt.block_on(async {
        control_socket = control(config, &handle, &served, &reloader)?;
        serve(config, &mut daemon, &handle, &served, &reloader).await
    });
    crate::notify::tell("STOPPING=1");
    handle.stop();
    let summary = daemon.join();
    if let Ok(mut m) = served.lock() {
        for (_, s) in m.drain() {
            let _ = std::fs::remove_file(s.socket);
        }
    }
    if let Some(path) = control_socket {
        let _ = std::fs::remove_file(path);
    }
    result.map(|()| summary)
}

/// Start the control socket and the metrics listener; the control
/// socket's path once it listens. The default path that cannot listen
/// (another relinkd has it, no permission) leaves the daemon without a
/// control socket, with a message; a configured one is an error.
fn control(
    config: &Config,
    handle: &DaemonHandle,
    served: &Served,
    reloader: &Arc<Reloader>,
) -> Result<Option<PathBuf>, RunError> {
    let path = &config.control.socket;
    let socket = match crate::control::server::bind(path) {
        Ok(listener) => {
            tokio::spawn(crate::control::server::serve(
                listener,
                handle.clone(),
                served.clone(),
                reloader.clone(),
            ));
            println!("control socket {}", path.display());
            Some(path.clone())
        }
        Err(e) if !config.control.configured => {
            tracing::warn!(
                socket = %path.display(),
                error = %e,
                "running without a control socket"
            );
            None
        }
        Err(e) => {
            return Err(RunError::Control {
                what: format!("socket {}", path.display()),
                reason: e.to_string(),
            })
        }
    };
    if let Some(addr) = config.control.metrics_listen {
        let std = std::net::TcpListener::bind(addr)
            .and_then(|l| l.set_nonblocking(true).map(|()| l))
            .and_then(tokio::net::TcpListener::from_std)
            .map_err(|e| RunError::Control {
                what: format!("metrics_listen {addr}"),
                reason: e.to_string(),
            })?;
        tokio::spawn(crate::control::server::serve_metrics(std, handle.clone()));
        println!("metrics on http://{addr}/metrics");
    }
    Ok(socket)
}

async fn serve(
    config: &Config,
    daemon: &mut Daemon,
    handle: &DaemonHandle,
    served: &Served,
    reloader: &Arc<Reloader>,
) -> Result<(), RunError> {
    let mut term = signal(SignalKind::terminate()).map_err(RunError::Runtime)?;
    let mut int = signal(SignalKind::interrupt()).map_err(RunError::Runtime)?;
    let mut hup = signal(SignalKind::hangup()).map_err(RunError::Runtime)?;
    // The configured connections not served yet.
    let mut waiting: std::collections::HashSet<&str> =
        config.connects.iter().map(|c| c.name.as_str()).collect();
    let mut told_ready = false;
    loop {
        if waiting.is_empty() && !told_ready {
            // Every export listens (`Daemon::start`) and every NBD socket
            // is bound: tell the service manager (`Type=notify`).
            crate::notify::tell("READY=1");
            told_ready = true;
        }
        let ready = tokio::select! {
            _ = term.recv() => return Ok(()),
            _ = int.recv() => return Ok(()),
            _ = hup.recv() => {
                let (h, s, r) = (handle.clone(), served.clone(), reloader.clone());
                tokio::spawn(async move {
                    match r.reload(&h, &s).await {
                        Ok(result) => crate::control::server::log_reload(&result),
                        Err(e) => tracing::error!(reason = %e.message, "reload refused"),
                    }
                });
                continue;
            }
            r = daemon.next_ready() => r,
        };
        let Some(ready) = ready else {
            return Ok(());
        };
        // A connection of the configuration that cannot start stops the
        // daemon; one added at runtime is reported and left to its
        // administrator.
        let initial = waiting.remove(ready.config.name.as_str());
        match serve_one(ready, handle, served).await {
            Ok(()) => {}
            Err(e) if initial => return Err(e),
            Err(e) => tracing::error!("{e}"),
        }
    }
}

/// Serve one ready connection's volume on its NBD sockets.
async fn serve_one(ready: Ready, handle: &DaemonHandle, served: &Served) -> Result<(), RunError> {
    let c = &ready.config;
    let info = ready.result.map_err(|reason| RunError::Identify {
        name: c.name.clone(),
        reason,
    })?;
    // Block status (base:allocation): the target says where its volume
    // file's holes are, so clients skip them.
    let flags = if info.read_only {
        ExportFlags::read_only()
    } else {
        ExportFlags::read_write().with_multi_conn(true)
    }
    .with_block_status(true);
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let h = handle.clone();
    let id = ready.id;
    let mut tasks = vec![tokio::spawn(async move {
        while let Some(req) = rx.recv().await {
            h.submit(id, req);
        }
    })];
    // The block service takes whole blocks: clients are told so. Reads
    // and writes up to NBD_MAX_REQUEST are taken and split into commands
    // of at most the smaller of both sides' max_io (the bridge).
    let sizes = BlockSizes::new(info.block_size, info.block_size.max(4096), NBD_MAX_REQUEST);
    let export = Export::new(c.name.clone(), info.size, flags, tx)
        .with_block_sizes(sizes)
        .with_description(format!("relink volume from {:?}", c.targets));
    let nbd_err = |what: String, e: &dyn std::fmt::Display| RunError::Nbd {
        name: c.name.clone(),
        what,
        reason: e.to_string(),
    };
    let abort = |tasks: Vec<JoinHandle<()>>| tasks.into_iter().for_each(|t| t.abort());
    let config = ServerConfig::default()
        .with_max_payload(NBD_MAX_REQUEST)
        .with_max_connections(c.nbd.max_clients);
    let server = match Server::new(vec![export], config) {
        Ok(s) => Arc::new(s),
        Err(e) => {
            abort(tasks);
            return Err(nbd_err("export".into(), &e));
        }
    };
    let path = &c.nbd_socket;
    if std::fs::symlink_metadata(path).is_ok_and(|m| {
        use std::os::unix::fs::FileTypeExt;
        m.file_type().is_socket()
    }) {
        let _ = std::fs::remove_file(path);
    }
    let unix = match tokio::net::UnixListener::bind(path) {
        Ok(u) => u,
        Err(e) => {
            abort(tasks);
            return Err(nbd_err(format!("nbd_socket {}", path.display()), &e));
        }
    };
    // Who may connect: the mode and group the configuration gives.
    let access = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(c.nbd.mode)).and_then(|()| {
            match c.nbd.group {
                Some(gid) => std::os::unix::fs::chown(path, None, Some(gid)),
                None => Ok(()),
            }
        })
    };
    if let Err(e) = access {
        abort(tasks);
        let _ = std::fs::remove_file(path);
        return Err(nbd_err(
            format!("nbd_socket {} (mode, group)", path.display()),
            &e,
        ));
    }
    let s = server.clone();
    tasks.push(tokio::spawn(async move {
        if let Err(e) = s.serve_unix(unix).await {
            tracing::error!(error = %e, "nbd unix socket");
        }
    }));
    let mut shown = format!("unix {}", path.display());
    if let Some(addr) = c.nbd_tcp {
        let tcp = match tokio::net::TcpListener::bind(addr).await {
            Ok(t) => t,
            Err(e) => {
                abort(tasks);
                let _ = std::fs::remove_file(path);
                return Err(nbd_err(format!("nbd_tcp {addr}"), &e));
            }
        };
        let s = server.clone();
        tasks.push(tokio::spawn(async move {
            if let Err(e) = s.serve_tcp(tcp).await {
                tracing::error!(error = %e, "nbd tcp");
            }
        }));
        shown.push_str(&format!(" and tcp {addr}"));
    }
    if let Ok(mut m) = served.lock() {
        m.insert(
            c.name.clone(),
            ServedNbd {
                tasks,
                socket: path.clone(),
            },
        );
    }
    println!("connect {} serving nbd on {shown}", c.name);
    Ok(())
}
