//! Feeds arbitrary bytes to the TCP fabric's frame codec: as one frame to
//! `wire::decode`, and as a byte stream, cut into chunks, to `FrameReader`.
//!
//! Beyond "never panics", checks that decoding is canonical (whatever decodes
//! re-encodes to the same bytes and passes `validate`) and that the reader
//! loses no bytes.

use relink_soft::wire::{self, FrameReader};

/// Decoding `frame` either fails or yields a packet that encodes back to it.
fn check_canonical(frame: &[u8]) {
    if let Ok(p) = wire::decode(frame) {
        assert_eq!(wire::encode_to_vec(&p), frame, "decode is not canonical");
        assert_eq!(wire::validate(&p), Ok(()), "decoded packet out of bounds");
    }
}

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    check_canonical(data);

    // The first bytes choose the chunk sizes (1..=256) the stream is fed in.
    let (sizes, stream) = data.split_at(data.len().min(8));
    let mut reader = FrameReader::new();
    let mut pushed = 0usize;
    let mut taken = 0usize;
    let mut rest = stream;
    let mut i = 0usize;
    while !rest.is_empty() {
        let size = sizes
            .get(i % sizes.len().max(1))
            .map_or(rest.len(), |&s| usize::from(s) + 1);
        let (chunk, tail) = rest.split_at(size.min(rest.len()));
        rest = tail;
        i += 1;
        reader.push(chunk);
        pushed += chunk.len();
        loop {
            match reader.next_frame() {
                Ok(Some(frame)) => {
                    taken += frame.len();
                    check_canonical(&frame);
                }
                Ok(None) => break,
                Err(_) => {
                    assert!(reader.is_failed());
                    return;
                }
            }
        }
        assert_eq!(taken + reader.buffered(), pushed, "reader lost bytes");
    }
}
