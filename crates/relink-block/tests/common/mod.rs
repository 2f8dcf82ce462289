//! A block target and initiator on a deterministic [`Sim`], a checked
//! workload of mixed commands (each completes exactly once with the
//! expected result; the file equals a model of the writes), and the loop
//! that drives them.

#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use relink::{Path, Policy};
use relink_block::{
    BlockCompletion, BlockError, BlockOp, BlockReply, InitiatorConfig, InitiatorEngine,
    InitiatorEvent, Tag, TargetConfig, TargetEngine, TargetEvent, Volume,
};
use relink_sim::{Sim, INITIATOR, TARGET};
use tempfile::NamedTempFile;

pub const PORT: u16 = 7471;
pub const BLOCK: u64 = 512;
pub const BLOCKS: u64 = 512;
pub const MAX_IO: u32 = 4096;

pub struct World {
    pub sim: Sim,
    pub target: TargetEngine,
    pub init: InitiatorEngine,
    pub file: NamedTempFile,
    /// Every completion, by tag (a second one for a tag fails the test).
    pub done: HashMap<Tag, Result<BlockReply, BlockError>>,
    pub target_events: Vec<TargetEvent>,
    pub init_events: Vec<InitiatorEvent>,
}

pub fn volume_file() -> NamedTempFile {
    let file = NamedTempFile::new().expect("temp file");
    file.as_file().set_len(BLOCK * BLOCKS).expect("size");
    file
}

pub struct Setup {
    pub seed: u64,
    pub two_pairs: bool,
    pub read_only: bool,
    pub target_qd: u16,
    pub init_qd: u16,
    pub policy: Policy,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            seed: 1,
            two_pairs: false,
            read_only: false,
            target_qd: 32,
            init_qd: 32,
            policy: Policy::default(),
        }
    }
}

impl World {
    pub fn new(setup: Setup) -> World {
        let mut sim = Sim::new(setup.seed);
        let file = volume_file();
        let volume = Volume::open(file.path(), setup.read_only).expect("volume");
        let (paths, listen) = if setup.two_pairs {
            (sim.two_paths(PORT), "0.0.0.0:7471".parse().unwrap())
        } else {
            let one = Path {
                local: None,
                peer: sim.target_addr(PORT),
            };
            (vec![one], sim.target_addr(PORT))
        };
        let tcfg = TargetConfig::default()
            .queue_depth(setup.target_qd)
            .max_io(MAX_IO)
            .policy(setup.policy.clone());
        let target = TargetEngine::listen(sim.node(TARGET), listen, volume, tcfg).expect("listen");
        let icfg = InitiatorConfig::default()
            .queue_depth(setup.init_qd)
            .max_io(MAX_IO)
            .policy(setup.policy);
        let init = InitiatorEngine::connect(sim.node(INITIATOR), paths, icfg).expect("connect");
        World {
            sim,
            target,
            init,
            file,
            done: HashMap::new(),
            target_events: Vec::new(),
            init_events: Vec::new(),
        }
    }

    /// Hand every output of both nodes to the engines; take their outputs.
    pub fn pump(&mut self) {
        loop {
            let mut any = false;
            while let Some(out) = self.sim.node(TARGET).poll_output() {
                any = true;
                let node = self.sim.node(TARGET);
                // Another session's (an engine replaced in a test): dropped.
                let _ = self.target.handle(node, out);
            }
            while let Some(out) = self.sim.node(INITIATOR).poll_output() {
                any = true;
                let node = self.sim.node(INITIATOR);
                let _ = self.init.handle(node, out);
            }
            self.init.handle_timeout(self.sim.node(INITIATOR));
            while let Some((tag, result)) = self.init.poll_completion() {
                let again = self.done.insert(tag, result);
                assert!(again.is_none(), "{tag:?} completed twice");
            }
            self.target_events
                .extend(std::iter::from_fn(|| self.target.poll_event()));
            self.init_events
                .extend(std::iter::from_fn(|| self.init.poll_event()));
            if !any {
                return;
            }
            self.sim.settle();
        }
    }

    pub fn step(&mut self) {
        self.sim.run_for(Duration::from_micros(20));
        self.pump();
    }

    /// Step until `cond` or `limit` of virtual time; whether it held.
    pub fn run_until(&mut self, limit: Duration, mut cond: impl FnMut(&mut World) -> bool) -> bool {
        let until = self.sim.now() + limit;
        loop {
            self.pump();
            if cond(self) {
                return true;
            }
            if self.sim.now() >= until {
                return false;
            }
            self.step();
        }
    }

    pub fn submit(&mut self, op: BlockOp) -> Tag {
        let node = self.sim.node(INITIATOR);
        self.init.submit(node, op).expect("submit")
    }

    /// Submit `op` and run until it completes.
    pub fn call(&mut self, op: BlockOp) -> Result<BlockReply, BlockError> {
        let tag = self.submit(op);
        assert!(
            self.run_until(Duration::from_secs(5), |w| w.done.contains_key(&tag)),
            "{tag:?} never completed"
        );
        self.done.remove(&tag).expect("completed")
    }

    pub fn file_bytes(&self) -> Vec<u8> {
        std::fs::read(self.file.path()).expect("read the volume")
    }
}

pub fn completion_ok(c: &BlockCompletion) -> bool {
    c.1.is_ok()
}

/// What a command must complete with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Done,
    Data(Vec<u8>),
}

/// Mixed READ / WRITE (with and without FUA) / FLUSH / WRITE_ZEROES on
/// ranges no other outstanding command touches, so each result is known
/// when submitted; a model of the volume's bytes.
pub struct Traffic {
    rng: u64,
    pub model: Vec<u8>,
    busy: BTreeSet<u64>,
    ranges: HashMap<Tag, (u64, u64)>,
    pub expect: HashMap<Tag, Expect>,
    pub counts: [u32; 4],
}

impl Traffic {
    pub fn new(seed: u64) -> Traffic {
        Traffic {
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            model: vec![0; (BLOCK * BLOCKS) as usize],
            busy: BTreeSet::new(),
            ranges: HashMap::new(),
            expect: HashMap::new(),
            counts: [0; 4],
        }
    }

    fn next(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    /// A free range of 1..=8 blocks, or `None` after a few tries.
    fn range(&mut self) -> Option<(u64, u64)> {
        for _ in 0..8 {
            let n = self.next() % (u64::from(MAX_IO) / BLOCK) + 1;
            let first = self.next() % (BLOCKS - n + 1);
            if (first..first + n).all(|b| !self.busy.contains(&b)) {
                return Some((first, n));
            }
        }
        None
    }

    /// Submit one command.
    pub fn submit_one(&mut self, w: &mut World) {
        let kind = self.next() % 10;
        if kind == 0 {
            let tag = w.submit(BlockOp::Flush);
            self.expect.insert(tag, Expect::Done);
            self.counts[2] += 1;
            return;
        }
        let Some((first, n)) = self.range() else {
            return;
        };
        let (off, len) = ((first * BLOCK) as usize, (n * BLOCK) as usize);
        let (tag, expect) = if kind < 5 {
            self.counts[0] += 1;
            let tag = w.submit(BlockOp::Read {
                offset: off as u64,
                len: len as u32,
            });
            (tag, Expect::Data(self.model[off..off + len].to_vec()))
        } else if kind < 9 {
            self.counts[1] += 1;
            let stamp = self.next();
            let data: Vec<u8> = (0..len)
                .map(|i| (stamp as u8).wrapping_add((i as u8).wrapping_mul(31)) | 1)
                .collect();
            self.model[off..off + len].copy_from_slice(&data);
            let fua = stamp % 3 == 0;
            // Half by value, half from the caller's bytes (copied
            // straight into a slot when one is free, else queued).
            let tag = if stamp % 2 == 0 {
                w.submit(BlockOp::Write {
                    offset: off as u64,
                    data,
                    fua,
                })
            } else {
                let node = w.sim.node(INITIATOR);
                w.init
                    .submit_write(node, off as u64, &data, fua)
                    .expect("submit")
            };
            (tag, Expect::Done)
        } else {
            self.counts[3] += 1;
            self.model[off..off + len].fill(0);
            let tag = w.submit(BlockOp::WriteZeroes {
                offset: off as u64,
                len: len as u32,
                fua: false,
            });
            (tag, Expect::Done)
        };
        self.busy.extend(first..first + n);
        self.ranges.insert(tag, (first, n));
        self.expect.insert(tag, expect);
    }

    /// Keep `depth` commands outstanding or queued.
    pub fn fill(&mut self, w: &mut World, depth: usize) {
        let mut tries = 0;
        while w.init.outstanding() + w.init.queued() < depth && tries < 4 * depth {
            self.submit_one(w);
            tries += 1;
        }
    }

    /// Check the completions that came: each as expected, once.
    pub fn check(&mut self, w: &mut World) {
        for (tag, result) in w.done.drain() {
            let expect = self
                .expect
                .remove(&tag)
                .expect("a tag submitted, completed once");
            let got = result.unwrap_or_else(|e| panic!("{tag:?} failed: {e}"));
            match (expect, got) {
                (Expect::Done, BlockReply::Done) => {}
                (Expect::Data(want), BlockReply::Data(data)) => {
                    assert!(data == want, "{tag:?} read the wrong bytes")
                }
                (e, g) => panic!("{tag:?}: expected {e:?}, got {g:?}"),
            }
            if let Some((first, n)) = self.ranges.remove(&tag) {
                for b in first..first + n {
                    self.busy.remove(&b);
                }
            }
        }
    }

    /// Run traffic with at least `depth` in flight for `rounds` steps,
    /// calling `during(round, world)` before each.
    pub fn run(
        &mut self,
        w: &mut World,
        rounds: u32,
        depth: usize,
        mut during: impl FnMut(u32, &mut World),
    ) {
        for r in 0..rounds {
            self.fill(w, depth);
            during(r, w);
            w.step();
            self.check(w);
        }
    }

    /// Stop submitting; run until every command completed, then check the
    /// file against the model.
    pub fn finish(&mut self, w: &mut World) {
        let drained = w.run_until(Duration::from_secs(10), |w| {
            w.init.outstanding() == 0 && w.init.queued() == 0
        });
        assert!(
            drained,
            "commands still outstanding: {}",
            w.init.outstanding()
        );
        self.check(w);
        assert!(
            self.expect.is_empty(),
            "{} never completed",
            self.expect.len()
        );
        assert!(
            w.file_bytes() == self.model,
            "the volume differs from the model"
        );
    }
}
