//! relink next to the raw provider on the same fabric: one workload measured
//! both ways, their timed repetitions interleaved so that both see the same
//! machine state, and the ratio relink / raw (the median of the ratios of
//! neighbouring repetitions). Shared by the `relink_session` benchmark (the
//! soft fabric, in-process and over TCP) and relink-verbs's `rxe` benchmark
//! (real devices).
//!
//! The workloads: [`SEND`] (64-byte messages: the raw loop signals every
//! 16th SEND; relink counts a message when the peer confirmed its delivery),
//! through sessions whose receive slots hold one message (the raw loop's
//! receives) or [`FRAME_SLOT`] bytes (relink packs queued messages into
//! frames), and [`WRITE`] (64 KiB RDMA WRITEs, every one signaled).
//!
//! [`send_from_overhead`] puts three loops side by side, one message per
//! SEND: the raw loop, relink's [`Node::send`](relink::Node::send) (the
//! payload copied into the journal and into a send slot) and relink's
//! [`Node::send_from`](relink::Node::send_from) (the payload gathered from
//! a ring of slots in registered memory, no copy), at [`SEND`]'s 64 B and
//! at 4 KiB ([`FROM_SIZES`]); and counts the copies relink made of each
//! message's payload ([`CopyCount`]), which [`copy_faults`] holds to 0 for
//! `send_from` — a property, not a timing.

use std::time::Instant;

use relink_testkit::Rig;
use serde::Serialize;

use crate::loops::human_size;
use crate::report::{fmt_si, text_table};
use crate::session::{
    Copies, Drive, LoopStats, MessageSource, RelinkSendLoop, RelinkWriteLoop, Workload,
};
use crate::{
    measure_interleaved, paired_ratios, LoopSpec, Metric, Plan, Report, Row, Runner, SendLoop,
    Summary, WriteLoop,
};

/// Size, window and signaling interval (raw loop) of the SEND workload.
pub const SEND: (usize, usize, usize) = (64, 64, 16);
/// The `max_message` of the sessions of the SEND workload's second series:
/// relink's default, room for frames of up to 47 messages of 64 B.
pub const FRAME_SLOT: usize = 4096;
/// Size, window and signaling interval of the WRITE workload.
pub const WRITE: (usize, usize, usize) = (64 * 1024, 16, 1);
/// Message sizes of [`send_from_overhead`]: [`SEND`]'s, and 4 KiB.
pub const FROM_SIZES: [usize; 2] = [SEND.0, 4096];

/// relink / raw for one workload on one fabric.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    /// The fabric (the provider's kind, e.g. `soft-inproc`, `verbs`).
    pub fabric: String,
    /// `send`, `send-from`, `send-slot4096` or `write`.
    pub op: String,
    /// Bytes per operation.
    pub size: usize,
    /// The unit of the medians.
    pub unit: String,
    /// Median of the raw loop's repetitions.
    pub raw_median: f64,
    /// Median of the relink loop's repetitions.
    pub relink_median: f64,
    /// relink / raw of each pair of repetitions taken side by side.
    pub per_rep: Vec<f64>,
    /// Median of `per_rep`.
    pub median: f64,
    /// Smallest of `per_rep`.
    pub min: f64,
    /// Largest of `per_rep`.
    pub max: f64,
    /// Iterations and waits of the relink loop per operation (all runs).
    pub relink_loop: LoopStats,
}

/// Measure `raw` and `relink` side by side, record both rows in `report`
/// (`op` and `relink-op`), and return their ratio (without the loop's
/// statistics).
pub fn compare(
    fabric: &str,
    op: &str,
    metric: Metric,
    raw: (&mut dyn Runner, LoopSpec),
    relink: (&mut dyn Runner, LoopSpec),
    plan: &Plan,
    report: &mut Report,
) -> Ratio {
    let mut r = compare_all(
        fabric,
        metric,
        (raw.0, raw.1, op),
        vec![(relink.0, relink.1, op)],
        plan,
        report,
    );
    r.pop().expect("one ratio")
}

/// Measure `raw` and every loop of `relinks` side by side (the
/// repetitions of all alternate), record a row for each in `report` (the
/// raw loop's as its `op`, each relink loop's as `relink-<op>`), and return
/// each relink loop's ratio to the raw loop, named by its `op` (without the
/// loops' statistics).
pub fn compare_all(
    fabric: &str,
    metric: Metric,
    raw: (&mut dyn Runner, LoopSpec, &str),
    relinks: Vec<(&mut dyn Runner, LoopSpec, &str)>,
    plan: &Plan,
    report: &mut Report,
) -> Vec<Ratio> {
    let t0 = Instant::now();
    let (raw_runner, raw_spec, raw_op) = raw;
    let mut runners: Vec<&mut dyn Runner> = vec![raw_runner];
    let mut shapes = Vec::new();
    for (runner, spec, op) in relinks {
        runners.push(runner);
        shapes.push((spec, op));
    }
    let series = measure_interleaved(&mut runners, plan);
    report.push(Row::new(fabric, raw_op, &raw_spec, metric, &series[0]));
    let raw_median = series[0].summary(metric).median;
    let ratios = shapes
        .iter()
        .zip(&series[1..])
        .map(|((spec, op), rl)| {
            report.push(Row::new(fabric, &format!("relink-{op}"), spec, metric, rl));
            let per_rep = paired_ratios(rl, &series[0], metric);
            let s = Summary::of(&per_rep);
            Ratio {
                fabric: fabric.into(),
                op: (*op).into(),
                size: spec.size,
                unit: metric.unit().into(),
                raw_median,
                relink_median: rl.summary(metric).median,
                per_rep,
                median: s.median,
                min: s.min,
                max: s.max,
                relink_loop: LoopStats::default(),
            }
        })
        .collect();
    let ops: Vec<&str> = shapes.iter().map(|(_, op)| *op).collect();
    eprintln!(
        "  {fabric}: {} ({}) measured in {:.1?}",
        ops.join(", "),
        human_size(raw_spec.size),
        t0.elapsed()
    );
    ratios
}

/// The [`SEND`] workload on a raw pair of `rig` and through the relink
/// session `pair` makes, whose receive slots hold `max_message` bytes of
/// messages: [`SEND`]'s 64 (series `send`: one message per SEND, as the
/// raw loop's) or more (series `send-slot<max_message>`: room for frames).
pub fn send_overhead<D: Drive>(
    rig: &dyn Rig,
    pair: impl FnOnce(&LoopSpec, Workload) -> D,
    max_message: usize,
    plan: &Plan,
    report: &mut Report,
) -> Ratio {
    let raw_spec = LoopSpec::send(SEND.0, SEND.1).signal_every(SEND.2);
    let rl_spec = LoopSpec::send(SEND.0, SEND.1).max_message(max_message);
    let mut raw = SendLoop::connect(rig, raw_spec);
    let fabric = raw.kind();
    let mut rl = RelinkSendLoop::new(pair(&rl_spec, Workload::Send), rl_spec);
    let op = if rl_spec.max_message == SEND.0 {
        "send".to_string()
    } else {
        format!("send-slot{}", rl_spec.max_message)
    };
    let mut r = compare(
        fabric,
        &op,
        Metric::MessagesPerSec,
        (&mut raw, raw_spec),
        (&mut rl, rl_spec),
        plan,
        report,
    );
    r.relink_loop = rl.stats();
    raw.close();
    rl.close();
    r
}

/// How many copies of their payload relink made for the messages of one
/// loop of [`send_from_overhead`] ([`Copies`], on one fabric).
#[derive(Debug, Clone, Serialize)]
pub struct CopyCount {
    /// The fabric (the provider's kind).
    pub fabric: String,
    /// `send` ([`Node::send`](relink::Node::send)) or `send-from`
    /// ([`Node::send_from`](relink::Node::send_from)).
    pub op: String,
    /// Bytes per message.
    pub size: usize,
    /// Messages the loop sent, warm-up included.
    pub messages: u64,
    /// `Counters::send_copied_bytes` of the sending session.
    pub send_copied_bytes: u64,
    /// Copies of a message's payload to send it: `send_copied_bytes` over
    /// the payload bytes sent.
    pub send_copies_per_message: f64,
    /// Messages the receiving session delivered.
    pub delivered: u64,
    /// `Counters::receive_copied_bytes` of the receiving session.
    pub receive_copied_bytes: u64,
    /// Copies of a message's payload to deliver it.
    pub receive_copies_per_message: f64,
    /// Messages the receiver found behind another in one SEND
    /// (`Counters::packed`). Control messages count too: a session idle
    /// between its repetitions exchanges keepalives, and two of them may
    /// share a SEND. An application message never does here: it fills the
    /// peer's receive slot (`max_message` = its size), and one from
    /// registered memory always has a SEND of its own.
    pub packed: u64,
}

impl CopyCount {
    /// The count of `copies` on `fabric`.
    pub fn new(fabric: &str, copies: &Copies) -> CopyCount {
        CopyCount {
            fabric: fabric.into(),
            op: copies.source.name().into(),
            size: copies.size,
            messages: copies.messages,
            send_copied_bytes: copies.send_copied_bytes,
            send_copies_per_message: copies.send_per_message(),
            delivered: copies.delivered,
            receive_copied_bytes: copies.receive_copied_bytes,
            receive_copies_per_message: copies.receive_per_message(),
            packed: copies.packed,
        }
    }

    /// What is wrong with this count, if anything: a message sent with
    /// `send_from` must not be copied (`send_copied_bytes` 0); one sent
    /// with `send` must be (else the counter counts nothing, and its 0 for
    /// `send_from` proves nothing); every message must have been sent and
    /// delivered.
    pub fn fault(&self) -> Option<String> {
        let what = format!("{} {} ({} B messages)", self.fabric, self.op, self.size);
        if self.messages == 0 || self.delivered != self.messages {
            return Some(format!(
                "{what}: {} messages sent, {} delivered",
                self.messages, self.delivered
            ));
        }
        match self.op.as_str() {
            "send-from" if self.send_copied_bytes != 0 => Some(format!(
                "{what}: relink copied {} bytes of payload to send {} messages from registered \
                 memory ({:.3} copies per message); Node::send_from must copy none",
                self.send_copied_bytes, self.messages, self.send_copies_per_message
            )),
            "send" if self.send_copied_bytes == 0 => Some(format!(
                "{what}: Counters::send_copied_bytes stayed 0 over {} messages of Node::send, \
                 which copies each; the counter counts nothing, so its 0 for send_from \
                 proves nothing",
                self.messages
            )),
            _ => None,
        }
    }
}

/// The faults ([`CopyCount::fault`]) of `counts`: empty when every
/// message from registered memory went without a copy.
pub fn copy_faults(counts: &[CopyCount]) -> Vec<String> {
    counts.iter().filter_map(CopyCount::fault).collect()
}

/// The copy counts as a table for people.
pub fn copy_table(counts: &[CopyCount]) -> String {
    let rows: Vec<Vec<String>> = counts
        .iter()
        .map(|c| {
            vec![
                c.fabric.clone(),
                c.op.clone(),
                human_size(c.size),
                c.messages.to_string(),
                format!("{:.3}", c.send_copies_per_message),
                format!("{:.3}", c.receive_copies_per_message),
                c.packed.to_string(),
            ]
        })
        .collect();
    let mut out = text_table(
        &[
            "fabric",
            "relink call",
            "size",
            "messages",
            "send copies/msg",
            "receive copies/msg",
            "framed",
        ],
        &rows,
        &[0, 1],
    );
    out.push_str(
        "copies of a message's payload relink made, from the sessions' counters over all runs \
         (warm-up included): send_copied_bytes of the sender and receive_copied_bytes of the \
         receiver, over the payload bytes sent and delivered; framed: messages received \
         behind another in one SEND (the receiver's packed: control messages, e.g. \
         keepalives of a session idle between repetitions; an application message fills \
         the peer's slot)\n",
    );
    out
}

/// What [`send_from_overhead`] yields: the ratios relink / raw of `send`
/// and `send-from`, and their copy counts.
#[derive(Debug, Clone)]
pub struct SendFrom {
    /// `send`, then `send-from`, each over the raw loop.
    pub ratios: Vec<Ratio>,
    /// `send`, then `send-from`.
    pub copies: Vec<CopyCount>,
}

/// `size`-byte messages, one per SEND, [`SEND`]'s window and signaling,
/// three loops side by side: the raw loop on a pair of `rig`, and through
/// two relink sessions `pair` makes (receive slots of one message,
/// `max_message` = `size`, so no frame forms) relink's `send` of the
/// loop's bytes and its `send_from` of a ring of registered slots. Records
/// the three rows (`send`, `relink-send`, `relink-send-from`) in `report`;
/// returns the two ratios and the copies each session's counters show.
pub fn send_from_overhead<D: Drive>(
    rig: &dyn Rig,
    pair: impl Fn(&LoopSpec, Workload) -> D,
    size: usize,
    plan: &Plan,
    report: &mut Report,
) -> SendFrom {
    let raw_spec = LoopSpec::send(size, SEND.1).signal_every(SEND.2);
    let rl_spec = LoopSpec::send(size, SEND.1);
    let mut raw = SendLoop::connect(rig, raw_spec);
    let fabric = raw.kind();
    let mut copy = RelinkSendLoop::new(pair(&rl_spec, Workload::Send), rl_spec);
    let mut from = RelinkSendLoop::with_source(
        pair(&rl_spec, Workload::Send),
        rl_spec,
        MessageSource::Registered,
    );
    let mut ratios = compare_all(
        fabric,
        Metric::MessagesPerSec,
        (&mut raw, raw_spec, "send"),
        vec![
            (&mut copy, rl_spec, MessageSource::Bytes.name()),
            (&mut from, rl_spec, MessageSource::Registered.name()),
        ],
        plan,
        report,
    );
    ratios[0].relink_loop = copy.stats();
    ratios[1].relink_loop = from.stats();
    raw.close();
    let copies = vec![
        CopyCount::new(fabric, &copy.close_counted()),
        CopyCount::new(fabric, &from.close_counted()),
    ];
    SendFrom { ratios, copies }
}

/// The [`WRITE`] workload on a raw pair of `rig` and through the relink
/// session `pair` makes, in `metric` (GB/s or MB/s).
pub fn write_overhead<D: Drive>(
    rig: &dyn Rig,
    pair: impl FnOnce(&LoopSpec, Workload) -> D,
    metric: Metric,
    plan: &Plan,
    report: &mut Report,
) -> Ratio {
    let spec = LoopSpec::write(WRITE.0, WRITE.1).signal_every(WRITE.2);
    let mut raw = WriteLoop::connect(rig, spec);
    let fabric = raw.kind();
    let mut rl = RelinkWriteLoop::new(pair(&spec, Workload::Write), spec);
    let mut r = compare(
        fabric,
        "write",
        metric,
        (&mut raw, spec),
        (&mut rl, spec),
        plan,
        report,
    );
    r.relink_loop = rl.stats();
    raw.close();
    rl.close();
    r
}

/// The ratios as a table for people.
pub fn ratio_table(ratios: &[Ratio]) -> String {
    let rows: Vec<Vec<String>> = ratios
        .iter()
        .map(|r| {
            vec![
                r.fabric.clone(),
                r.op.clone(),
                human_size(r.size),
                format!("{} {}", fmt_si(r.raw_median), r.unit),
                format!("{} {}", fmt_si(r.relink_median), r.unit),
                format!("{:.3}", r.median),
                format!("{:.3}", r.min),
                format!("{:.3}", r.max),
                format!("{:.2}", r.relink_loop.iterations_per_op()),
                format!("{:.2}", r.relink_loop.waits_per_op()),
            ]
        })
        .collect();
    let mut out = text_table(
        &[
            "fabric",
            "workload",
            "size",
            "raw",
            "relink",
            "relink/raw",
            "min",
            "max",
            "iter/op",
            "wait/op",
        ],
        &rows,
        &[0, 1],
    );
    out.push_str(
        "relink/raw: median (min, max) of the ratios of repetitions taken side by side; \
         raw, relink: medians (send-from: relink's Node::send_from of registered memory, \
         no copy); iter/op, wait/op: iterations of the relink loop (each polls its node \
         once) and iterations that waited on the provider, per operation\n",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(op: &str, send_copied_bytes: u64) -> CopyCount {
        CopyCount {
            fabric: "soft-x".into(),
            op: op.into(),
            size: 64,
            messages: 10,
            send_copied_bytes,
            send_copies_per_message: send_copied_bytes as f64 / 640.0,
            delivered: 10,
            receive_copied_bytes: 640,
            receive_copies_per_message: 1.0,
            packed: 0,
        }
    }

    #[test]
    fn a_copied_zero_copy_message_is_a_fault() {
        assert!(copy_faults(&[count("send", 1280), count("send-from", 0)]).is_empty());
        let f = copy_faults(&[count("send", 1280), count("send-from", 64)]);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("must copy none"), "{f:?}");
        // A counter that counts nothing proves nothing.
        let f = copy_faults(&[count("send", 0), count("send-from", 0)]);
        assert_eq!(f.len(), 1, "{f:?}");
        // Every message delivered.
        let lost = CopyCount {
            delivered: 9,
            ..count("send-from", 0)
        };
        assert_eq!(copy_faults(&[lost]).len(), 1);
        let t = copy_table(&[count("send", 1280), count("send-from", 0)]);
        assert!(
            t.contains("send-from") && t.contains("2.000") && t.contains("0.000"),
            "{t}"
        );
    }
}
