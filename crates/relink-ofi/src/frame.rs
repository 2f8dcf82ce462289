//! How an application's message travels as relink messages: in
//! fragments of at most a receive slot's payload, each behind a 4-byte
//! header saying how many bytes of the message still follow it (0 on the
//! last).
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
pub const MAX_MESSAGE: usize = u32::MAX as usize;

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

/// A fragment: the header, then `part`.
pub fn encode(more: u32, part: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(HEADER + part.len());
    m.extend_from_slice(&more.to_le_bytes());
    m.extend_from_slice(part);
    m
}

/// A fragment that is shorter than its header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a message of {0} bytes from the peer has no fragment header: not the relink provider's")]
pub struct FrameError(pub usize);

/// The bytes still to come after this fragment, and its payload.
pub fn decode(m: &[u8]) -> Result<(u32, &[u8]), FrameError> {
    let head: [u8; HEADER] = m
        .get(..HEADER)
        .and_then(|h| h.try_into().ok())
        .ok_or(FrameError(m.len()))?;
    Ok((u32::from_le_bytes(head), &m[HEADER..]))
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
        let m = encode(7, b"abc");
        assert_eq!(decode(&m).unwrap(), (7, &b"abc"[..]));
        assert_eq!(decode(&encode(0, b"")).unwrap(), (0, &b""[..]));
        assert_eq!(decode(b"abc"), Err(FrameError(3)));
    }
}
