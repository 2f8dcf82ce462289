//! Typed errors, one enum per kind of operation.
//!
//! Every variant is classed by [`ErrorClass`]: a caller that sees
//! `DeviceFatal` must treat the device as gone (recovery starts), `Retryable`
//! may succeed later on the same device, `Final` is a caller bug or a hard
//! limit.

use thiserror::Error;

use crate::verbs::QpState;

/// How a caller should react to an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Try again later (queue full, address not yet resolvable).
    Retryable,
    /// The device is gone: start recovery, destroy only.
    DeviceFatal,
    /// A caller error or a hard limit: retrying will not help.
    Final,
}

/// What a destroy call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[must_use]
pub enum Destroyed {
    /// The object was released on a live device.
    Released,
    /// The device had already gone; the object was released with it.
    AlreadyReleased,
}

/// Errors of host memory access.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryError {
    /// The range lies outside the memory.
    #[error("range {offset}+{len} is outside memory of {size} bytes")]
    OutOfBounds {
        /// Start of the range.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// Size of the memory.
        size: usize,
    },
    /// An atomic on a non 8-byte-aligned address.
    #[error("atomic at offset {offset} is not 8-byte aligned")]
    Misaligned {
        /// Offset asked for.
        offset: usize,
    },
    /// No memory could be allocated.
    #[error("cannot allocate {0} bytes")]
    Exhausted(usize),
}

/// Errors of opening a device or a device-level query.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// No device with that identity is present (it was removed or reset).
    #[error("no device {0} (removed or reset)")]
    NoDevice(String),
    /// The provider's backing system failed.
    #[error("device open failed: {0}")]
    Io(#[from] std::io::Error),
}

impl OpenError {
    /// How to react: `NoDevice` is `DeviceFatal` (the registration is
    /// gone), `Io` is `Retryable`.
    pub fn class(&self) -> ErrorClass {
        match self {
            OpenError::NoDevice(_) => ErrorClass::DeviceFatal,
            OpenError::Io(_) => ErrorClass::Retryable,
        }
    }
}

/// Errors of creating a verbs object (PD, CQ, SRQ, MR, MW, QP).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CreateError {
    /// The device under the parent object is gone.
    #[error("device lost")]
    DeviceLost,
    /// A parent handle is stale or was never valid.
    #[error("invalid {0} handle")]
    InvalidHandle(&'static str),
    /// An attribute is out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The device is out of this kind of object.
    #[error("out of {0}")]
    Exhausted(&'static str),
    /// Parent objects belong to different devices or protection domains.
    #[error("objects of different devices or PDs: {0}")]
    Mismatch(&'static str),
}

impl CreateError {
    /// How to react: `DeviceLost` is `DeviceFatal`, `Exhausted` is
    /// `Retryable`, everything else `Final`.
    pub fn class(&self) -> ErrorClass {
        match self {
            CreateError::DeviceLost => ErrorClass::DeviceFatal,
            CreateError::Exhausted(_) => ErrorClass::Retryable,
            _ => ErrorClass::Final,
        }
    }
}

/// Errors of destroying a verbs object. A device loss is not an error here:
/// destroy returns [`Destroyed::AlreadyReleased`].
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DestroyError {
    /// The handle is stale (destroyed twice) or was never valid.
    #[error("invalid {0} handle")]
    InvalidHandle(&'static str),
    /// Children still reference the object (e.g. a PD with MRs).
    #[error("{0} still in use")]
    Busy(&'static str),
}

/// Errors of posting work requests. `posted` counts the requests of the
/// batch that were accepted before the failing one (`bad_wr`).
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The device is gone.
    #[error("device lost ({posted} posted)")]
    DeviceLost {
        /// Requests accepted before the failure.
        posted: usize,
    },
    /// The QP/SRQ handle is stale.
    #[error("invalid {0} handle")]
    InvalidHandle(&'static str),
    /// The queue is full.
    #[error("queue full ({posted} posted)")]
    QueueFull {
        /// Requests accepted before the failure.
        posted: usize,
    },
    /// The QP's state does not accept this post (e.g. send before RTS).
    #[error("QP in state {state:?} ({posted} posted)")]
    BadState {
        /// The state the QP is in.
        state: QpState,
        /// Requests accepted before the failure.
        posted: usize,
    },
    /// A request is malformed (too many SGEs, bad atomic length, ...).
    #[error("invalid work request: {reason} ({posted} posted)")]
    InvalidArgument {
        /// What is wrong.
        reason: String,
        /// Requests accepted before the failure.
        posted: usize,
    },
}

impl PostError {
    /// How to react: `DeviceLost` is `DeviceFatal`, `QueueFull` is
    /// `Retryable` (once completions make room), everything else `Final`.
    pub fn class(&self) -> ErrorClass {
        match self {
            PostError::DeviceLost { .. } => ErrorClass::DeviceFatal,
            PostError::QueueFull { .. } => ErrorClass::Retryable,
            _ => ErrorClass::Final,
        }
    }

    /// How many requests of the batch were accepted.
    pub fn posted(&self) -> usize {
        match self {
            PostError::DeviceLost { posted }
            | PostError::QueueFull { posted }
            | PostError::BadState { posted, .. }
            | PostError::InvalidArgument { posted, .. } => *posted,
            PostError::InvalidHandle(_) => 0,
        }
    }
}

/// Errors of polling or arming a CQ.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PollError {
    /// The CQ handle is stale.
    #[error("invalid CQ handle")]
    InvalidHandle,
}

/// Errors of connection-management calls.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CmError {
    /// The id (or the QP given) is stale.
    #[error("invalid {0} handle")]
    InvalidHandle(&'static str),
    /// The call does not fit the id's state (connect before route, ...).
    #[error("invalid in this state: {0}")]
    BadState(&'static str),
    /// Private data longer than the transport allows.
    #[error("private data of {len} bytes exceeds the limit of {max}")]
    PrivateDataTooLong {
        /// Bytes of private data the call was given.
        len: usize,
        /// The transport's limit for this call (a `MAX_*_PRIVATE_DATA` of
        /// [`cm`](crate::cm)).
        max: usize,
    },
    /// The address is already bound by another id.
    #[error("address {0} already in use")]
    AddrInUse(std::net::SocketAddr),
    /// No local device owns or reaches the address.
    #[error("no device for address {0}")]
    AddrNotAvailable(std::net::IpAddr),
    /// The device the id is bound to is gone.
    #[error("device lost")]
    DeviceLost,
    /// The port of the id's device is not ACTIVE (its netdev is down, no
    /// carrier): the call would send a CM message now, and the provider
    /// holds it back until the port is up again.
    #[error("the port of {0} is down")]
    PortDown(String),
    /// The provider's backing system failed.
    #[error("{0}")]
    Io(String),
}

impl CmError {
    /// How to react: `DeviceLost` is `DeviceFatal`; `AddrNotAvailable`,
    /// `AddrInUse`, `PortDown` and `Io` are `Retryable` (addresses and
    /// ports come and go with devices); everything else `Final`.
    pub fn class(&self) -> ErrorClass {
        match self {
            CmError::DeviceLost => ErrorClass::DeviceFatal,
            CmError::AddrNotAvailable(_)
            | CmError::AddrInUse(_)
            | CmError::PortDown(_)
            | CmError::Io(_) => ErrorClass::Retryable,
            _ => ErrorClass::Final,
        }
    }
}
