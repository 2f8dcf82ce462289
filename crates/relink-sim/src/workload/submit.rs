//! Submission: [`Workload`] fills its [`Window`](super::Window) or
//! submits one operation at a time — messages (from a buffer or from
//! registered memory), WRITEs, READs, FETCH_ADDs, WRITEs with immediate
//! data and flushes — recording what each must produce.

use relink::{BufferToken, LocalRange, LocalSgl, Node, OpId, OpKind, RegionId, SubmitError};
use relink_fabric::Timestamp;

use super::books::{staging, Workload};
use super::layout::{
    BLOCK, BLOCKS, COUNTER, IMM_AREA, IMM_SLOT, RESULTS, SINK, SOURCE, TARGET_DATA, TARGET_LEN,
};
use super::payload::{addend, imm_bytes, message, mix, pattern};
use super::records::{Detail, Imm, Pieces, NO_RESULT};
use super::tally::Class;

impl Workload {
    /// Submit until every kind's window is full, messages first (at most
    /// the window's pace of them), then WRITEs, READs and FETCH_ADDs.
    /// Nothing if [`stopped`](Self::stopped). A submission the node
    /// refuses is recorded as a problem and stops the workload.
    pub fn top_up(&mut self, node: &mut Node) {
        if self.stopped {
            return;
        }
        let now = node.now();
        let mut budget = self.window.pace;
        while self.in_flight(Class::Message) < self.window.messages && budget > 0 {
            match self.submit_message(node) {
                Ok(_) => {}
                Err(e) => return self.refused(now, "send", e),
            }
            budget -= 1;
        }
        while self.in_flight(Class::Write) < self.window.writes {
            match self.submit_write(node, now) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.refused(now, "write", e);
                    break;
                }
            }
        }
        while self.in_flight(Class::Read) < self.window.reads {
            match self.submit_read(node, now) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.refused(now, "read", e);
                    break;
                }
            }
        }
        while self.in_flight(Class::FetchAdd) < self.window.atomics {
            match self.submit_fetch_add(node) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    self.refused(now, "fetch_add", e);
                    break;
                }
            }
        }
    }

    /// Submit `n` messages regardless of the window (a burst before an
    /// admin close, say); a refusal is a problem and stops the workload.
    pub fn burst(&mut self, node: &mut Node, n: usize) {
        let now = node.now();
        for _ in 0..n {
            if let Err(e) = self.submit_message(node) {
                return self.refused(now, "send", e);
            }
        }
    }

    /// Submit the next message. `None` if the node refused it (a closed or
    /// failed session, a full queue): nothing is recorded then.
    pub fn send(&mut self, node: &mut Node) -> Option<OpId> {
        self.submit_message(node).ok()
    }

    /// Submit a WRITE of a block's next pattern to the next block with no
    /// operation pending. `None` if every block is busy, the initiator has
    /// no source region, or the node refused it.
    pub fn write(&mut self, node: &mut Node) -> Option<OpId> {
        let now = node.now();
        self.submit_write(node, now).ok().flatten()
    }

    /// Submit a READ of the next block that is idle and whose contents are
    /// known, into a free landing slot; its bytes are compared at
    /// completion. `None` if no block or slot is free, or on refusal.
    pub fn read(&mut self, node: &mut Node) -> Option<OpId> {
        let now = node.now();
        self.submit_read(node, now).ok().flatten()
    }

    /// Submit a FETCH_ADD of the next seeded addend to the counter. `None`
    /// if every result slot is taken, or on refusal.
    pub fn fetch_add(&mut self, node: &mut Node) -> Option<OpId> {
        self.submit_fetch_add(node).ok().flatten()
    }

    /// Submit a WRITE with immediate data at the next place of the
    /// sequence (shared with the messages): seeded bytes from staging
    /// space of its own (1 to 4 ranges, poisoned at its completion, as a
    /// message's from registered memory) to a landing slot of its own in
    /// the target's data region, `imm` naming its place. One in 16 goes to
    /// a token the target never advertised (an unknown region, or past the
    /// region's end): it must fail `Remote(REM_ACCESS_ERR)` alone, its
    /// number skipped. `None` if no landing slot or staging room is free,
    /// the session has no staging regions, or on refusal.
    pub fn write_imm(&mut self, node: &mut Node) -> Option<OpId> {
        if self.staging.is_none() {
            self.staging = staging(node, self.session);
        }
        let index = self.sent.len() as u64;
        let key = mix(self.seed ^ 0x1a7e_5eed ^ mix(self.stream ^ mix(index)));
        let r = mix(key ^ 0x17);
        let bad = r % 16 == 0;
        let slot = if bad {
            None
        } else {
            Some(self.free_imm_slots.pop()?)
        };
        // Mostly up to 512 bytes, one in 8 up to a whole slot.
        let len = if (r >> 8) % 8 == 0 {
            2 + (r >> 16) % (IMM_SLOT - 1)
        } else {
            2 + (r >> 16) % 511
        };
        let bytes = imm_bytes(self.seed, self.stream, index, len as usize);
        let staged = self
            .staging
            .as_mut()
            .and_then(|st| st.stage(key, index, &bytes));
        let Some((staged, local)) = staged else {
            self.imm_no_room += 1;
            self.free_imm_slots.extend(slot);
            return None;
        };
        let (region, offset) = match slot {
            Some(s) => (TARGET_DATA, IMM_AREA + s * IMM_SLOT),
            None if (r >> 40) & 1 == 1 => (TARGET_DATA, TARGET_LEN - 1),
            None => (RegionId(999), 0),
        };
        let imm = index as u32 ^ self.imm_mask;
        let context = self.next_context();
        let kind = OpKind::WriteImm {
            local,
            remote: BufferToken { region, offset },
            imm,
        };
        match node.submit_with(self.session, kind, context) {
            Ok(op) => {
                self.sent.push(op);
                self.record(op, Detail::WriteImm { index }, context, len);
                self.staged.insert(op, staged);
                self.imms.insert(
                    index,
                    Imm {
                        op,
                        region,
                        slot,
                        offset,
                        len: len as u32,
                        noticed: false,
                        outcome: None,
                        released: false,
                    },
                );
                Some(op)
            }
            Err(_) => {
                if let Some(st) = self.staging.as_mut() {
                    st.release(staged, &bytes);
                }
                self.free_imm_slots.extend(slot);
                None
            }
        }
    }

    /// Submit a flush ([`OpKind::Flush`]): it must complete after every
    /// operation submitted before it and before every one submitted after
    /// it, in the order the completions are taken (checked as they are).
    /// `None` on refusal.
    pub fn flush(&mut self, node: &mut Node) -> Option<OpId> {
        let context = self.next_context();
        let op = node
            .submit_with(self.session, OpKind::Flush, context)
            .ok()?;
        self.record(op, Detail::Flush, context, 0);
        self.pending_flushes.insert(op);
        Some(op)
    }

    fn refused(&mut self, now: Timestamp, what: &str, e: SubmitError) {
        self.problem(now, format!("{what} refused: {e}"));
        self.stopped = true;
    }

    /// Submit message number `index` of the stream: as bytes
    /// ([`OpKind::Message`]), or — half of them, when the session has
    /// staging regions with room — from registered memory
    /// ([`OpKind::MessageFrom`]: 1 to 4 ranges of staging space of its own,
    /// possibly in both regions, held until its completion).
    fn submit_message(&mut self, node: &mut Node) -> Result<OpId, SubmitError> {
        let index = self.sent.len() as u64;
        let payload = message(self.seed, self.stream, index);
        let (context, len) = (self.next_context(), payload.len() as u64);
        if self.staging.is_none() {
            self.staging = staging(node, self.session);
        }
        let key = mix(self.seed ^ 0x5e9d_f40b ^ mix(self.stream ^ mix(index ^ 0x57a9)));
        let staged = match self.staging.as_mut() {
            Some(st) if key >> 63 == 0 => {
                let s = st.stage(key, index, &payload);
                if s.is_none() {
                    self.from_memory.no_room += 1;
                }
                s
            }
            _ => None,
        };
        let Some((staged, local)) = staged else {
            let op = node.submit_with(self.session, OpKind::Message { payload }, context)?;
            self.sent.push(op);
            self.record(op, Detail::Message, context, len);
            return Ok(op);
        };
        match node.submit_with(self.session, OpKind::MessageFrom { local }, context) {
            Ok(op) => {
                self.sent.push(op);
                self.record(op, Detail::Message, context, len);
                self.from_memory.count(&staged);
                self.staged.insert(op, staged);
                Ok(op)
            }
            Err(e) => {
                if let Some(st) = self.staging.as_mut() {
                    st.release(staged, &payload);
                }
                Err(e)
            }
        }
    }

    fn submit_write(
        &mut self,
        node: &mut Node,
        now: Timestamp,
    ) -> Result<Option<OpId>, SubmitError> {
        if self.source.is_none() {
            self.source = node.region(self.session, SOURCE).ok();
        }
        let Some(source) = self.source.clone() else {
            return Ok(None);
        };
        let Some(block) = (0..BLOCKS)
            .map(|i| (self.write_cursor + i) % BLOCKS)
            .find(|b| !self.blocks[*b as usize].busy)
        else {
            return Ok(None);
        };
        self.write_cursor = (block + 1) % BLOCKS;
        let b = &mut self.blocks[block as usize];
        let version = b.next;
        b.next += 1;
        b.busy = true;
        let off = block * BLOCK;
        let bytes = pattern(self.seed, block, Some(version));
        let context = self.next_context();
        let key = mix(context ^ 0x5ca7_7e12);
        // Whole, or cut into pieces laid out in an order of their own in
        // the block's source space and gathered back in order.
        let pieces = (self.sgl && key & 1 == 1).then(|| Pieces::cut(key >> 1, BLOCK));
        let ranges: Vec<(u64, u64, u64)> = match &pieces {
            Some(p) => p.iter().collect(),
            None => vec![(0, 0, BLOCK)],
        };
        for &(at, from, len) in &ranges {
            let piece = &bytes[from as usize..(from + len) as usize];
            if let Err(e) = source.write((off + at) as usize, piece) {
                self.problem(now, format!("source buffer: {e}"));
                return Ok(None);
            }
        }
        let local = LocalSgl::new(ranges.iter().map(|&(at, _, len)| LocalRange {
            region: SOURCE,
            offset: off + at,
            len: len as u32,
        }))
        .expect("1 to 4 ranges");
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: off,
        };
        match node.submit_with(self.session, OpKind::Write { local, remote }, context) {
            Ok(op) => {
                self.writes_gathered += u64::from(pieces.is_some());
                self.record(op, Detail::Write { block, version }, context, BLOCK);
                Ok(Some(op))
            }
            Err(e) => {
                self.blocks[block as usize].busy = false;
                Err(e)
            }
        }
    }

    fn submit_read(
        &mut self,
        node: &mut Node,
        now: Timestamp,
    ) -> Result<Option<OpId>, SubmitError> {
        if self.sink.is_none() {
            self.sink = node.region(self.session, SINK).ok();
        }
        let Some(sink) = self.sink.clone() else {
            return Ok(None);
        };
        let Some(block) = (0..BLOCKS)
            .map(|i| (self.read_cursor + i) % BLOCKS)
            .find(|b| {
                let b = &self.blocks[*b as usize];
                !b.busy && b.undefined.is_none()
            })
        else {
            return Ok(None);
        };
        let Some(slot) = self.free_read_slots.pop() else {
            return Ok(None);
        };
        // Spread reads over the blocks, a prime stride apart.
        self.read_cursor = (block + 37) % BLOCKS;
        let b = &mut self.blocks[block as usize];
        b.busy = true;
        let expect = b.good;
        // Poison the slot so that a read that did not land cannot pass.
        if let Err(e) = sink.write((slot * BLOCK) as usize, &[0xee; BLOCK as usize]) {
            self.problem(now, format!("sink buffer: {e}"));
        }
        let context = self.next_context();
        let key = mix(context ^ 0x5ca7_7e12);
        let scatter = (self.sgl && key & 1 == 1).then(|| Pieces::cut(key >> 1, BLOCK));
        let local = match &scatter {
            Some(p) => LocalSgl::new(p.iter().map(|(at, _, len)| LocalRange {
                region: SINK,
                offset: slot * BLOCK + at,
                len: len as u32,
            }))
            .expect("2 to 4 ranges"),
            None => LocalRange {
                region: SINK,
                offset: slot * BLOCK,
                len: BLOCK as u32,
            }
            .into(),
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: block * BLOCK,
        };
        match node.submit_with(self.session, OpKind::Read { local, remote }, context) {
            Ok(op) => {
                self.reads_scattered += u64::from(scatter.is_some());
                self.record(
                    op,
                    Detail::Read {
                        block,
                        expect,
                        slot,
                        scatter,
                    },
                    context,
                    BLOCK,
                );
                Ok(Some(op))
            }
            Err(e) => {
                self.blocks[block as usize].busy = false;
                self.free_read_slots.push(slot);
                Err(e)
            }
        }
    }

    /// The provider under this workload may complete a FETCH_ADD `Success`
    /// without writing its old value (`why`: the known defect, e.g.
    /// Soft-RoCE's after a lost packet; relink cannot see it). The atomics
    /// check then counts such completions in its text instead of failing;
    /// everything else it checks still holds (each addend applied once,
    /// every written old value distinct and in range).
    pub fn excuse_unwritten_atomic_results(&mut self, why: &'static str) {
        self.unwritten_excused = Some(why);
    }

    fn submit_fetch_add(&mut self, node: &mut Node) -> Result<Option<OpId>, SubmitError> {
        if self.results.is_none() {
            self.results = node.region(self.session, RESULTS).ok();
        }
        if self.results.is_none() {
            return Ok(None);
        }
        let Some(slot) = self.free_atomic_slots.pop() else {
            return Ok(None);
        };
        // The slot shows whether the provider wrote this operation's result
        // (it holds the previous operation's old value otherwise).
        if let Some(m) = &self.results {
            let _ = m.write_u64((slot * 8) as usize, NO_RESULT);
        }
        let add = addend(self.seed, self.atomics);
        self.atomics += 1;
        let local = LocalRange {
            region: RESULTS,
            offset: slot * 8,
            len: 8,
        };
        let remote = BufferToken {
            region: TARGET_DATA,
            offset: COUNTER,
        };
        let context = self.next_context();
        match node.submit_with(
            self.session,
            OpKind::FetchAdd { local, remote, add },
            context,
        ) {
            Ok(op) => {
                self.record(op, Detail::FetchAdd { add, slot }, context, 8);
                Ok(Some(op))
            }
            Err(e) => {
                self.free_atomic_slots.push(slot);
                Err(e)
            }
        }
    }
}
