//! An NBD (Network Block Device) server front end: unmodified NBD clients
//! (`qemu-img`, `qemu-io`, `nbdcopy`, `nbdinfo`, `nbd-client`) use block
//! storage that a backend provides through a channel.
//!
//! # Layers
//!
//! - **Protocol, sans-IO** ([`handshake`], [`request`], [`reply`],
//!   [`consts`]): parsers and encoders over byte slices, each checking every
//!   length before it reads. The handshake is fixed newstyle with
//!   `NO_ZEROES`; it answers `NBD_OPT_GO`, `NBD_OPT_INFO` (export size and
//!   flags, the export's [`BlockSizes`] with the maximum capped to
//!   `max_payload`, name and description on request; a `NBD_OPT_GO` that
//!   does not request block sizes for an export whose minimum exceeds 1
//!   gets `NBD_REP_ERR_BLOCK_SIZE_REQD`), `NBD_OPT_EXPORT_NAME`, `NBD_OPT_LIST`,
//!   `NBD_OPT_ABORT`, `NBD_OPT_STRUCTURED_REPLY` and the metadata contexts'
//!   `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT` (one context,
//!   `base:allocation`, of an export with [`ExportFlags::block_status`];
//!   selecting needs structured replies first); every other option
//!   gets `NBD_REP_ERR_UNSUP`. Transmission takes `READ`, `WRITE`,
//!   `FLUSH`, `TRIM`, `WRITE_ZEROES` (with `NO_HOLE`), `BLOCK_STATUS`
//!   (with `REQ_ONE`, once `base:allocation` is selected) and `DISC`, with
//!   `FUA`. Replies are simple, or, once the client asked for structured
//!   replies, one chunk each with `NBD_REPLY_FLAG_DONE`: a read's data at
//!   its offset (`OFFSET_DATA`), a block status's extents
//!   (`BLOCK_STATUS`: holes are `HOLE | ZERO`), `NONE` for a success
//!   without data, and an error with its number and a message in words
//!   (`ERROR`: the backend's [`BlockError`] or the refusal, at most 4096
//!   bytes).
//! - **Server** ([`Server`]): tokio tasks serving [`Export`]s on Unix and
//!   TCP listeners. Per connection, a reader checks each request and hands
//!   it to the backend, up to [`ServerConfig::queue_depth`] requests and
//!   [`ServerConfig::max_in_flight_bytes`] payload bytes at once; replies
//!   go out as the backend completes them, in any order (NBD matches them
//!   by cookie).
//! - **Backend** ([`BlockRequest`] on a `tokio::sync::mpsc` channel): any
//!   task or loop that answers block operations. [`FileStore`] and
//!   [`spawn_file_export`] are the file backend.
//!
//! # Errors, by layer
//!
//! - A request that cannot be parsed in step (bad request magic), bad
//!   client flags, an unknown name by `NBD_OPT_EXPORT_NAME` or an option
//!   over [`handshake::MAX_OPTION_LEN`] end the connection with a
//!   [`ProtocolError`] (requests in flight are still answered).
//! - A well-formed request the export cannot take gets an NBD error reply
//!   and the connection continues ([`request::Rejection`]): `EINVAL` for an
//!   unknown command or flag, an operation the export does not offer, a
//!   read or write longer than the export's maximum block size (at most
//!   [`ServerConfig::max_payload`]), an offset or length that is not a
//!   multiple of the export's minimum block size, or a read outside the
//!   export; `ENOSPC` for a write, trim or zeroing past the end;
//!   `EPERM` for any modification of a read-only export. A refused
//!   write's payload is read first — dropped in 64 KiB pieces, never
//!   buffered whole — and the error reply follows it, so the stream stays
//!   in step and a client still sending the payload (libnbd) never sees a
//!   reply to a request it has not finished.
//! - A backend failure is a [`BlockError`], sent as its errno
//!   ([`BlockError::nbd_errno`]).
//!
//! # The backend contract
//!
//! The server sends a [`BlockRequest`] only after checking it: in range,
//! allowed by the export's [`ExportFlags`], not zero-length (those are
//! answered directly), reads and writes at most `max_payload`. The backend
//! answers each on its `reply` oneshot, in any order and with any
//! concurrency:
//!
//! - `Read` → [`BlockReply::Data`] of exactly `len` bytes.
//! - `Write`, `Trim`, `WriteZeroes`, `Flush` → [`BlockReply::Done`].
//! - `BlockStatus` → [`BlockReply::Extents`]: from its offset, in order,
//!   at least one (the server sends those inside the range).
//! - **Write** completes when later reads see the data. **FUA** (`fua:
//!   true`) completes only when the data is durable. **Flush** completes
//!   only when every write the backend completed before receiving the flush
//!   is durable; this is the promise `NBD_CMD_FLUSH` makes to the client.
//! - **Trim** may do nothing; **WriteZeroes** makes the range read as zeroes
//!   (a hole only when `may_trim`).
//! - An error is one [`BlockError`] variant, i.e. one errno. A dropped
//!   oneshot becomes `EIO`; a closed channel `ESHUTDOWN`.
//! - [`ExportFlags::multi_conn`] may be set only if a flush on one
//!   connection covers writes completed on all connections to the export.
//!
//! # Example
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use relink_nbd::{spawn_file_export, FileStore, Server, ServerConfig};
//! let export = spawn_file_export("disk", FileStore::open("/tmp/disk.img", false)?)?;
//! let server = Server::new(vec![export], ServerConfig::default())?;
//! let listener = tokio::net::UnixListener::bind("/tmp/nbd.sock")?;
//! server.serve_unix(listener).await?;
//! # Ok(()) }
//! ```
//!
//! A client then uses `nbd+unix:///disk?socket=/tmp/nbd.sock`.

mod connection;
pub mod consts;
mod error;
mod export;
mod file;
pub mod handshake;
pub mod reply;
pub mod request;
mod server;

pub use error::{BlockError, ConfigError, ProtocolError};
pub use export::{
    BlockOp, BlockReply, BlockRequest, BlockSizes, Export, ExportFlags, ExportInfo, Extent,
};
pub use file::{allocation, spawn_file_export, FileStore};
pub use server::{Server, ServerConfig};
