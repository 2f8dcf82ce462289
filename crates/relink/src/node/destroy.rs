//! What the node does with a destroy call's answer: after a device loss
//! the provider reports the object "already released", the normal case
//! there; only an error is worth a warning.

/// Log the result of destroying `what`.
pub(super) fn log_destroy(
    what: &str,
    r: Result<relink_fabric::Destroyed, relink_fabric::DestroyError>,
) {
    match r {
        Ok(relink_fabric::Destroyed::Released) => {}
        Ok(relink_fabric::Destroyed::AlreadyReleased) => {
            tracing::debug!("{what} already released with its device");
        }
        Err(e) => tracing::warn!("destroying {what}: {e}"),
    }
}
