//! The tokio server: configuration, listeners, one task per connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use crate::error::{ConfigError, ProtocolError};
use crate::export::{Export, ExportInfo};
use crate::handshake::MAX_STRING_LEN;

/// Server limits. Build with [`ServerConfig::default`] and the `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The longest read or write accepted (advertised as the maximum block
    /// size); longer ones get `EINVAL` once a write's payload was read
    /// and discarded (never buffered). Default 32 MiB (nbdkit's default,
    /// and the NBD protocol's bound below which a payload is not to be
    /// taken for a denial of service).
    pub max_payload: u32,
    /// Requests of one connection in flight at the backend at once. Default 64.
    pub queue_depth: usize,
    /// Read and write payload bytes of one connection held at once (at
    /// least `max_payload` is always allowed). Default 64 MiB.
    pub max_in_flight_bytes: usize,
    /// Connections served at once, over all listeners; one more is
    /// closed as soon as it is accepted (and logged). Default 64.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_payload: 32 << 20,
            queue_depth: 64,
            max_in_flight_bytes: 64 << 20,
            max_connections: 64,
        }
    }
}

impl ServerConfig {
    /// Sets [`ServerConfig::max_payload`].
    #[must_use]
    pub fn with_max_payload(mut self, bytes: u32) -> Self {
        self.max_payload = bytes;
        self
    }
    /// Sets [`ServerConfig::queue_depth`].
    #[must_use]
    pub fn with_queue_depth(mut self, depth: usize) -> Self {
        self.queue_depth = depth;
        self
    }
    /// Sets [`ServerConfig::max_in_flight_bytes`].
    #[must_use]
    pub fn with_max_in_flight_bytes(mut self, bytes: usize) -> Self {
        self.max_in_flight_bytes = bytes;
        self
    }
    /// Sets [`ServerConfig::max_connections`].
    #[must_use]
    pub fn with_max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }
}

pub(crate) struct Shared {
    pub(crate) exports: Vec<Export>,
    pub(crate) infos: Vec<ExportInfo>,
    pub(crate) config: ServerConfig,
    /// Connections being served now.
    pub(crate) connections: AtomicUsize,
}

/// One connection counted in [`Shared::connections`] while it lives.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.connections.fetch_sub(1, Ordering::AcqRel);
    }
}

/// An NBD server for a fixed set of named exports. Cheap to clone (the
/// clones share the exports); serve any number of listeners and
/// connections with it.
#[derive(Clone)]
pub struct Server {
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("exports", &self.shared.infos)
            .field("config", &self.shared.config)
            .finish()
    }
}

impl Server {
    /// A server for `exports` (the first one is also the default export,
    /// chosen by the empty name unless an export is named "").
    ///
    /// # Errors
    /// [`ConfigError`] for no exports, duplicate names, names that are not
    /// NBD strings, a zero limit, or block sizes that break the protocol's
    /// rules ([`crate::BlockSizes::problem`]).
    pub fn new(exports: Vec<Export>, config: ServerConfig) -> Result<Self, ConfigError> {
        if exports.is_empty() {
            return Err(ConfigError::NoExports);
        }
        if config.max_payload == 0 {
            return Err(ConfigError::ZeroLimit("max_payload"));
        }
        if config.queue_depth == 0 {
            return Err(ConfigError::ZeroLimit("queue_depth"));
        }
        if config.max_connections == 0 {
            return Err(ConfigError::ZeroLimit("max_connections"));
        }
        for (i, e) in exports.iter().enumerate() {
            let n = &e.info.name;
            if n.len() > MAX_STRING_LEN || n.contains('\0') {
                return Err(ConfigError::BadName(n.clone()));
            }
            if exports[..i].iter().any(|o| &o.info.name == n) {
                return Err(ConfigError::DuplicateExport(n.clone()));
            }
            let b = e.info.block_sizes;
            if let Some(reason) = b.problem(config.max_payload) {
                return Err(ConfigError::BadBlockSizes {
                    name: n.clone(),
                    sizes: format!("{}/{}/{}", b.minimum, b.preferred, b.maximum),
                    reason,
                });
            }
        }
        let infos = exports.iter().map(|e| e.info.clone()).collect();
        Ok(Server {
            shared: Arc::new(Shared {
                exports,
                infos,
                config,
                connections: AtomicUsize::new(0),
            }),
        })
    }

    /// The exports' descriptions, in order.
    #[must_use]
    pub fn exports(&self) -> &[ExportInfo] {
        &self.shared.infos
    }

    /// Accepts connections on `listener` forever, serving each in its own
    /// task. A failed connection is logged and does not stop the loop.
    ///
    /// # Errors
    /// Only an `accept` error ends it.
    pub async fn serve_unix(&self, listener: UnixListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            self.spawn_connection(stream);
        }
    }

    /// Accepts TCP connections on `listener` forever (with `TCP_NODELAY`),
    /// serving each in its own task.
    ///
    /// # Errors
    /// Only an `accept` error ends it.
    pub async fn serve_tcp(&self, listener: TcpListener) -> std::io::Result<()> {
        loop {
            let (stream, _) = listener.accept().await?;
            let _ = stream.set_nodelay(true);
            self.spawn_connection(stream);
        }
    }

    /// Connections being served now.
    #[must_use]
    pub fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    fn spawn_connection<S>(&self, stream: S)
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limit = self.shared.config.max_connections;
        let served = &self.shared.connections;
        if served
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_err()
        {
            tracing::warn!(
                max_connections = limit,
                "an NBD client beyond the limit of connections served at once: closed"
            );
            drop(stream);
            return;
        }
        let server = self.clone();
        tokio::spawn(async move {
            // Counted out however the connection ends.
            let _slot = Slot(server.shared.clone());
            if let Err(e) = server.serve_connection(stream).await {
                tracing::debug!(error = %e, "nbd connection ended");
            }
        });
    }

    /// Serves one connection: handshake, then transmission until the
    /// client disconnects. Requests in flight are answered before it returns.
    ///
    /// # Errors
    /// `Ok(())` for a clean end (`NBD_CMD_DISC`, `NBD_OPT_ABORT`, or the
    /// client closing between messages); a [`ProtocolError`] for a protocol
    /// violation (bad magic, unknown client flags, unknown export by
    /// `NBD_OPT_EXPORT_NAME`, an oversize option) or a socket error.
    pub async fn serve_connection<S>(&self, stream: S) -> Result<(), ProtocolError>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        crate::connection::serve(self.shared.clone(), stream).await
    }
}
