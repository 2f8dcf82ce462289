//! Typed handles for provider objects.
//!
//! A handle is an opaque number the provider gave out; it never points into
//! memory. A handle of a destroyed object, or of an object on a device that
//! has gone, is never reused by the provider, so a stale handle is always
//! detected rather than aliasing a new object.

macro_rules! handle {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

handle!(
    /// An open device context (`ibv_context`).
    ContextId
);
handle!(
    /// A protection domain.
    PdId
);
handle!(
    /// A completion queue.
    CqId
);
handle!(
    /// A shared receive queue.
    SrqId
);
handle!(
    /// A memory region.
    MrId
);
handle!(
    /// A memory window.
    MwId
);
handle!(
    /// A reliable-connected queue pair.
    QpId
);
handle!(
    /// A connection-manager identifier (`rdma_cm_id`).
    CmId
);
