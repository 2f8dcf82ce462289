//! The block service's messages, each one relink message: a [`Command`]
//! from the initiator, a [`Reply`] from the target. Big-endian, fixed
//! lengths, decoded with length checks and typed errors
//! ([`WireError`]); garbage never panics.
//!
//! A command ([`COMMAND_LEN`] = 36 bytes):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version ([`VERSION`]) |
//! | 1 | opcode ([`Opcode`]) |
//! | 2..4 | flags (bit 0: FUA; the rest must be 0) |
//! | 4..12 | tag |
//! | 12..20 | offset in the volume, bytes |
//! | 20..24 | length, bytes |
//! | 24..28 | the initiator buffer's region ([`BufferToken::region`]) |
//! | 28..36 | the initiator buffer's offset ([`BufferToken::offset`]) |
//!
//! A reply ([`REPLY_LEN`] = 12 bytes; [`IDENTIFY_REPLY_LEN`] = 48 with
//! the volume's description):
//!
//! | bytes | field |
//! |---|---|
//! | 0 | version |
//! | 1 | kind: `0x80` a reply, `0x81` a reply to IDENTIFY with the volume |
//! | 2..4 | status: 0 success, else [`TargetError::code`] |
//! | 4..12 | tag |
//! | 12..20 | (`0x81` only) volume size, bytes |
//! | 20..24 | block size |
//! | 24..28 | `max_io` |
//! | 28..30 | queue depth |
//! | 30..32 | flags (bit 0: read-only; the rest must be 0) |
//! | 32..48 | the target host's boot id ([`VolumeInfo::host_boot`]; 0: unknown) |
//!
//! The tag is at bytes 4..12 of both, so a target answers a command it
//! cannot decode, if that much of it came ([`peek_tag`]).

use relink::{BufferToken, RegionId};

use crate::error::TargetError;

/// The wire version this crate speaks.
pub const VERSION: u8 = 3;
/// A command's length.
pub const COMMAND_LEN: usize = 36;
/// A plain reply's length.
pub const REPLY_LEN: usize = 12;
/// A reply to IDENTIFY's length.
pub const IDENTIFY_REPLY_LEN: usize = 48;

const KIND_REPLY: u8 = 0x80;
const KIND_IDENTIFY_REPLY: u8 = 0x81;
const FLAG_FUA: u16 = 1;
const VOLUME_READ_ONLY: u16 = 1;

/// Names a command while it is outstanding: unique among one initiator's
/// outstanding commands; its reply carries it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tag(pub u64);

/// What a command asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Opcode {
    /// Describe the volume ([`VolumeInfo`] in the reply).
    Identify,
    /// Read `len` bytes at `offset` into the initiator's buffer.
    Read,
    /// Write `len` bytes from the initiator's buffer at `offset`.
    Write,
    /// Make every write acknowledged so far durable.
    Flush,
    /// Write `len` zero bytes at `offset` (no data moves).
    WriteZeroes,
    /// Discard `len` bytes at `offset`: they read as zeros afterwards.
    Trim,
    /// Which parts of `len` bytes at `offset` are holes: the target writes
    /// the [`Extents`] into the initiator's buffer (as a READ writes its
    /// data), at most as many as [`Extents::capacity`] of `max_io` bytes.
    BlockStatus,
}

impl Opcode {
    /// Every opcode.
    pub const ALL: [Opcode; 7] = [
        Opcode::Identify,
        Opcode::Read,
        Opcode::Write,
        Opcode::Flush,
        Opcode::WriteZeroes,
        Opcode::Trim,
        Opcode::BlockStatus,
    ];

    /// Its byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            Opcode::Identify => 0,
            Opcode::Read => 1,
            Opcode::Write => 2,
            Opcode::Flush => 3,
            Opcode::WriteZeroes => 4,
            Opcode::Trim => 5,
            Opcode::BlockStatus => 6,
        }
    }

    /// The opcode of a byte; `None` for one this version does not know.
    pub fn from_code(code: u8) -> Option<Opcode> {
        Opcode::ALL.into_iter().find(|o| o.code() == code)
    }

    /// Whether the command moves data through the initiator's buffer
    /// (READ, WRITE): those are bounded by `max_io`. BLOCK_STATUS uses
    /// the buffer and a staging slot too, for its extents.
    pub fn moves_data(self) -> bool {
        matches!(self, Opcode::Read | Opcode::Write)
    }
}

/// One extent of a BLOCK_STATUS: `len` bytes, a hole (reads as zeros,
/// nothing allocated) or data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Extent {
    /// Its length, bytes (more than 0).
    pub len: u64,
    /// A hole: not allocated, reads as zeros.
    pub hole: bool,
}

/// The extents of a BLOCK_STATUS as the target writes them into the
/// initiator's buffer: a count (`u32`), then per extent its length
/// (`u64`) and flags (`u32`: bit 0 a hole; the rest must be 0),
/// big-endian. They start at the command's offset, in order, and may end
/// before its end (the initiator asks again from there).
pub struct Extents;

/// Bytes of one extent in [`Extents`].
const EXTENT_LEN: usize = 12;
const EXTENT_HOLE: u32 = 1;

impl Extents {
    /// The most extents a buffer of `len` bytes holds.
    pub fn capacity(len: u32) -> usize {
        (len as usize).saturating_sub(4) / EXTENT_LEN
    }

    /// The bytes of `extents`.
    pub fn encode(extents: &[Extent]) -> Vec<u8> {
        let mut b = Vec::with_capacity(4 + EXTENT_LEN * extents.len());
        b.extend_from_slice(
            &u32::try_from(extents.len())
                .unwrap_or(u32::MAX)
                .to_be_bytes(),
        );
        for e in extents {
            b.extend_from_slice(&e.len.to_be_bytes());
            let flags = if e.hole { EXTENT_HOLE } else { 0 };
            b.extend_from_slice(&flags.to_be_bytes());
        }
        b
    }

    /// The extents at the start of `bytes` (what follows them is not
    /// read).
    ///
    /// # Errors
    /// [`WireError::Truncated`] when `bytes` ends inside the list;
    /// [`WireError::UnknownExtentFlags`] for a flag bit but the hole's.
    pub fn decode(bytes: &[u8]) -> Result<Vec<Extent>, WireError> {
        let got = bytes.len();
        let count = bytes
            .get(..4)
            .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")) as usize)
            .ok_or(WireError::Truncated { need: 4, got })?;
        let need = count
            .checked_mul(EXTENT_LEN)
            .and_then(|n| n.checked_add(4))
            .unwrap_or(usize::MAX);
        if got < need {
            return Err(WireError::Truncated { need, got });
        }
        bytes[4..need]
            .chunks_exact(EXTENT_LEN)
            .map(|c| {
                let flags = be_u32(c, 8);
                if flags & !EXTENT_HOLE != 0 {
                    return Err(WireError::UnknownExtentFlags(flags));
                }
                Ok(Extent {
                    len: be_u64(c, 0),
                    hole: flags & EXTENT_HOLE != 0,
                })
            })
            .collect()
    }
}

/// A command, as the initiator sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Command {
    /// Its tag.
    pub tag: Tag,
    /// What it asks for.
    pub opcode: Opcode,
    /// Force unit access: the target makes the data durable before it
    /// answers (WRITE, WRITE_ZEROES).
    pub fua: bool,
    /// Offset in the volume, bytes.
    pub offset: u64,
    /// Length, bytes.
    pub len: u32,
    /// The initiator's buffer the data moves through (READ, WRITE; the
    /// target ignores it for the rest).
    pub buffer: BufferToken,
}

/// What a target serves, in the reply to IDENTIFY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VolumeInfo {
    /// The volume's size, bytes.
    pub size: u64,
    /// Offsets and lengths are multiples of it.
    pub block_size: u32,
    /// The longest READ or WRITE, bytes.
    pub max_io: u32,
    /// Commands the target works on at once per session (more wait).
    pub queue_depth: u16,
    /// Writes, write-zeroes and trims fail with `ReadOnly`.
    pub read_only: bool,
    /// The boot id of the target's host (Linux
    /// `/proc/sys/kernel/random/boot_id`), 0 if unknown. Across a target
    /// restart it tells a process restart (the same boot: writes the old
    /// process acknowledged are in the host's page cache, and a FLUSH on
    /// the new one makes them durable) from a host restart (another boot:
    /// writes acknowledged and not flushed may be lost, so the next FLUSH
    /// must fail).
    pub host_boot: u128,
}

/// A reply, as the target sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reply {
    /// The command's tag.
    pub tag: Tag,
    /// Success (with the volume's description for IDENTIFY) or the
    /// target's error.
    pub status: Result<Option<VolumeInfo>, TargetError>,
}

/// Why bytes are not a command or a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the message needs.
    #[error("truncated: {got} bytes, {need} needed")]
    Truncated {
        /// Bytes needed.
        need: usize,
        /// Bytes there.
        got: usize,
    },
    /// More bytes than the message's length.
    #[error("{got} bytes, the message has {len}")]
    TrailingBytes {
        /// The message's length.
        len: usize,
        /// Bytes there.
        got: usize,
    },
    /// Another wire version.
    #[error("wire version {0}, this end speaks {VERSION}")]
    Version(u8),
    /// An opcode this version does not know.
    #[error("unknown opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A reply kind this version does not know.
    #[error("unknown reply kind {0:#04x}")]
    UnknownReplyKind(u8),
    /// Flag bits this version does not know.
    #[error("unknown flags {0:#06x}")]
    UnknownFlags(u16),
    /// A status code this version does not know.
    #[error("unknown status {0}")]
    UnknownStatus(u16),
    /// An extent's flag bits this version does not know.
    #[error("unknown extent flags {0:#010x}")]
    UnknownExtentFlags(u32),
    /// A reply to IDENTIFY whose status is an error.
    #[error("a reply to IDENTIFY with error status {0}")]
    IdentifyWithError(u16),
}

fn be_u16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn be_u64(b: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn be_u128(b: &[u8], at: usize) -> u128 {
    u128::from_be_bytes(b[at..at + 16].try_into().expect("16 bytes"))
}

fn exact(bytes: &[u8], len: usize) -> Result<(), WireError> {
    match bytes.len() {
        got if got < len => Err(WireError::Truncated { need: len, got }),
        got if got > len => Err(WireError::TrailingBytes { len, got }),
        _ => Ok(()),
    }
}

/// The tag of a command or reply, when at least its first 12 bytes are
/// there; `None` for fewer. The rest is not checked: for answering a
/// command that does not decode.
pub fn peek_tag(bytes: &[u8]) -> Option<Tag> {
    (bytes.len() >= 12).then(|| Tag(be_u64(bytes, 4)))
}

impl Command {
    /// Its bytes.
    pub fn encode(&self) -> [u8; COMMAND_LEN] {
        let mut b = [0u8; COMMAND_LEN];
        b[0] = VERSION;
        b[1] = self.opcode.code();
        let flags = if self.fua { FLAG_FUA } else { 0 };
        b[2..4].copy_from_slice(&flags.to_be_bytes());
        b[4..12].copy_from_slice(&self.tag.0.to_be_bytes());
        b[12..20].copy_from_slice(&self.offset.to_be_bytes());
        b[20..24].copy_from_slice(&self.len.to_be_bytes());
        b[24..28].copy_from_slice(&self.buffer.region.0.to_be_bytes());
        b[28..36].copy_from_slice(&self.buffer.offset.to_be_bytes());
        b
    }

    /// The command in `bytes` (all of them).
    ///
    /// # Errors
    /// [`WireError::Truncated`] or [`WireError::TrailingBytes`] unless
    /// there are exactly [`COMMAND_LEN`] bytes (checked after the
    /// version, when there is one); [`WireError::Version`],
    /// [`WireError::UnknownOpcode`], [`WireError::UnknownFlags`].
    pub fn decode(bytes: &[u8]) -> Result<Command, WireError> {
        match bytes.first() {
            None => {
                return Err(WireError::Truncated {
                    need: COMMAND_LEN,
                    got: 0,
                })
            }
            Some(&v) if v != VERSION => return Err(WireError::Version(v)),
            Some(_) => {}
        }
        exact(bytes, COMMAND_LEN)?;
        let opcode = Opcode::from_code(bytes[1]).ok_or(WireError::UnknownOpcode(bytes[1]))?;
        let flags = be_u16(bytes, 2);
        if flags & !FLAG_FUA != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        Ok(Command {
            tag: Tag(be_u64(bytes, 4)),
            opcode,
            fua: flags & FLAG_FUA != 0,
            offset: be_u64(bytes, 12),
            len: be_u32(bytes, 20),
            buffer: BufferToken {
                region: RegionId(be_u32(bytes, 24)),
                offset: be_u64(bytes, 28),
            },
        })
    }
}

impl Reply {
    /// Its bytes: [`REPLY_LEN`] of them, [`IDENTIFY_REPLY_LEN`] with a
    /// volume description.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(IDENTIFY_REPLY_LEN);
        b.push(VERSION);
        let info = match self.status {
            Ok(Some(info)) => Some(info),
            _ => None,
        };
        b.push(if info.is_some() {
            KIND_IDENTIFY_REPLY
        } else {
            KIND_REPLY
        });
        let status = match self.status {
            Ok(_) => 0,
            Err(e) => e.code(),
        };
        b.extend_from_slice(&status.to_be_bytes());
        b.extend_from_slice(&self.tag.0.to_be_bytes());
        if let Some(v) = info {
            b.extend_from_slice(&v.size.to_be_bytes());
            b.extend_from_slice(&v.block_size.to_be_bytes());
            b.extend_from_slice(&v.max_io.to_be_bytes());
            b.extend_from_slice(&v.queue_depth.to_be_bytes());
            let flags = if v.read_only { VOLUME_READ_ONLY } else { 0 };
            b.extend_from_slice(&flags.to_be_bytes());
            b.extend_from_slice(&v.host_boot.to_be_bytes());
        }
        b
    }

    /// The reply in `bytes` (all of them).
    ///
    /// # Errors
    /// [`WireError::Truncated`] or [`WireError::TrailingBytes`] unless
    /// the length is the kind's; [`WireError::Version`],
    /// [`WireError::UnknownReplyKind`], [`WireError::UnknownStatus`],
    /// [`WireError::IdentifyWithError`], [`WireError::UnknownFlags`].
    pub fn decode(bytes: &[u8]) -> Result<Reply, WireError> {
        match bytes.first() {
            None => {
                return Err(WireError::Truncated {
                    need: REPLY_LEN,
                    got: 0,
                })
            }
            Some(&v) if v != VERSION => return Err(WireError::Version(v)),
            Some(_) => {}
        }
        let Some(&kind) = bytes.get(1) else {
            return Err(WireError::Truncated {
                need: REPLY_LEN,
                got: bytes.len(),
            });
        };
        let len = match kind {
            KIND_REPLY => REPLY_LEN,
            KIND_IDENTIFY_REPLY => IDENTIFY_REPLY_LEN,
            other => return Err(WireError::UnknownReplyKind(other)),
        };
        exact(bytes, len)?;
        let code = be_u16(bytes, 2);
        let tag = Tag(be_u64(bytes, 4));
        if code != 0 {
            if kind == KIND_IDENTIFY_REPLY {
                return Err(WireError::IdentifyWithError(code));
            }
            let e = TargetError::from_code(code).ok_or(WireError::UnknownStatus(code))?;
            return Ok(Reply {
                tag,
                status: Err(e),
            });
        }
        if kind == KIND_REPLY {
            return Ok(Reply {
                tag,
                status: Ok(None),
            });
        }
        let flags = be_u16(bytes, 30);
        if flags & !VOLUME_READ_ONLY != 0 {
            return Err(WireError::UnknownFlags(flags));
        }
        Ok(Reply {
            tag,
            status: Ok(Some(VolumeInfo {
                size: be_u64(bytes, 12),
                block_size: be_u32(bytes, 20),
                max_io: be_u32(bytes, 24),
                queue_depth: be_u16(bytes, 28),
                read_only: flags & VOLUME_READ_ONLY != 0,
                host_boot: be_u128(bytes, 32),
            })),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn command() -> impl Strategy<Value = Command> {
        (
            any::<u64>(),
            0..Opcode::ALL.len(),
            any::<bool>(),
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
        )
            .prop_map(|(tag, op, fua, offset, len, region, boff)| Command {
                tag: Tag(tag),
                opcode: Opcode::ALL[op],
                fua,
                offset,
                len,
                buffer: BufferToken {
                    region: RegionId(region),
                    offset: boff,
                },
            })
    }

    fn reply() -> impl Strategy<Value = Reply> {
        let info = (
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u16>(),
            any::<bool>(),
            any::<u128>(),
        )
            .prop_map(
                |(size, block_size, max_io, queue_depth, read_only, host_boot)| VolumeInfo {
                    size,
                    block_size,
                    max_io,
                    queue_depth,
                    read_only,
                    host_boot,
                },
            );
        let status = prop_oneof![
            Just(Ok(None)),
            info.prop_map(|i| Ok(Some(i))),
            (0..TargetError::ALL.len()).prop_map(|i| Err(TargetError::ALL[i])),
        ];
        (any::<u64>(), status).prop_map(|(tag, status)| Reply {
            tag: Tag(tag),
            status,
        })
    }

    proptest! {
        #[test]
        fn commands_round_trip_and_every_truncation_is_an_error(c in command()) {
            let bytes = c.encode();
            prop_assert_eq!(Command::decode(&bytes), Ok(c));
            prop_assert_eq!(peek_tag(&bytes), Some(c.tag));
            for cut in 0..bytes.len() {
                prop_assert!(Command::decode(&bytes[..cut]).is_err(), "cut at {}", cut);
            }
            let mut long = bytes.to_vec();
            long.push(0);
            prop_assert_eq!(
                Command::decode(&long),
                Err(WireError::TrailingBytes { len: COMMAND_LEN, got: COMMAND_LEN + 1 })
            );
        }

        #[test]
        fn replies_round_trip_and_every_truncation_is_an_error(r in reply()) {
            let bytes = r.encode();
            prop_assert_eq!(Reply::decode(&bytes), Ok(r));
            prop_assert_eq!(peek_tag(&bytes), Some(r.tag));
            for cut in 0..bytes.len() {
                prop_assert!(Reply::decode(&bytes[..cut]).is_err(), "cut at {}", cut);
            }
        }

        #[test]
        fn garbage_never_panics_and_what_decodes_is_canonical(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            if let Ok(c) = Command::decode(&bytes) {
                prop_assert_eq!(&c.encode()[..], &bytes[..]);
            }
            if let Ok(r) = Reply::decode(&bytes) {
                prop_assert_eq!(r.encode(), bytes.clone());
            }
            let _ = peek_tag(&bytes);
        }

        #[test]
        fn a_versioned_prefix_with_garbage_never_panics(
            tail in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut bytes = vec![VERSION];
            bytes.extend_from_slice(&tail);
            if let Ok(c) = Command::decode(&bytes) {
                prop_assert_eq!(&c.encode()[..], &bytes[..]);
            }
            if let Ok(r) = Reply::decode(&bytes) {
                prop_assert_eq!(r.encode(), bytes.clone());
            }
        }
    }

    #[test]
    fn typed_errors_name_what_is_wrong() {
        let c = Command {
            tag: Tag(7),
            opcode: Opcode::Write,
            fua: true,
            offset: 4096,
            len: 512,
            buffer: BufferToken {
                region: RegionId(1),
                offset: 0,
            },
        };
        let mut b = c.encode();
        b[0] = 9;
        assert_eq!(Command::decode(&b), Err(WireError::Version(9)));
        b[0] = VERSION;
        b[1] = 0x42;
        assert_eq!(Command::decode(&b), Err(WireError::UnknownOpcode(0x42)));
        b[1] = Opcode::Write.code();
        b[3] = 0x03;
        assert_eq!(Command::decode(&b), Err(WireError::UnknownFlags(3)));
        let mut r = Reply {
            tag: Tag(7),
            status: Err(TargetError::ReadOnly),
        }
        .encode();
        r[3] = 200;
        assert_eq!(Reply::decode(&r), Err(WireError::UnknownStatus(200)));
        r[1] = 0x01;
        assert_eq!(Reply::decode(&r), Err(WireError::UnknownReplyKind(1)));
        assert_eq!(
            Reply::decode(&[VERSION]),
            Err(WireError::Truncated {
                need: REPLY_LEN,
                got: 1
            })
        );
    }
}
