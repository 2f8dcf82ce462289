//! How an application's message travels as relink messages: in
//! fragments of at most a receive slot's payload, each behind a 4-byte
//! header saying how many bytes of the message still follow it (0 on the
//! last). The header's top bit says that the message carries remote CQ
//! data (`fi_senddata`): 8 bytes after the first fragment's header.
//!
//! relink delivers its messages once each and in order, across any device
//! loss, so the receiver puts the fragments one after the other into the
//! receive buffer the application posted and completes it at the fragment
//! that says 0. A message may so be much larger than a relink receive
//! slot (`FI_RELINK_SLOT_SIZE`): `max_msg_size` is the provider's own
//! (`FI_RELINK_MAX_MSG_SIZE`), and a session's memory stays its slots'.

#![forbid(unsafe_code)]

/// The header's length.
pub const HEADER: usize = 4;

/// The largest message a header can announce.
pub const MAX_MESSAGE: usize = (DATA_FLAG - 1) as usize;

/// The header's bit for "remote CQ data follows".
const DATA_FLAG: u32 = 1 << 31;

/// The bytes of remote CQ data.
pub const DATA: usize = 8;

/// The fragments of a message of `len` bytes with at most `payload`
/// bytes each: (start, end, bytes still to come after it). One empty
/// fragment for an empty message.
pub fn fragments(len: usize, payload: usize) -> impl Iterator<Item = (usize, usize, u32)> {
    let payload = payload.max(1);
    let count = len.div_ceil(payload).max(1);
    (0..count).map(move |i| {
        let start = i * payload;
        let end = (start + payload).min(len);
        (start, end, (len - end) as u32)
    })
}

/// A fragment: the header, the remote CQ data if any (first fragments
/// only), then `part`.
pub fn encode(more: u32, data: Option<u64>, part: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER + DATA + part.len());
    let flag = if data.is_some() { DATA_FLAG } else { 0 };
    m.extend_from_slice(&(more | flag).to_le_bytes());
    if let Some(d) = data {
        m.extend_from_slice(&d.to_le_bytes());
    }
    m.extend_from_slice(part);
    m
}

/// A fragment that is shorter than its header (and data).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a message of {0} bytes from the peer has no fragment header: not the relink provider's")]
pub struct FrameError(pub usize);

/// A fragment, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// Bytes of the message still to come after this fragment.
    pub more: u32,
    /// The remote CQ data it carries.
    pub data: Option<u64>,
    /// Its share of the message.
    pub part: &'a [u8],
}

/// The fragment in `m`, length-checked.
pub fn decode(m: &[u8]) -> Result<Fragment<'_>, FrameError> {
    let head: [u8; HEADER] = m
        .get(..HEADER)
        .and_then(|h| h.try_into().ok())
        .ok_or(FrameError(m.len()))?;
    let word = u32::from_le_bytes(head);
    let more = word & !DATA_FLAG;
    if word & DATA_FLAG == 0 {
        return Ok(Fragment {
            more,
            data: None,
            part: &m[HEADER..],
        });
    }
    let data: [u8; DATA] = m
        .get(HEADER..HEADER + DATA)
        .and_then(|d| d.try_into().ok())
        .ok_or(FrameError(m.len()))?;
    Ok(Fragment {
        more,
        data: Some(u64::from_le_bytes(data)),
        part: &m[HEADER + DATA..],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_cover_the_message_in_order() {
        assert_eq!(fragments(0, 10).collect::<Vec<_>>(), vec![(0, 0, 0)]);
        assert_eq!(fragments(10, 10).collect::<Vec<_>>(), vec![(0, 10, 0)]);
        assert_eq!(
            fragments(25, 10).collect::<Vec<_>>(),
            vec![(0, 10, 15), (10, 20, 5), (20, 25, 0)]
        );
    }

    #[test]
    fn frames_round_trip_and_short_ones_are_refused() {
        let f = |more, data, part| Fragment { more, data, part };
        assert_eq!(
            decode(&encode(7, None, b"abc")).unwrap(),
            f(7, None, &b"abc"[..])
        );
        assert_eq!(decode(&encode(0, None, b"")).unwrap(), f(0, None, &b""[..]));
        assert_eq!(
            decode(&encode(9, Some(u64::MAX), b"xy")).unwrap(),
            f(9, Some(u64::MAX), &b"xy"[..])
        );
        assert_eq!(decode(b"abc"), Err(FrameError(3)));
        // The data flag with no room for the data.
        assert_eq!(decode(&[0, 0, 0, 0x80, 1, 2]), Err(FrameError(6)));
    }
}
