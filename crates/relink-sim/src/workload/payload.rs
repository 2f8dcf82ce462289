//! The bytes of the workload, all derived from the seed so that a checker
//! can regenerate what it expects: message payloads
//! (`index u64 | len u16 | body | FNV-1a 64`, big endian), block patterns
//! of WRITEs, the bytes of WRITEs with immediate data, and the addends of
//! FETCH_ADDs.

use super::layout::BLOCK;

/// SplitMix64: the only source of pseudo-randomness of the workload (and
/// of the demo's fault schedule).
pub fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn fill(mut state: u64, out: &mut [u8]) {
    for chunk in out.chunks_mut(8) {
        state = mix(state);
        chunk.copy_from_slice(&state.to_le_bytes()[..chunk.len()]);
    }
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The payload of message `index` of the stream `stream`.
pub fn message(seed: u64, stream: u64, index: u64) -> Vec<u8> {
    let key = mix(seed ^ mix(stream ^ mix(index)));
    let len = 16 + (key % 497) as usize;
    let mut p = Vec::with_capacity(18 + len);
    p.extend_from_slice(&index.to_be_bytes());
    p.extend_from_slice(&(len as u16).to_be_bytes());
    let start = p.len();
    p.resize(start + len, 0);
    fill(key, &mut p[start..]);
    let sum = fnv1a(&p);
    p.extend_from_slice(&sum.to_be_bytes());
    p
}

/// What a received payload says: its index, if the checksum holds.
pub fn parse_message(p: &[u8]) -> Option<u64> {
    if p.len() < 18 {
        return None;
    }
    let (body, sum) = p.split_at(p.len() - 8);
    let len = u16::from_be_bytes([body[8], body[9]]) as usize;
    if body.len() != 10 + len || fnv1a(body) != u64::from_be_bytes(sum.try_into().ok()?) {
        return None;
    }
    Some(u64::from_be_bytes(body[..8].try_into().ok()?))
}

/// The pattern of `block` at `version` (`None`: never written, zeros).
pub fn pattern(seed: u64, block: u64, version: Option<u64>) -> Vec<u8> {
    let mut v = vec![0u8; BLOCK as usize];
    if let Some(version) = version {
        fill(mix(seed ^ 0xb10c ^ mix(block ^ mix(version))), &mut v);
    }
    v
}

/// The bytes of the WRITE with immediate data at place `index` of the
/// stream `stream` (the places of its messages and of its WRITEs with
/// immediate data are one sequence), `len` of them.
pub fn imm_bytes(seed: u64, stream: u64, index: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    fill(mix(seed ^ 0x1a7e ^ mix(stream ^ mix(index ^ 0x3e))), &mut v);
    v
}

/// The addend of atomic number `k`.
pub(crate) fn addend(seed: u64, k: u64) -> u64 {
    1 + mix(seed ^ 0xadd ^ mix(k)) % 1000
}
