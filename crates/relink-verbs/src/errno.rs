//! Typed errors from `errno`: how a failed verbs or rdma_cm call maps onto
//! the provider interface's error enums.
//!
//! The rules, in one place (and unit-tested without RDMA hardware):
//!
//! - `EIO`, `ENODEV`, `ENXIO`, `ESHUTDOWN`, `ENOTCONN` on a device call mean
//!   the device is gone (a disassociated context answers `EIO`; a removed
//!   device's netdev `ENODEV`): creates and posts report `DeviceLost`, and a
//!   destroy reports [`Destroyed::AlreadyReleased`] — the kernel released the
//!   object with the device, as it does when `RDMAV_ALLOW_DISASSOC_DESTROY`
//!   lets the destroy through.
//! - `ENOMEM`, `ENOSPC`, `EAGAIN`, `EMFILE`, `ENFILE` are exhaustion
//!   (retryable); on a post they mean the queue is full.
//! - `EBUSY` on a destroy means children still use the object.
//! - Everything else is a caller error (`InvalidArgument`), reported with the
//!   errno's text.
//!
//! The constants are Linux's (rdma-core only exists there).

#![forbid(unsafe_code)]

use std::net::{IpAddr, SocketAddr};

use relink_fabric::{CmError, CreateError, DestroyError, Destroyed, OpenError, PostError};

/// Linux errno values the mapping and its tests name (a test checks each
/// against libc; some are named only by the tests).
#[allow(missing_docs, dead_code)]
pub mod codes {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const ENXIO: i32 = 6;
    pub const EBADF: i32 = 9;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const EACCES: i32 = 13;
    pub const EFAULT: i32 = 14;
    pub const EBUSY: i32 = 16;
    pub const EEXIST: i32 = 17;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const ENFILE: i32 = 23;
    pub const EMFILE: i32 = 24;
    pub const ENOSPC: i32 = 28;
    pub const ERANGE: i32 = 34;
    pub const ENOSYS: i32 = 38;
    pub const ENODATA: i32 = 61;
    pub const EOPNOTSUPP: i32 = 95;
    pub const EADDRINUSE: i32 = 98;
    pub const EADDRNOTAVAIL: i32 = 99;
    pub const ENETDOWN: i32 = 100;
    pub const ENETUNREACH: i32 = 101;
    pub const ENOTCONN: i32 = 107;
    pub const ESHUTDOWN: i32 = 108;
    pub const ETIMEDOUT: i32 = 110;
    pub const ECONNREFUSED: i32 = 111;
    pub const EHOSTUNREACH: i32 = 113;
}

use codes::*;

/// The errno's text, e.g. `"Input/output error (os error 5)"`.
pub fn describe(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// Whether `errno` from a call on a device means the device is gone.
pub fn is_device_gone(errno: i32) -> bool {
    matches!(errno, EIO | ENODEV | ENXIO | ESHUTDOWN | ENOTCONN)
}

/// Whether `errno` means a resource ran out.
pub fn is_exhausted(errno: i32) -> bool {
    matches!(errno, ENOMEM | ENOSPC | EAGAIN | EMFILE | ENFILE)
}

/// A failed create (`ibv_alloc_pd`, `ibv_create_cq`, `ibv_reg_mr`, ...) of
/// `what` on a device; `device_alive` is what the provider knows of it.
pub fn create_error(errno: i32, what: &'static str, device_alive: bool) -> CreateError {
    if !device_alive || is_device_gone(errno) {
        CreateError::DeviceLost
    } else if is_exhausted(errno) {
        CreateError::Exhausted(what)
    } else {
        CreateError::InvalidArgument(format!("{what}: {}", describe(errno)))
    }
}

/// The result of a destroy call that returned `rc` (0 or an errno; verbs
/// destroys return the errno itself) on a device the provider believes
/// `device_alive`.
pub fn destroy_result(
    rc: i32,
    what: &'static str,
    device_alive: bool,
) -> Result<Destroyed, DestroyError> {
    match rc {
        0 if device_alive => Ok(Destroyed::Released),
        0 => Ok(Destroyed::AlreadyReleased),
        e if is_device_gone(e) => Ok(Destroyed::AlreadyReleased),
        EBUSY => Err(DestroyError::Busy(what)),
        // Anything else: the object may still exist, so the handle stays
        // valid and the caller may try again.
        _ => Err(DestroyError::Busy(what)),
    }
}

/// A failed post (`ibv_post_send`/`ibv_post_recv`/`ibv_post_srq_recv`)
/// after `posted` requests of the batch were accepted.
pub fn post_error(errno: i32, posted: usize, device_alive: bool) -> PostError {
    if !device_alive || is_device_gone(errno) {
        PostError::DeviceLost { posted }
    } else if is_exhausted(errno) {
        PostError::QueueFull { posted }
    } else {
        PostError::InvalidArgument {
            reason: describe(errno),
            posted,
        }
    }
}

/// A failed `ibv_open_device` (or a query needed to open it).
pub fn open_error(errno: i32, device: &str) -> OpenError {
    if matches!(errno, ENODEV | ENXIO | ENOENT) {
        OpenError::NoDevice(device.to_string())
    } else {
        OpenError::Io(std::io::Error::from_raw_os_error(errno))
    }
}

/// What a connection-management call was doing when it failed, for the
/// error it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmOp {
    /// `rdma_create_id` / `rdma_create_event_channel`.
    Create,
    /// `rdma_bind_addr` to this address.
    Bind(SocketAddr),
    /// `rdma_listen`.
    Listen(SocketAddr),
    /// `rdma_resolve_addr` to this destination.
    ResolveAddr(SocketAddr),
    /// `rdma_resolve_route`.
    ResolveRoute,
    /// `rdma_connect`, `rdma_accept`, `rdma_reject`, `rdma_disconnect`, or a
    /// QP transition they need.
    Connect(&'static str),
}

/// A failed rdma_cm call.
pub fn cm_error(errno: i32, op: CmOp, device_alive: bool) -> CmError {
    if !device_alive {
        return CmError::DeviceLost;
    }
    match (op, errno) {
        (CmOp::Bind(a) | CmOp::Listen(a), EADDRINUSE) => CmError::AddrInUse(a),
        (CmOp::Bind(a), EADDRNOTAVAIL | ENODEV) => CmError::AddrNotAvailable(a.ip()),
        (CmOp::ResolveAddr(a), EADDRNOTAVAIL | ENODEV | ENETUNREACH | EHOSTUNREACH | ENETDOWN) => {
            CmError::AddrNotAvailable(a.ip())
        }
        (CmOp::Connect(_) | CmOp::Listen(_) | CmOp::ResolveRoute, e) if is_device_gone(e) => {
            CmError::DeviceLost
        }
        (CmOp::Connect(what), EINVAL) => CmError::BadState(what),
        (CmOp::ResolveRoute, EINVAL) => CmError::BadState("resolve_route needs a resolved address"),
        (CmOp::Listen(_), EINVAL) => CmError::BadState("listen needs a bound id"),
        (_, e) => CmError::Io(format!("{op:?}: {}", describe(e))),
    }
}

/// The address of a wildcard or explicit bind, for errors without one.
pub fn unspecified(v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED)
    } else {
        IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::ErrorClass;

    #[test]
    fn device_loss_maps_to_device_fatal() {
        for e in [EIO, ENODEV, ENXIO, ESHUTDOWN, ENOTCONN] {
            assert_eq!(create_error(e, "PD", true), CreateError::DeviceLost);
            assert_eq!(post_error(e, 3, true), PostError::DeviceLost { posted: 3 });
            assert_eq!(
                destroy_result(e, "QP", true),
                Ok(Destroyed::AlreadyReleased)
            );
            assert_eq!(
                cm_error(e, CmOp::Connect("connect"), true).class(),
                ErrorClass::DeviceFatal
            );
        }
        // Whatever the errno, a device known to be gone is DeviceLost.
        assert_eq!(create_error(EINVAL, "CQ", false), CreateError::DeviceLost);
        assert_eq!(
            post_error(EINVAL, 0, false).class(),
            ErrorClass::DeviceFatal
        );
        assert_eq!(
            cm_error(EINVAL, CmOp::ResolveRoute, false),
            CmError::DeviceLost
        );
    }

    #[test]
    fn destroy_outcomes() {
        assert_eq!(destroy_result(0, "PD", true), Ok(Destroyed::Released));
        assert_eq!(
            destroy_result(0, "PD", false),
            Ok(Destroyed::AlreadyReleased)
        );
        assert_eq!(
            destroy_result(EBUSY, "PD", true),
            Err(DestroyError::Busy("PD"))
        );
        assert!(destroy_result(EINVAL, "MR", true).is_err());
    }

    #[test]
    fn exhaustion_is_retryable() {
        for e in [ENOMEM, ENOSPC, EAGAIN, EMFILE, ENFILE] {
            assert_eq!(create_error(e, "QP", true), CreateError::Exhausted("QP"));
            assert_eq!(create_error(e, "QP", true).class(), ErrorClass::Retryable);
            assert_eq!(post_error(e, 1, true), PostError::QueueFull { posted: 1 });
        }
    }

    #[test]
    fn caller_errors_are_final_and_say_why() {
        let e = create_error(EINVAL, "CQ", true);
        assert_eq!(e.class(), ErrorClass::Final);
        assert!(e.to_string().contains("CQ"), "{e}");
        match post_error(EINVAL, 2, true) {
            PostError::InvalidArgument { reason, posted } => {
                assert_eq!(posted, 2);
                assert!(reason.contains("Invalid argument"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cm_mapping() {
        let a: SocketAddr = "10.0.0.1:7471".parse().unwrap();
        assert_eq!(
            cm_error(EADDRINUSE, CmOp::Bind(a), true),
            CmError::AddrInUse(a)
        );
        assert_eq!(
            cm_error(EADDRINUSE, CmOp::Listen(a), true),
            CmError::AddrInUse(a)
        );
        assert_eq!(
            cm_error(EADDRNOTAVAIL, CmOp::Bind(a), true),
            CmError::AddrNotAvailable(a.ip())
        );
        assert_eq!(
            cm_error(ENETUNREACH, CmOp::ResolveAddr(a), true).class(),
            ErrorClass::Retryable
        );
        assert_eq!(
            cm_error(EINVAL, CmOp::Connect("accept"), true),
            CmError::BadState("accept")
        );
        assert!(matches!(
            cm_error(EPERM, CmOp::Create, true),
            CmError::Io(_)
        ));
    }

    #[test]
    fn open_mapping() {
        assert!(matches!(open_error(ENODEV, "rxe0"), OpenError::NoDevice(d) if d == "rxe0"));
        assert!(matches!(open_error(EACCES, "rxe0"), OpenError::Io(_)));
    }

    #[cfg(feature = "rdma")]
    #[test]
    fn constants_match_libc() {
        assert_eq!(
            [EPERM, ENOENT, EIO, ENXIO, EBADF, EAGAIN, ENOMEM, EACCES, EFAULT, EBUSY],
            [
                libc::EPERM,
                libc::ENOENT,
                libc::EIO,
                libc::ENXIO,
                libc::EBADF,
                libc::EAGAIN,
                libc::ENOMEM,
                libc::EACCES,
                libc::EFAULT,
                libc::EBUSY
            ]
        );
        assert_eq!(
            [EEXIST, ENODEV, EINVAL, ENFILE, EMFILE, ENOSPC, ERANGE, ENOSYS, ENODATA],
            [
                libc::EEXIST,
                libc::ENODEV,
                libc::EINVAL,
                libc::ENFILE,
                libc::EMFILE,
                libc::ENOSPC,
                libc::ERANGE,
                libc::ENOSYS,
                libc::ENODATA
            ]
        );
        assert_eq!(
            [
                EOPNOTSUPP,
                EADDRINUSE,
                EADDRNOTAVAIL,
                ENETDOWN,
                ENETUNREACH,
                ENOTCONN
            ],
            [
                libc::EOPNOTSUPP,
                libc::EADDRINUSE,
                libc::EADDRNOTAVAIL,
                libc::ENETDOWN,
                libc::ENETUNREACH,
                libc::ENOTCONN
            ]
        );
        assert_eq!(
            [ESHUTDOWN, ETIMEDOUT, ECONNREFUSED, EHOSTUNREACH],
            [
                libc::ESHUTDOWN,
                libc::ETIMEDOUT,
                libc::ECONNREFUSED,
                libc::EHOSTUNREACH
            ]
        );
    }
}
