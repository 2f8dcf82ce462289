//! The private data of `relink perf`: the client's hello in the connect,
//! the server's buffer in the accept (formats in the module doc of
//! [`perf`](super)).

use super::args::Op;

/// Leads both private data formats.
const MAGIC: [u8; 4] = *b"RLPF";
/// Version of both private data formats.
const VERSION: u8 = 1;

/// What the client tells the server in the connect's private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Hello {
    /// The operation the client runs.
    pub(super) op: Op,
    /// Bytes per message.
    pub(super) size: u32,
    /// Requests the client keeps outstanding.
    pub(super) depth: u32,
}

impl Hello {
    /// Encoded length: magic, version, op, size, depth.
    const LEN: usize = 4 + 1 + 1 + 4 + 4;

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.push(self.op.code());
        v.extend_from_slice(&self.size.to_be_bytes());
        v.extend_from_slice(&self.depth.to_be_bytes());
        v
    }

    /// Decodes; trailing bytes are ignored (a transport may pad private data).
    pub(super) fn decode(data: &[u8]) -> Result<Hello, String> {
        let b = check_header(data, Self::LEN, "connect")?;
        let op = Op::from_code(b[5]).ok_or_else(|| format!("unknown operation code {}", b[5]))?;
        Ok(Hello {
            op,
            size: u32::from_be_bytes(b[6..10].try_into().expect("4 bytes")),
            depth: u32::from_be_bytes(b[10..14].try_into().expect("4 bytes")),
        })
    }
}

/// What the server tells the client in the accept's private data: its
/// buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BufferInfo {
    /// Virtual address of the server's buffer.
    pub(super) addr: u64,
    /// Its remote key.
    pub(super) rkey: u32,
    /// Its length in bytes: the largest message the server takes.
    pub(super) len: u32,
}

impl BufferInfo {
    /// Encoded length: magic, version, addr, rkey, len.
    const LEN: usize = 4 + 1 + 8 + 4 + 4;

    pub(super) fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(Self::LEN);
        v.extend_from_slice(&MAGIC);
        v.push(VERSION);
        v.extend_from_slice(&self.addr.to_be_bytes());
        v.extend_from_slice(&self.rkey.to_be_bytes());
        v.extend_from_slice(&self.len.to_be_bytes());
        v
    }

    /// Decodes; trailing bytes are ignored (a transport may pad private data).
    pub(super) fn decode(data: &[u8]) -> Result<BufferInfo, String> {
        let b = check_header(data, Self::LEN, "accept")?;
        Ok(BufferInfo {
            addr: u64::from_be_bytes(b[5..13].try_into().expect("8 bytes")),
            rkey: u32::from_be_bytes(b[13..17].try_into().expect("4 bytes")),
            len: u32::from_be_bytes(b[17..21].try_into().expect("4 bytes")),
        })
    }
}

/// Checks length, magic and version of private data; returns its first
/// `len` bytes.
fn check_header<'a>(data: &'a [u8], len: usize, what: &str) -> Result<&'a [u8], String> {
    if data.len() < len {
        return Err(format!(
            "{what} private data of {} bytes is too short for relink perf ({len} bytes)",
            data.len()
        ));
    }
    if data[..4] != MAGIC {
        return Err(format!("{what} private data is not from relink perf"));
    }
    if data[4] != VERSION {
        return Err(format!(
            "{what} private data has version {}, this relink perf speaks {VERSION}",
            data[4]
        ));
    }
    Ok(&data[..len])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_checks() {
        let h = Hello {
            op: Op::Write,
            size: 65536,
            depth: 32,
        };
        let mut data = h.encode();
        assert_eq!(data.len(), Hello::LEN);
        assert!(data.len() <= relink_fabric::MAX_CONNECT_PRIVATE_DATA);
        assert_eq!(Hello::decode(&data), Ok(h));
        // Padding (as IB CM adds) is ignored.
        data.resize(56, 0);
        assert_eq!(Hello::decode(&data), Ok(h));
        assert!(Hello::decode(&data[..Hello::LEN - 1])
            .unwrap_err()
            .contains("too short"));
        data[0] = b'X';
        assert!(Hello::decode(&data).unwrap_err().contains("not from"));
        let mut bad_op = h.encode();
        bad_op[5] = 9;
        assert!(Hello::decode(&bad_op).unwrap_err().contains("operation"));
        let mut bad_version = h.encode();
        bad_version[4] = 2;
        assert!(Hello::decode(&bad_version).unwrap_err().contains("version"));
    }

    #[test]
    fn buffer_info_round_trip() {
        let b = BufferInfo {
            addr: 0x1234_5678_9abc_def0,
            rkey: 0xdead_beef,
            len: 1 << 20,
        };
        let data = b.encode();
        assert_eq!(data.len(), BufferInfo::LEN);
        assert!(data.len() <= relink_fabric::MAX_ACCEPT_PRIVATE_DATA);
        assert_eq!(BufferInfo::decode(&data), Ok(b));
        assert!(BufferInfo::decode(&data[..10]).is_err());
        assert!(BufferInfo::decode(&[]).is_err());
    }
}
