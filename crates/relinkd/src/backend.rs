//! The provider of the configured backend: the one place that picks the
//! fabric the node runs on.

use std::sync::Arc;

use relink::Provider;

use crate::config::Backend;
use crate::node_loop::StartError;

/// Open the provider of `backend`.
///
/// # Errors
/// [`StartError::Backend`] when the soft registry cannot be opened,
/// [`StartError::RdmaCore`] when rdma-core cannot start (no RDMA support,
/// no permission on `/dev/infiniband`, or a binary without the `rdma`
/// feature).
pub(crate) fn open(backend: &Backend) -> Result<Arc<dyn Provider>, StartError> {
    match backend {
        Backend::Soft { dir } => {
            let host = relink_soft::TcpHost::open(dir).map_err(|e| StartError::Backend {
                dir: dir.clone(),
                reason: e.to_string(),
            })?;
            Ok(Arc::new(host))
        }
        Backend::RdmaCore { source } => {
            let config = relink_verbs::VerbsConfig {
                default_source: *source,
                ..relink_verbs::VerbsConfig::default()
            };
            let provider = relink_verbs::VerbsProvider::with_config(config).map_err(|e| {
                StartError::RdmaCore {
                    reason: e.to_string(),
                }
            })?;
            Ok(Arc::new(provider))
        }
    }
}
