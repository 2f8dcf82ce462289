//! Feeds arbitrary bytes to the TCP fabric's frame codec: as one frame to
//! `wire::decode_frame` (packets, packets whose payload stays in the
//! sending process, and the transport's link frames), and as a byte
//! stream, cut into chunks, to `FrameReader`.
//!
//! Beyond "never panics", checks that decoding is canonical (whatever decodes
//! re-encodes to the same bytes and passes `validate`) and that the reader
//! loses no bytes.

use relink_soft::wire::{self, FrameReader, Incoming};

/// Decoding `frame` either fails or yields a frame that encodes back to it.
fn check_canonical(frame: &[u8]) {
    if let Ok(f) = wire::decode_frame(frame) {
        assert_eq!(
            wire::encode_incoming_to_vec(&f),
            frame,
            "decode is not canonical"
        );
        if let Incoming::Packet(p) | Incoming::Remote(p, _) = &f {
            assert_eq!(wire::validate(p), Ok(()), "decoded packet out of bounds");
        }
        // Only a packet with its payload decodes as a packet.
        assert_eq!(
            wire::decode(frame).is_ok(),
            matches!(f, Incoming::Packet(_)),
            "decode and decode_frame disagree"
        );
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
