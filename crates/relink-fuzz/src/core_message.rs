//! Feeds arbitrary bytes to the in-band message decoders of `relink-core`:
//! `decode_message` (header + raw payload), `MsgBody::parse` for every kind,
//! `decode_typed`, and `frame_messages` (a SEND's messages back to back).
//!
//! Beyond "never panics", checks that decoding is canonical (whatever
//! decodes re-encodes to the same bytes through both encoders), that the
//! header agrees with the payload, and that the sequence rule holds.

use relink_core::wire::{
    decode_message, decode_typed, encode_body, encode_message, frame_messages, MsgBody, MsgKind,
    HEADER_LEN, MAX_PAYLOAD_LEN,
};

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    if let Ok((header, payload)) = decode_message(data) {
        assert_eq!(header.len as usize, payload.len());
        assert!(payload.len() <= MAX_PAYLOAD_LEN);
        assert_eq!(
            header.kind.is_sequenced(),
            header.seq.0 != 0,
            "sequence rule"
        );
        assert_eq!(
            header.to_bytes().as_ref().map(|h| &h[..]),
            Ok(&data[..HEADER_LEN])
        );

        let mut raw = Vec::new();
        encode_message(header.kind, header.seq, header.ack, payload, &mut raw)
            .expect("a decoded message re-encodes");
        assert_eq!(raw, data, "decode_message is not canonical");

        match decode_typed(data) {
            Ok((h, body)) => {
                assert_eq!(h, header);
                assert_eq!(body.kind(), header.kind);
                let mut typed = Vec::new();
                encode_body(h.seq, h.ack, &body, &mut typed).expect("a decoded body re-encodes");
                assert_eq!(typed, data, "decode_typed is not canonical");
            }
            Err(_) => assert_ne!(header.kind, MsgKind::Data, "Data payloads are opaque"),
        }
    } else {
        assert!(decode_typed(data).is_err());
    }

    // The bytes as a frame: whole messages that tile its start, each as
    // long as its header says, then at most one error, which ends it.
    let mut offset = 0;
    let mut it = frame_messages(data);
    while let Some(m) = it.next() {
        match m {
            Ok(m) => {
                assert_eq!(&data[offset..offset + m.len()], m);
                assert!(m.len() >= HEADER_LEN);
                let len = u32::from_be_bytes(m[18..22].try_into().unwrap()) as usize;
                assert_eq!(m.len(), HEADER_LEN + len);
                offset += m.len();
            }
            Err(_) => {
                assert!(offset < data.len());
                assert!(it.next().is_none(), "an error ends the frame");
                break;
            }
        }
    }
    if offset == data.len() && !data.is_empty() {
        assert!(decode_message(data).is_err() || frame_messages(data).count() == 1);
    }

    // Every payload parser on the raw bytes, as if a header had named it.
    for kind in MsgKind::ALL {
        if let Ok(body) = MsgBody::parse(kind, data) {
            assert_eq!(body.kind(), kind);
        }
    }
}
