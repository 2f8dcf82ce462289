//! The checks of the raw loops: the stamp or pattern written into each
//! payload and compared where it lands, and the rule every work completion
//! a loop counts must pass.

use relink_fabric::{Memory, QpId, WcOpcode, WcStatus, WorkCompletion};
use relink_testkit::check::pattern;

use super::spec::Verify;

/// Write the stamp or pattern of `seq` into `size` bytes of `mem` at `off`.
pub(crate) fn stamp(mem: &Memory, off: usize, size: usize, seq: u64, verify: Verify) {
    match verify {
        Verify::Stamp => {
            mem.write(off, &seq.to_le_bytes()).expect("slot in bounds");
            if size >= 16 {
                mem.write(off + size - 8, &(!seq).to_le_bytes())
                    .expect("slot in bounds");
            }
        }
        Verify::Full => mem.write(off, &pattern(seq, size)).expect("slot in bounds"),
    }
}

/// Check that `size` bytes of `mem` at `off` hold what [`stamp`] wrote for
/// `seq`; panics naming `what` otherwise.
#[track_caller]
pub(crate) fn check_stamp(
    mem: &Memory,
    off: usize,
    size: usize,
    seq: u64,
    verify: Verify,
    what: &str,
) {
    match verify {
        Verify::Stamp => {
            let head = mem.read_u64(off).expect("slot in bounds");
            let head = u64::from_le_bytes(head.to_ne_bytes());
            assert_eq!(
                head, seq,
                "{what}: payload of request {seq} carries sequence number {head}"
            );
            if size >= 16 {
                let tail = mem.read_u64(off + size - 8).expect("slot in bounds");
                let tail = u64::from_le_bytes(tail.to_ne_bytes());
                assert_eq!(
                    tail, !seq,
                    "{what}: payload of request {seq} has a wrong last 8 bytes \
                     (truncated or mixed with another payload)"
                );
            }
        }
        Verify::Full => {
            let got = mem.read_vec(off, size).expect("slot in bounds");
            if got != pattern(seq, size) {
                let first = got
                    .iter()
                    .zip(pattern(seq, size))
                    .position(|(a, b)| *a != b)
                    .unwrap_or(0);
                panic!("{what}: payload of request {seq} differs from byte {first} on");
            }
        }
    }
}

/// Panics unless `wc` is a success of `opcode` on `qp`.
#[track_caller]
pub(super) fn check_wc(wc: &WorkCompletion, opcode: WcOpcode, qp: QpId, what: &str) {
    assert!(
        wc.status == WcStatus::Success && wc.opcode == opcode && wc.qp == qp,
        "{what}: want a successful {opcode:?} completion on {qp}, got {wc:?}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn stamps_catch_wrong_payloads() {
        let mem = Memory::new(std::sync::Arc::new(relink_fabric::HeapMemory::new(
            0x1000, 256,
        )));
        for verify in [Verify::Stamp, Verify::Full] {
            stamp(&mem, 0, 64, 7, verify);
            check_stamp(&mem, 0, 64, 7, verify, "ok");
            let wrong = catch_unwind(AssertUnwindSafe(|| {
                check_stamp(&mem, 0, 64, 8, verify, "x")
            }));
            assert!(
                wrong.is_err(),
                "{verify:?} must notice another sequence number"
            );
            let last = mem.read_vec(63, 1).unwrap()[0];
            mem.write(63, &[last ^ 0xFF]).unwrap();
            let torn = catch_unwind(AssertUnwindSafe(|| {
                check_stamp(&mem, 0, 64, 7, verify, "x")
            }));
            assert!(torn.is_err(), "{verify:?} must notice a damaged tail");
        }
    }
}
