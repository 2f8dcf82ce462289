//! The registry lock: a `lock` file created exclusively, holding its
//! holder's pid and a random token, removed on release; a lock whose holder
//! is gone or that is too old is broken.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::files::random_u64;
use super::{io_err, Registry, RegistryError};

const LOCK_FILE: &str = "lock";
/// How long a mutation waits for the registry lock.
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);
/// A lock older than this is stale even if its holder's pid is alive (the pid
/// may have been reused); mutations take milliseconds.
const LOCK_STALE_AFTER: Duration = Duration::from_secs(30);

impl Registry {
    /// Takes the registry lock, creating the directory if needed.
    pub(super) fn lock(&self) -> Result<LockGuard, RegistryError> {
        fs::create_dir_all(&self.dir).map_err(io_err(&self.dir))?;
        let path = self.dir.join(LOCK_FILE);
        let token = format!("{} {:016x}\n", std::process::id(), random_u64());
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(mut f) => {
                    f.write_all(token.as_bytes()).map_err(io_err(&path))?;
                    return Ok(LockGuard { path });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(io_err(&path)(e)),
            }
            if break_stale_lock(&path) {
                continue;
            }
            let waited = start.elapsed();
            if waited >= LOCK_TIMEOUT {
                return Err(RegistryError::LockTimeout { path, waited });
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }
}

/// Breaks the lock at `path` if its holder is gone: its pid no longer exists
/// or the lock is older than [`LOCK_STALE_AFTER`]. Returns whether the lock
/// was broken (then the caller retries at once).
fn break_stale_lock(path: &Path) -> bool {
    let Ok(meta) = fs::metadata(path) else {
        return true; // released meanwhile
    };
    let Ok(contents) = fs::read_to_string(path) else {
        return false;
    };
    let too_old = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age > LOCK_STALE_AFTER);
    let holder_dead = contents
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|pid| {
            Path::new("/proc/self").exists() && !Path::new("/proc").join(pid.to_string()).exists()
        });
    // An empty lock is one being written right now: not stale unless old.
    if !(too_old || holder_dead) {
        return false;
    }
    // Move it aside, then check that what was moved is what was judged stale
    // (another process may have broken and re-taken it in between).
    let aside = path.with_file_name(format!(
        ".lock.stale.{}.{:016x}",
        std::process::id(),
        random_u64()
    ));
    if fs::rename(path, &aside).is_err() {
        return false;
    }
    let moved = fs::read_to_string(&aside).unwrap_or_default();
    if moved != contents {
        // We moved a live lock: put it back unless someone took the lock
        // since (hard_link fails if the path exists).
        let _ = fs::hard_link(&aside, path);
    }
    let _ = fs::remove_file(&aside);
    true
}

/// Holds the registry lock; releases it on drop.
#[derive(Debug)]
pub(super) struct LockGuard {
    path: PathBuf,
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
