//! Feeds arbitrary bytes to the handshake decoders of `relink-core`: the
//! CONNECT, ACCEPT and REJECT private data.
//!
//! Beyond "never panics", checks that decoding is canonical (whatever
//! decodes re-encodes to the same bytes, followed only by the zero padding
//! transports add), that every encoding fits its CM limit, that a Hello's
//! connect data is the bytes its length byte names (never more than
//! `MAX_CONNECT_DATA`), and that authenticators verify only under the
//! secret they were made with.

use relink_core::auth::SessionSecret;
use relink_core::wire::{
    AcceptData, ConnectBytes, ConnectData, RejectData, Resume, Resumed, HELLO_LEN, MAX_CONNECT_DATA,
};
use relink_fabric::{MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

/// `encoded` is a prefix of `data` and only zeros follow it.
fn check_canonical(data: &[u8], encoded: &[u8], max: usize) {
    assert!(encoded.len() <= max, "encoding over the CM limit");
    assert_eq!(&data[..encoded.len()], encoded, "decode is not canonical");
    assert!(
        data[encoded.len()..].iter().all(|&b| b == 0),
        "non-zero padding accepted"
    );
}

/// A secret that is not the one a fuzzed authenticator could match, except
/// by breaking HMAC-SHA256.
fn fuzz_secret() -> SessionSecret {
    SessionSecret::from_bytes(*b"relink fuzz secret, not random!!")
}

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    if let Ok(c) = ConnectData::decode(data) {
        check_canonical(data, &c.to_vec(), MAX_CONNECT_PRIVATE_DATA);
        if let ConnectData::Hello(h) = c {
            // The connect data is the bytes after the length byte, as many
            // as it says, and makes a valid ConnectBytes again.
            let len = usize::from(data[HELLO_LEN - 1]);
            assert!(len <= MAX_CONNECT_DATA);
            assert_eq!(&*h.connect_data, &data[HELLO_LEN..HELLO_LEN + len]);
            assert_eq!(ConnectBytes::new(&h.connect_data), Ok(h.connect_data));
        }
        if let ConnectData::Resume(r) = c {
            // A re-signed copy verifies; the fuzzed tag does not (the
            // fuzzer cannot forge HMAC), unless it is the re-signed one.
            let s = fuzz_secret();
            let signed = Resume::sign(&s, r.session, r.epoch, r.last_delivered);
            assert!(signed.verify(&s));
            assert_eq!(r.verify(&s), r.auth == signed.auth);
        }
    }
    if let Ok(a) = AcceptData::decode(data) {
        check_canonical(data, &a.to_vec(), MAX_ACCEPT_PRIVATE_DATA);
        match a {
            AcceptData::Welcome(w) => {
                // The secret on the wire is the one decoded.
                assert_eq!(&data[18..50], w.secret.as_bytes());
            }
            AcceptData::Resumed(r) => {
                let s = fuzz_secret();
                let signed = Resumed::sign(&s, r.session, r.epoch, r.incarnation, r.last_delivered);
                assert!(signed.verify(&s));
                assert_eq!(r.verify(&s), r.auth == signed.auth);
            }
        }
    }
    if let Ok(r) = RejectData::decode(data) {
        check_canonical(data, &r.to_vec(), MAX_REJECT_PRIVATE_DATA);
    }
}
