//! Session secrets and the authenticators that prove a peer knows one.
//!
//! The target hands the initiator a fresh [`SessionSecret`] when a session is
//! first established (in the `Welcome` of [`wire`](crate::wire)); from then
//! on, every reconnection is authenticated with it: the initiator's `Resume`
//! and the target's `Resumed` carry an [`authenticator`] over their fields, so
//! a stranger (or a restarted peer that lost the secret) can neither take
//! over a session nor pretend to resume one.
//!
//! The core has no random number generator: the caller draws the 32 bytes
//! from the operating system and passes them to [`SessionSecret::from_bytes`].
//!
//! # Authenticator
//!
//! `authenticator(secret, fields)` is HMAC-SHA256 keyed with the secret,
//! over every field preceded by its length, truncated to its first
//! [`AUTH_LEN`] bytes:
//!
//! ```text
//! tag = HMAC-SHA256(secret, len(f1):u32be f1 len(f2):u32be f2 ...)[..16]
//! ```
//!
//! The length prefixes make the encoding injective: `["ab", "c"]` and
//! `["a", "bc"]` authenticate differently. Callers put a label first
//! (`b"resume"`, `b"resumed"`) so that a tag made for one message is never
//! valid for another.
//!
//! ```
//! use relink_core::auth::{authenticator, verify, SessionSecret};
//!
//! let secret = SessionSecret::from_bytes([7; 32]);
//! let tag = authenticator(&secret, &[b"label", &42u64.to_be_bytes()]);
//! assert!(verify(&secret, &[b"label", &42u64.to_be_bytes()], &tag));
//! assert!(!verify(&secret, &[b"label", &43u64.to_be_bytes()], &tag));
//! ```

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Length of a [`SessionSecret`] in bytes.
pub const SECRET_LEN: usize = 32;

/// Length of an authenticator tag in bytes (HMAC-SHA256 truncated).
pub const AUTH_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The secret shared by the two ends of a session, chosen by the target.
///
/// Its `Debug` output never shows the bytes, and equality is checked in
/// constant time.
#[derive(Clone)]
pub struct SessionSecret([u8; SECRET_LEN]);

impl SessionSecret {
    /// A secret made of `bytes`, which the caller must draw from a
    /// cryptographically secure random source.
    pub fn from_bytes(bytes: [u8; SECRET_LEN]) -> SessionSecret {
        SessionSecret(bytes)
    }

    /// The secret's bytes, for the wire (`Welcome`) or for persisting it.
    pub fn as_bytes(&self) -> &[u8; SECRET_LEN] {
        &self.0
    }
}

impl From<[u8; SECRET_LEN]> for SessionSecret {
    fn from(bytes: [u8; SECRET_LEN]) -> SessionSecret {
        SessionSecret::from_bytes(bytes)
    }
}

impl fmt::Debug for SessionSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionSecret(<redacted>)")
    }
}

impl PartialEq for SessionSecret {
    fn eq(&self, other: &SessionSecret) -> bool {
        self.0.ct_eq(&other.0).into()
    }
}

impl Eq for SessionSecret {}

fn mac_over(secret: &SessionSecret, fields: &[&[u8]]) -> HmacSha256 {
    let mut mac =
        <HmacSha256 as Mac>::new_from_slice(&secret.0).expect("HMAC accepts keys of any length");
    for field in fields {
        // A field longer than u32::MAX bytes cannot occur: callers pass ids.
        let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
        mac.update(&len.to_be_bytes());
        mac.update(field);
    }
    mac
}

/// The authenticator of `fields` under `secret`: HMAC-SHA256 over the
/// length-prefixed fields, truncated to [`AUTH_LEN`] bytes.
pub fn authenticator(secret: &SessionSecret, fields: &[&[u8]]) -> [u8; AUTH_LEN] {
    let full = mac_over(secret, fields).finalize().into_bytes();
    let mut tag = [0u8; AUTH_LEN];
    tag.copy_from_slice(&full[..AUTH_LEN]);
    tag
}

/// Whether `tag` is the [`authenticator`] of `fields` under `secret`;
/// the comparison takes the same time wherever the tags differ.
pub fn verify(secret: &SessionSecret, fields: &[&[u8]], tag: &[u8; AUTH_LEN]) -> bool {
    let expected = authenticator(secret, fields);
    expected.ct_eq(tag).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(b: u8) -> SessionSecret {
        SessionSecret::from_bytes([b; SECRET_LEN])
    }

    #[test]
    fn debug_does_not_print_the_bytes() {
        let s = SessionSecret::from_bytes([0xab; SECRET_LEN]);
        let shown = format!("{s:?} {s:#?}");
        assert!(!shown.contains("ab"), "{shown}");
        assert!(!shown.contains("171"), "{shown}");
        assert!(shown.contains("redacted"));
    }

    #[test]
    fn matches_hmac_sha256_reference() {
        // RFC 4231 test case 2 ("Jefe", "what do ya want for nothing?") cannot
        // be used directly (length prefixes, 32-byte key), so pin our own
        // construction against a manual HMAC computation.
        let s = secret(0x0b);
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&[0x0b; 32]).unwrap();
        mac.update(&[0, 0, 0, 3]);
        mac.update(b"abc");
        mac.update(&[0, 0, 0, 0]);
        let full = mac.finalize().into_bytes();
        assert_eq!(authenticator(&s, &[b"abc", b""])[..], full[..AUTH_LEN]);
    }

    #[test]
    fn field_boundaries_matter() {
        let s = secret(1);
        assert_ne!(
            authenticator(&s, &[b"ab", b"c"]),
            authenticator(&s, &[b"a", b"bc"])
        );
        assert_ne!(
            authenticator(&s, &[b"abc"]),
            authenticator(&s, &[b"abc", b""])
        );
    }

    #[test]
    fn verify_accepts_the_right_tag_only() {
        let s = secret(2);
        let fields: &[&[u8]] = &[b"resume", &[1, 2, 3]];
        let tag = authenticator(&s, fields);
        assert!(verify(&s, fields, &tag));
        assert!(!verify(&secret(3), fields, &tag));
        assert!(!verify(&s, &[b"resume", &[1, 2, 4]], &tag));
        for i in 0..AUTH_LEN {
            let mut bad = tag;
            bad[i] ^= 1;
            assert!(!verify(&s, fields, &bad));
        }
    }

    #[test]
    fn secrets_compare_by_value() {
        assert_eq!(secret(4), secret(4));
        assert_ne!(secret(4), secret(5));
        assert_eq!(SessionSecret::from([9; 32]).as_bytes(), &[9; 32]);
    }
}
