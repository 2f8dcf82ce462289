//! Log lines counted: a `tracing` layer that counts every event relink
//! emits, by level, down to `DEBUG` (`TRACE` is left disabled: it is not
//! logged in production and costs the hot path). The counts at `INFO` and
//! above are the lines relinkd writes at its default level; `DEBUG` is
//! shown beside them. With `RELINK_LOG` set (an `EnvFilter`, e.g.
//! `RELINK_LOG=info`), the events it selects are also written to stderr.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

/// Events counted so far, by level: error, warn, info, debug.
static COUNTS: [AtomicU64; 4] = [
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

/// The layer that counts.
struct Counter;

impl<S: Subscriber> Layer<S> for Counter {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let i = match *event.metadata().level() {
            Level::ERROR => 0,
            Level::WARN => 1,
            Level::INFO => 2,
            Level::DEBUG => 3,
            _ => return,
        };
        COUNTS[i].fetch_add(1, Ordering::Relaxed);
    }
}

/// Install the counting layer (and, with `RELINK_LOG`, a writer to
/// stderr) as the process's subscriber. `false` if another subscriber
/// was installed first (the counts then stay 0).
pub(super) fn install() -> bool {
    let writer = std::env::var("RELINK_LOG").ok().map(|spec| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(tracing_subscriber::EnvFilter::new(spec))
    });
    tracing_subscriber::registry()
        .with(Counter.with_filter(tracing_subscriber::filter::LevelFilter::DEBUG))
        .with(writer)
        .try_init()
        .is_ok()
}

/// Log lines counted so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(super) struct LogCounts {
    pub(super) error: u64,
    pub(super) warn: u64,
    pub(super) info: u64,
    pub(super) debug: u64,
}

impl LogCounts {
    /// Lines at `INFO` and above: what relinkd's default level writes.
    pub(super) fn info_and_above(&self) -> u64 {
        self.error + self.warn + self.info
    }
}

/// The counts now.
pub(super) fn counts() -> LogCounts {
    let c = |i: usize| COUNTS[i].load(Ordering::Relaxed);
    LogCounts {
        error: c(0),
        warn: c(1),
        info: c(2),
        debug: c(3),
    }
}
