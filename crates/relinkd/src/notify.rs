//! The service manager's readiness protocol (`sd_notify(3)`): one
//! datagram to the Unix socket named by `$NOTIFY_SOCKET` (a path, or an
//! abstract name written with a leading `@`), so a systemd unit of
//! `Type=notify` starts its dependents only once the daemon serves.
//! Without `$NOTIFY_SOCKET` nothing is sent.

use std::os::unix::net::UnixDatagram;

/// Sends `state` (`READY=1`, `STOPPING=1`, ...) to `$NOTIFY_SOCKET`.
///
/// Returns `Ok(false)` when the variable is unset or empty (no service
/// manager is listening), `Ok(true)` once the datagram is sent.
///
/// # Errors
/// The socket cannot be created or the datagram cannot be sent (the
/// variable names no listening socket).
pub(crate) fn notify(state: &str) -> std::io::Result<bool> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET").filter(|t| !t.is_empty()) else {
        return Ok(false);
    };
    let sock = UnixDatagram::unbound()?;
    let bytes = target.as_encoded_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), &target)?;
    }
    Ok(true)
}

/// [`notify`], with a failure reported on stderr (the daemon serves on
/// whether or not its manager hears it).
pub(crate) fn tell(state: &str) {
    if let Err(e) = notify(state) {
        tracing::warn!(state, error = %e, "NOTIFY_SOCKET: cannot send");
    }
}
