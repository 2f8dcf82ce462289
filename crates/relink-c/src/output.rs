//! Outputs: what sessions produce, taken by the application —
//! completions, delivered messages and events, per session
//! (`relink_poll_completion`, `relink_poll_delivery`, `relink_poll_event`)
//! or from the whole node, accepted sessions, ended receives and WRITE
//! notices included (`relink_poll_output`).

// One file per concern, below this one; `tests/header.rs` reads them for
// the outputs' section in this order: `completion` and `event` (the
// types and their conversion from relink's), `poll` (the calls and
// `relink_output`).
mod completion;
mod event;
mod poll;

pub use completion::*;
pub use event::*;
pub use poll::*;

#[cfg(test)]
mod tests;
