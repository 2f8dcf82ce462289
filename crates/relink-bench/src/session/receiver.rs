//! The receiving application of a pair: the stamp every message carries
//! ([`stamp_bytes`], [`has_stamp`]) and the [`Receiver`] that checks each
//! delivery against it.

use relink::{Completion, Memory, Outcome, Seq};

/// Write the stamp of message `seq` into `buf` (first 8 bytes `seq`, last 8
/// its complement, little-endian).
pub fn stamp_bytes(buf: &mut [u8], seq: u64) {
    buf[..8].copy_from_slice(&seq.to_le_bytes());
    let n = buf.len();
    if n >= 16 {
        buf[n - 8..].copy_from_slice(&(!seq).to_le_bytes());
    }
}

/// Whether `buf` carries the stamp of `seq`.
pub fn has_stamp(buf: &[u8], seq: u64) -> bool {
    let n = buf.len();
    n >= 8 && buf[..8] == seq.to_le_bytes() && (n < 16 || buf[n - 8..] == (!seq).to_le_bytes())
}

/// The receiving application: checks each delivered message (in order,
/// exactly once, right length, right stamp) and counts them.
#[derive(Debug, Clone)]
pub struct Receiver {
    size: usize,
    received: u64,
}

impl Receiver {
    /// A receiver of `size`-byte messages that has seen none.
    pub fn new(size: usize) -> Receiver {
        Receiver { size, received: 0 }
    }

    /// Messages received and checked so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Check message number `received` (relink sequence number
    /// `received + 1`) and count it.
    pub fn check(&mut self, seq: Seq, msg: &[u8]) -> Result<(), String> {
        let n = self.check_shape(seq, msg.len())?;
        if !has_stamp(msg, n) {
            return Err(format!("message {n} does not carry its stamp"));
        }
        self.received += 1;
        Ok(())
    }

    /// [`check`](Receiver::check) a message of `len` bytes that landed at
    /// `off` in `mem` (a posted receive): its stamp is read where it is,
    /// as the raw loops check theirs in their receive buffers.
    pub fn check_in(
        &mut self,
        seq: Seq,
        len: usize,
        mem: &Memory,
        off: usize,
    ) -> Result<(), String> {
        let n = self.check_shape(seq, len)?;
        if len < 8 {
            return Err(format!(
                "message {n} of {len} bytes is too short for its stamp"
            ));
        }
        let read = |at: usize| {
            let mut b = [0u8; 8];
            mem.read(at, &mut b)
                .map(|()| b)
                .map_err(|e| format!("message {n}: reading its buffer at {at}: {e}"))
        };
        let head_ok = read(off)? == n.to_le_bytes();
        let tail_ok = len < 16 || read(off + len - 8)? == (!n).to_le_bytes();
        if !(head_ok && tail_ok) {
            return Err(format!("message {n} does not carry its stamp"));
        }
        self.received += 1;
        Ok(())
    }

    /// The number of the message due, if `seq` is its sequence number and
    /// `len` the size expected.
    fn check_shape(&self, seq: Seq, len: usize) -> Result<u64, String> {
        let n = self.received;
        if seq.0 != n + 1 {
            return Err(format!(
                "delivery of sequence number {} where {} was due",
                seq.0,
                n + 1
            ));
        }
        if len != self.size {
            return Err(format!("message {n} has {len} bytes, not {}", self.size));
        }
        Ok(n)
    }
}

/// Check the completion of a reply the receiving application sent back
/// ([`Workload::PingPong`](super::Workload::PingPong)): a first-time
/// success.
pub fn check_echo(c: &Completion) -> Result<(), String> {
    if c.outcome == (Outcome::Success { replayed: false }) {
        Ok(())
    } else {
        Err(format!("a reply completed with {c:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receiver_checks_order_length_and_stamp() {
        let mut rx = Receiver::new(32);
        let mut m = vec![0u8; 32];
        stamp_bytes(&mut m, 0);
        assert!(rx.check(Seq(1), &m).is_ok());
        assert!(rx.check(Seq(1), &m).is_err(), "a duplicate");
        stamp_bytes(&mut m, 1);
        assert!(rx.check(Seq(2), &m[..31]).is_err(), "a short message");
        let mut bad = m.clone();
        bad[31] ^= 1;
        assert!(rx.check(Seq(2), &bad).is_err(), "a damaged tail");
        assert!(rx.check(Seq(2), &m).is_ok());
        assert_eq!(rx.received(), 2);
    }

    #[test]
    fn receiver_checks_a_message_in_place() {
        let mem = Memory::new(std::sync::Arc::new(relink::fabric::HeapMemory::new(0, 96)));
        let mut rx = Receiver::new(32);
        let mut m = vec![0u8; 32];
        stamp_bytes(&mut m, 0);
        mem.write(32, &m).expect("in bounds");
        assert!(rx.check_in(Seq(1), 32, &mem, 0).is_err(), "not there");
        assert!(rx.check_in(Seq(1), 32, &mem, 32).is_ok());
        stamp_bytes(&mut m, 1);
        m[31] ^= 1;
        mem.write(64, &m).expect("in bounds");
        assert!(rx.check_in(Seq(2), 32, &mem, 64).is_err(), "a damaged tail");
        assert!(
            rx.check_in(Seq(2), 31, &mem, 64).is_err(),
            "a short message"
        );
        assert!(rx.check_in(Seq(3), 32, &mem, 64).is_err(), "out of order");
        assert_eq!(rx.received(), 1);
    }
}
