//! Prints RDMA device events as they happen, like `rdma monitor`.
//!
//! ```text
//! cargo run -p relink-devwatch --example devwatch [-- SECONDS]
//! ```
//!
//! Prints the backend in use first; with SECONDS, exits after that long.

use std::time::{Duration, Instant};

use relink_devwatch::watch::{DeviceWatcher, WatchConfig};

fn main() {
    let limit = std::env::args()
        .nth(1)
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs);
    let config = WatchConfig {
        report_existing: true,
        ..WatchConfig::default()
    };
    let (watcher, events) = match DeviceWatcher::channel(config) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("devwatch: {e}");
            std::process::exit(1);
        }
    };
    let info = watcher.info();
    println!(
        "backend: {} (prompt removal: {})",
        info.backend, info.prompt_removal
    );
    for (b, why) in &info.skipped {
        println!("skipped {b}: {why}");
    }
    let start = Instant::now();
    loop {
        let wait = match limit {
            Some(l) => match l.checked_sub(start.elapsed()) {
                Some(w) => w,
                None => break,
            },
            None => Duration::from_secs(3600),
        };
        match events.recv_timeout(wait) {
            Ok(ev) => println!("{ev}"),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    watcher.stop();
}
