//! Operations: messages, RDMA WRITE (also with immediate data, which the
//! peer's application is told of) and READ, and atomics on the peer's
//! advertised memory (named by tokens), each by a call of its own or any
//! of them through `relink_post` with a context its completion carries
//! back (there also a message sent from registered memory without a
//! copy, and a WRITE or READ over a scatter/gather list). A session accepts each with an id and completes it exactly once
//! (`relink_poll_completion`), also across recoveries; it holds at most
//! its `max_outstanding` operations whose completion was not taken
//! (`relink_room`; past it, `RELINK_ERR_AGAIN`).

// One file per concern, below this one; `tests/header.rs` reads them for
// the operations' section in the header's order: `op` and `work_request`
// (the types), `per_kind` and `post` (the calls), `submit` (what every
// submit shares, and `relink_room`).
mod op;
mod per_kind;
mod post;
mod submit;
mod work_request;

pub use op::*;
pub use per_kind::*;
pub use post::*;
pub use submit::relink_room;
pub(crate) use submit::{local, receive_len, submit_error};
pub use work_request::*;
