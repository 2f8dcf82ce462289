//! What the process holds: resident memory (`VmRSS`, and its peak
//! `VmHWM`), live threads (`Threads`) and open file descriptors (the
//! entries of `/proc/self/fd`), read from `/proc/self`; and the live heap,
//! the bytes allocated and not freed, counted by the binary's allocator
//! (`stats_alloc`). The RSS also holds what the allocator keeps of freed
//! memory (glibc's arenas, one per thread that allocates, fragmented by
//! allocations of different lives); the live heap is what the program
//! holds. The whole soak — both
//! hosts' nodes, their soft TCP devices, every connection and thread —
//! runs in this one process, so these are its figures.

use serde::Serialize;

/// One reading of the process's figures.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(super) struct ProcessFigures {
    /// Resident set size, KiB.
    pub(super) rss_kib: u64,
    /// Peak resident set size so far, KiB.
    pub(super) peak_rss_kib: u64,
    /// Live heap (allocated, not freed), KiB.
    pub(super) heap_kib: u64,
    /// Live threads.
    pub(super) threads: u64,
    /// Open file descriptors.
    pub(super) fds: u64,
}

/// Read the figures now; a figure `/proc` does not give (not Linux) is 0.
pub(super) fn read() -> ProcessFigures {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    // The directory's own descriptor, open while it is read, is not one
    // of the process's.
    let fds = std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count().saturating_sub(1) as u64)
        .unwrap_or(0);
    let heap = crate::GLOBAL.stats();
    let live = heap.bytes_allocated.saturating_sub(heap.bytes_deallocated);
    ProcessFigures {
        heap_kib: (live / 1024) as u64,
        rss_kib: field("VmRSS"),
        peak_rss_kib: field("VmHWM"),
        threads: field("Threads"),
        fds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let keep = vec![1u8; 1 << 20];
        let p = read();
        drop(keep);
        if cfg!(target_os = "linux") {
            assert!(p.rss_kib > 0, "{p:?}");
            assert!(p.peak_rss_kib >= p.rss_kib, "{p:?}");
            assert!(p.threads >= 1, "{p:?}");
            assert!(p.heap_kib > 0 && p.heap_kib < p.rss_kib, "{p:?}");
            // stdin, stdout, stderr at least
            assert!(p.fds >= 3, "{p:?}");
        }
    }
}
