//! What one timed run yields: [`Measurement`] (operations, bytes, wall-clock
//! and CPU time), the clock that takes it, and the process counters read
//! from `/proc/self/stat`.

use std::time::{Duration, Instant};

/// One timed run: how many requests completed, how many payload bytes they
/// carried, and how long it took on the wall clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Measurement {
    /// Requests completed (and checked).
    pub ops: u64,
    /// Payload bytes of those requests.
    pub bytes: u64,
    /// Wall-clock time from the first post to the last completion.
    pub elapsed: Duration,
    /// CPU time (user + system) the whole process used meanwhile, all
    /// threads (the TCP fabric's I/O threads too), if the platform tells
    /// (Linux; 10 ms resolution). Next to `elapsed` it shows how busy the
    /// run kept the machine, and whether it had to wait for a CPU.
    pub cpu: Option<Duration>,
}

impl Measurement {
    /// Requests per second.
    pub fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.secs()
    }

    /// Payload bytes per second.
    pub fn bytes_per_sec(&self) -> f64 {
        self.bytes as f64 / self.secs()
    }

    /// Payload gigabytes (10^9 bytes) per second.
    pub fn gbytes_per_sec(&self) -> f64 {
        self.bytes_per_sec() / 1e9
    }

    /// Elapsed seconds (never zero, so rates stay finite).
    pub fn secs(&self) -> f64 {
        self.elapsed.as_secs_f64().max(1e-9)
    }

    /// CPU time over wall-clock time (1.0 = one CPU busy throughout).
    pub fn cpu_load(&self) -> Option<f64> {
        self.cpu.map(|c| c.as_secs_f64() / self.secs())
    }
}

/// CPU time (user + system) used so far by this process, all threads
/// included, from `/proc/self/stat`; `None` where that is not readable.
pub fn process_cpu_time() -> Option<Duration> {
    // Fields 14 and 15 (utime, stime), in clock ticks of `USER_HZ`, which
    // is 100 per second on common Linux configurations.
    let [utime, stime] = proc_self_stat([14, 15])?;
    Some(Duration::from_millis((utime + stime) * 10))
}

/// The CPU time of one thread ([`thread_cpu_times`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadCpu {
    /// The thread's id.
    pub tid: u32,
    /// Its name (`comm`: at most 15 bytes).
    pub name: String,
    /// CPU time (user + system) it used so far (10 ms resolution).
    pub cpu: Duration,
}

/// The CPU time each live thread of this process used so far, from
/// `/proc/self/task/*/stat`; empty where that is not readable. Threads
/// that ended are missing (their time stays in [`process_cpu_time`]).
pub fn thread_cpu_times() -> Vec<ThreadCpu> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let Some(tid) = t.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let f: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime and stime: fields 14 and 15, the 12th and 13th after `)`.
        let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        if let (Some(u), Some(s)) = (tick(11), tick(12)) {
            out.push(ThreadCpu {
                tid,
                name: stat[open + 1..close].to_string(),
                cpu: Duration::from_millis((u + s) * 10),
            });
        }
    }
    out
}

/// Minor page faults of this process so far (field 10 of `/proc/self/stat`);
/// `None` where that is not readable.
pub fn process_minor_faults() -> Option<u64> {
    let [minflt] = proc_self_stat([10])?;
    Some(minflt)
}

/// Numeric fields of `/proc/self/stat` by their number in proc(5) (from 3,
/// the first after the parenthesised command name, which may hold spaces),
/// in ascending order.
fn proc_self_stat<const N: usize>(fields: [usize; N]) -> Option<[u64; N]> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let all: Vec<&str> = rest.split_whitespace().collect();
    let mut out = [0; N];
    for (o, f) in out.iter_mut().zip(fields) {
        *o = all.get(f.checked_sub(3)?)?.parse().ok()?;
    }
    Some(out)
}

/// Timing of one run: the wall clock and the process's CPU time.
pub(crate) struct Clock {
    wall: Instant,
    cpu: Option<Duration>,
}

impl Clock {
    pub(crate) fn start() -> Clock {
        Clock {
            cpu: process_cpu_time(),
            wall: Instant::now(),
        }
    }

    pub(crate) fn stop(self, ops: u64, size: usize) -> Measurement {
        let elapsed = self.wall.elapsed();
        let cpu = match (self.cpu, process_cpu_time()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        Measurement {
            ops,
            bytes: ops * size as u64,
            elapsed,
            cpu,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn cpu_time_is_read_and_grows() {
        // Spin until the CPU time moved on by two ticks; a wall-clock cap
        // keeps a broken reading from hanging the test.
        let a = process_cpu_time().expect("/proc/self/stat");
        let t = Instant::now();
        let mut x = 0u64;
        let mut b = a;
        while b < a + Duration::from_millis(20) && t.elapsed() < Duration::from_secs(10) {
            for _ in 0..100_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            b = process_cpu_time().expect("/proc/self/stat");
        }
        assert!(b >= a + Duration::from_millis(20), "{a:?} -> {b:?}");
    }

    #[test]
    fn minor_faults_count_touched_pages() {
        let a = process_minor_faults().expect("/proc/self/stat");
        // Fresh pages, written once each: at least some fault in.
        let mut v = vec![0u8; 8 << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
        let b = process_minor_faults().expect("/proc/self/stat");
        assert!(b > a, "{a} -> {b}");
    }
}
