//! Assertions on completions and private data, and test payloads.

use relink_fabric::{WcOpcode, WcStatus, WorkCompletion};

/// `len` deterministic pseudo-random bytes; different seeds give different
/// bytes, so a payload that lands in the wrong place is noticed.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..len)
        .map(|_| {
            // xorshift64*
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Assert a successful completion of `wr_id` with `opcode`.
#[track_caller]
pub fn assert_wc_ok(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode) {
    assert!(
        wc.wr_id == wr_id && wc.status == WcStatus::Success && wc.opcode == opcode,
        "want a successful {opcode:?} completion of wr_id {wr_id}, got {wc:?}"
    );
}

/// Assert a completion of `wr_id` with `status` (the opcode of an error
/// completion is not defined, so it is not checked).
#[track_caller]
pub fn assert_wc_status(wc: &WorkCompletion, wr_id: u64, status: WcStatus) {
    assert!(
        wc.wr_id == wr_id && wc.status == status,
        "want a completion of wr_id {wr_id} with status {status:?} ({}), got {wc:?}",
        status.name()
    );
}

/// Assert that `wcs` completes exactly `wr_ids`, in that order, with some
/// successes followed only by flush errors (RC completes a queue in order,
/// and a flush ends it). Returns how many succeeded.
#[track_caller]
pub fn assert_success_then_flush(wcs: &[WorkCompletion], wr_ids: &[u64]) -> usize {
    let got: Vec<u64> = wcs.iter().map(|wc| wc.wr_id).collect();
    assert_eq!(
        got, wr_ids,
        "every request must complete exactly once, in posting order: {wcs:#?}"
    );
    let ok = wcs.iter().take_while(|wc| wc.status.is_ok()).count();
    for wc in &wcs[ok..] {
        assert_eq!(
            wc.status,
            WcStatus::WrFlushErr,
            "after the first unsuccessful completion only flushes may follow: {wcs:#?}"
        );
    }
    ok
}

/// Assert that private data `got` delivers `sent`: the same bytes, possibly
/// followed by zero padding (real IB CM always delivers the full field).
#[track_caller]
pub fn assert_private_data(got: &[u8], sent: &[u8], what: &str) {
    assert!(
        got.len() >= sent.len()
            && got[..sent.len()] == *sent
            && got[sent.len()..].iter().all(|b| *b == 0),
        "{what}: private data {got:?} does not deliver the {} bytes sent: {sent:?}",
        sent.len()
    );
}

/// A 32-bit key that is none of `used` (for bad-lkey/rkey cases).
pub fn unused_key(used: &[u32]) -> u32 {
    let mut k = 0x5A5A_5A5A_u32;
    while used.contains(&k) {
        k = k.wrapping_add(0x0101_0101);
    }
    k
}

/// `ibv_inc_rkey`: the same key with the next low byte, the rkey a type 2
/// window is bound with.
pub fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xFFFF_FF00) | (rkey.wrapping_add(1) & 0xFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_and_repeat() {
        assert_eq!(pattern(1, 64), pattern(1, 64));
        assert_ne!(pattern(1, 64), pattern(2, 64));
        assert_eq!(pattern(3, 10), pattern(3, 20)[..10]);
    }

    #[test]
    fn keys() {
        assert_eq!(inc_rkey(0x1234_56FF), 0x1234_5600);
        assert_eq!(inc_rkey(0x1234_5601), 0x1234_5602);
        let k = unused_key(&[0x5A5A_5A5A]);
        assert_ne!(k, 0x5A5A_5A5A);
    }

    #[test]
    fn private_data_padding() {
        assert_private_data(b"ab\0\0", b"ab", "padded");
        assert_private_data(b"ab", b"ab", "exact");
    }

    #[test]
    #[should_panic(expected = "does not deliver")]
    fn private_data_mismatch() {
        assert_private_data(b"ax", b"ab", "mismatch");
    }
}
