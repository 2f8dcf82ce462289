//! One method per kind of call of the script: its arguments read from
//! the input, the call made and its status checked.

use std::ffi::{c_void, CStr};
use std::mem::MaybeUninit;
use std::ptr::{null, null_mut};

use super::{check, ok, or_null, World, MEMORY_BUDGET};
use crate::status::relink_status::*;
use crate::*;

impl World<'_> {
    pub(super) fn options_new(&mut self) {
        if self.options.len() >= 4 {
            return;
        }
        let mut o: *mut relink_options = null_mut();
        let out = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            &mut o as *mut _
        };
        // SAFETY: `out` is NULL or valid for a write of a pointer.
        check(unsafe { relink_options_new(out) });
        if !o.is_null() {
            self.options.push(o);
        }
    }

    pub(super) fn options_set(&mut self) {
        let o = self.opts();
        let which = self.input.u8() % 22;
        let (u, i, s) = (
            self.input.num_u32(),
            self.input.num_i64(),
            self.input.num_i32(),
        );
        let v = self.input.num();
        // SAFETY: `o` is NULL or live options; the data buffer below is
        // valid for its length or its length is over
        // RELINK_MAX_CONNECT_DATA (refused before a byte is read).
        let st = unsafe {
            match which {
                0 => relink_options_set_recv_slots(o, u),
                1 => relink_options_set_max_message(o, u),
                2 => relink_options_set_max_one_sided(o, u),
                3 => relink_options_set_rendezvous(o, u),
                4 => relink_options_set_max_outstanding(o, u),
                5 => {
                    let (buf, no_buf, len) = self.buffer(RELINK_MAX_CONNECT_DATA as u64);
                    let p = if no_buf { null() } else { buf.as_ptr().cast() };
                    relink_options_set_connect_data(o, p, len as usize)
                }
                6 => relink_options_set_region_window(o, self.region(), s),
                7 => relink_options_set_shared_receive(o, v, s),
                8 => relink_options_set_give_up_ms(o, i),
                9 => relink_options_set_first_connect_give_up_ms(o, i),
                10 => relink_options_set_fast_fail_ms(o, i),
                11 => relink_options_set_keepalive_ms(o, i),
                12 => relink_options_set_reconnect_delay_ms(o, v),
                13 => relink_options_set_initial_backoff_ms(o, v),
                14 => relink_options_set_connect_timeout_ms(o, v),
                15 => relink_options_set_device_match(o, s),
                16 => relink_options_set_failback(o, s),
                17 => relink_options_set_replay_atomics(o, s),
                18 => relink_options_set_manual_recovery(o, s),
                19 => relink_options_set_standby(o, s),
                20 => relink_options_set_probe_interval_ms(o, i),
                _ => relink_options_set_probe_timeout_ms(o, v),
            }
        };
        check(st);
    }

    pub(super) fn add_region(&mut self) {
        let o = self.opts();
        let id = self.region();
        let len = match self.input.u8() % 4 {
            0 => 4096,
            1 => u64::from(self.input.u8()),
            _ => self.input.num(),
        };
        let (access, advertise) = (self.input.num_u32() & 0x1f, self.input.num_i32());
        // SAFETY: NULL or live options.
        check(unsafe { relink_options_add_region(o, id, len, access, advertise) });
    }

    pub(super) fn listen(&mut self) {
        let (n, addr, o) = (self.node(), self.string(), self.opts());
        if Self::too_big(o) {
            return;
        }
        let mut l = 0u64;
        let out = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            &mut l as *mut u64
        };
        // SAFETY: NULL or a live node, NULL or a NUL-terminated string,
        // NULL or live options, `out` NULL or valid for a write.
        let st = unsafe { relink_listen(n, addr.ptr(), o, out) };
        check(st);
        if st == RELINK_OK && !out.is_null() {
            self.listeners.push(l);
        }
    }

    pub(super) fn connect(&mut self) {
        let (n, peer, local, o) = (self.node(), self.string(), self.string(), self.opts());
        if Self::too_big(o) {
            return;
        }
        let mut s = 0u64;
        let out = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            &mut s as *mut u64
        };
        // SAFETY: as in `listen`.
        let st = unsafe { relink_connect(n, peer.ptr(), local.ptr(), o, out) };
        check(st);
        if st == RELINK_OK && !out.is_null() {
            self.sessions.push(s);
        }
    }

    pub(super) fn accept(&mut self) {
        let n = self.node();
        let mut acc = MaybeUninit::<relink_accepted>::uninit();
        let out = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            acc.as_mut_ptr()
        };
        // SAFETY: NULL or a live node; `out` NULL or valid for a write.
        let st = unsafe { relink_accept(n, out) };
        check(st);
        if st == RELINK_OK {
            // SAFETY: written by the call that returned RELINK_OK.
            let acc = unsafe { acc.assume_init() };
            assert!(acc.connect_data_len <= RELINK_MAX_CONNECT_DATA);
            self.sessions.push(acc.session);
        }
    }

    pub(super) fn listener_calls(&mut self) {
        let n = self.node();
        let ids = self.listeners.clone();
        let l = self.pick_id(&ids);
        let mut active = 0i32;
        let out = if self.input.bool() {
            null_mut()
        } else {
            &mut active as *mut i32
        };
        // SAFETY: NULL or a live node; `out` NULL or valid for a write.
        unsafe {
            if self.input.bool() {
                check(relink_close_listener(n, l));
            } else {
                check(relink_listener_active(n, l, out));
            }
        }
    }

    pub(super) fn session_getters(&mut self) {
        let (n, s) = (self.node(), self.session());
        let null = self.input.u8() % 8 == 0;
        let which = self.input.num_i32();
        let mut state = MaybeUninit::<relink_state>::uninit();
        let mut counters = MaybeUninit::<relink_counters>::uninit();
        let mut v = 0u64;
        // SAFETY: NULL or a live node; each out-pointer NULL or valid for
        // a write of its type.
        unsafe {
            match self.input.u8() % 4 {
                0 => check(relink_session_state(
                    n,
                    s,
                    if null { null_mut() } else { state.as_mut_ptr() },
                )),
                1 => check(relink_session_counters(
                    n,
                    s,
                    if null {
                        null_mut()
                    } else {
                        counters.as_mut_ptr()
                    },
                )),
                2 => check(relink_session_counter(
                    n,
                    s,
                    which,
                    if null { null_mut() } else { &mut v },
                )),
                _ => check(relink_room(n, s, if null { null_mut() } else { &mut v })),
            }
        }
    }

    /// Both nodes wait up to a few milliseconds of virtual time; what is
    /// accepted is taken.
    pub(super) fn turn(&mut self) {
        let rounds = 1 + usize::from(self.input.u8() % 16);
        for _ in 0..rounds {
            self.wait_both(1);
        }
    }

    pub(super) fn wait_both(&mut self, ms: i64) {
        for n in self.nodes {
            if n.is_null() {
                continue;
            }
            let mut did = 0;
            // SAFETY: a live node; `did` valid for a write.
            check(unsafe { relink_wait(n, ms, &mut did) });
            let mut acc = MaybeUninit::<relink_accepted>::uninit();
            // SAFETY: a live node; `acc` valid for a write.
            if unsafe { relink_accept(n, acc.as_mut_ptr()) } == RELINK_OK {
                // SAFETY: written by the call that returned RELINK_OK.
                self.sessions.push(unsafe { acc.assume_init() }.session);
            }
        }
    }

    pub(super) fn register(&mut self) {
        let n = self.node();
        let words = match self.input.u8() % 4 {
            0 => 512,
            1 => 0,
            _ => usize::from(self.input.u8()) + 1,
        };
        let mut buf = vec![0u64; words];
        let ptr: *mut c_void = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            buf.as_mut_ptr().cast()
        };
        // The length is the buffer's, or less (any length with NULL).
        let len = if ptr.is_null() {
            self.input.num() as usize
        } else {
            (words * 8).saturating_sub(usize::from(self.input.u8() % 4))
        };
        let access = self.input.num_u32() & 0x1f;
        let mut id = 0u32;
        let out = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            &mut id as *mut u32
        };
        // SAFETY: NULL or a live node; `ptr` NULL or valid for `len` bytes
        // and kept alive (in `buffers`) until the nodes are freed; `out`
        // NULL or valid for a write.
        let st = unsafe { relink_register(n, ptr, len, access, out) };
        check(st);
        if st == RELINK_OK && !out.is_null() {
            self.registrations.push(id);
        }
        self.buffers.push(buf);
    }

    pub(super) fn region_copy(&mut self) {
        let (n, s, r, off) = (self.node(), self.session(), self.region(), self.offset());
        // Past any region here (at most MEMORY_BUDGET bytes), a length is
        // refused before a byte is copied.
        let (mut buf, no_buf, len) = self.buffer(MEMORY_BUDGET);
        let ptr = if no_buf { null_mut() } else { buf.as_mut_ptr() };
        // SAFETY: NULL or a live node; `ptr` NULL or valid for `len` bytes,
        // or for one byte when `len` is past any region.
        unsafe {
            if self.input.bool() {
                check(relink_region_write(n, s, r, off, ptr.cast(), len as usize));
            } else {
                check(relink_region_read(n, s, r, off, ptr.cast(), len as usize));
            }
        }
    }

    pub(super) fn op_out(&mut self, op: &mut u64) -> *mut u64 {
        if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            op
        }
    }

    pub(super) fn send(&mut self) {
        let (n, s) = (self.node(), self.session());
        // Past 1 GiB (the most `max_message` takes) a message is refused
        // before a byte is read.
        let (buf, no_buf, len) = self.buffer(1 << 30);
        let p = if no_buf { null() } else { buf.as_ptr() };
        let mut op = 0;
        let out = self.op_out(&mut op);
        // SAFETY: NULL or a live node; `p` NULL or valid for `len` bytes
        // (one byte past 1 GiB); `out` NULL or valid for a write.
        check(unsafe { relink_send(n, s, p.cast(), len as usize, out) });
    }

    pub(super) fn one_sided(&mut self) {
        let (n, s, r, off) = (self.node(), self.session(), self.region(), self.offset());
        let (len, remote, imm) = (self.input.num_u32(), self.token(), self.input.u32());
        let mut op = 0;
        let out = self.op_out(&mut op);
        // SAFETY: NULL or a live node; `out` NULL or valid for a write.
        unsafe {
            match self.input.u8() % 3 {
                0 => check(relink_write(n, s, r, off, len, remote, out)),
                1 => check(relink_write_imm(n, s, r, off, len, remote, imm, out)),
                _ => check(relink_read(n, s, r, off, len, remote, out)),
            }
        }
    }

    pub(super) fn atomic(&mut self) {
        let (n, s, r, off) = (self.node(), self.session(), self.region(), self.offset());
        let (remote, a, b) = (self.token(), self.input.num(), self.input.num());
        let mut op = 0;
        let out = self.op_out(&mut op);
        // SAFETY: NULL or a live node; `out` NULL or valid for a write.
        unsafe {
            if self.input.bool() {
                check(relink_fetch_add(n, s, r, off, remote, a, out));
            } else {
                check(relink_cmp_swap(n, s, r, off, remote, a, b, out));
            }
        }
    }

    pub(super) fn post(&mut self) {
        let (n, s) = (self.node(), self.session());
        let kind = match self.input.u8() % 4 {
            0 => self.input.num_i32(),
            _ => i32::from(self.input.u8() % 9),
        };
        let flags = match self.input.u8() % 4 {
            0 => self.input.u32(),
            _ => u32::from(self.input.u8() % 4),
        };
        let (buf, no_buf, len) = self.buffer(1 << 30);
        let mut sgl = [relink_sge {
            region: 0,
            offset: 0,
            len: 0,
        }; RELINK_MAX_SGE as usize];
        for e in &mut sgl {
            *e = relink_sge {
                region: self.region(),
                offset: self.offset(),
                len: self.input.num_u32(),
            };
        }
        // Any count: past RELINK_MAX_SGE it is refused before a range is
        // read.
        let num_sge = match self.input.u8() % 4 {
            0 => self.input.u32(),
            _ => u32::from(self.input.u8() % 6),
        };
        let wr = relink_work_request {
            kind,
            flags,
            context: self.input.num(),
            buf: if no_buf { null() } else { buf.as_ptr().cast() },
            len,
            region: self.region(),
            offset: self.offset(),
            remote: self.token(),
            add: self.input.num(),
            compare: self.input.num(),
            swap: self.input.num(),
            sgl: if self.input.u8() % 8 == 0 {
                null()
            } else {
                sgl.as_ptr()
            },
            num_sge,
            imm: self.input.u32(),
        };
        let wr_ptr = if self.input.u8() % 16 == 0 {
            null()
        } else {
            &wr as *const relink_work_request
        };
        let mut op = 0;
        let out = self.op_out(&mut op);
        // SAFETY: NULL or a live node; `wr_ptr` NULL or a work request
        // whose `buf` is NULL or valid for `len` bytes (one byte past
        // 1 GiB) and whose `sgl` is NULL or holds RELINK_MAX_SGE ranges;
        // `out` NULL or valid for a write.
        check(unsafe { relink_post(n, s, wr_ptr, out) });
    }

    pub(super) fn post_receive(&mut self) {
        let (n, s, r, off) = (self.node(), self.session(), self.region(), self.offset());
        let (len, ctx) = (self.input.num(), self.input.num());
        // SAFETY: NULL or a live node.
        check(unsafe { relink_post_receive(n, s, r, off, len, ctx) });
    }

    pub(super) fn polls(&mut self) {
        let (n, s) = (self.node(), self.session());
        let null = self.input.u8() % 8 == 0;
        let cap = match self.input.u8() % 4 {
            0 => 0,
            1 => 4096,
            _ => usize::from(self.input.u8()),
        };
        let mut buf = vec![0u8; cap];
        let bufp: *mut c_void = if cap == 0 && self.input.bool() {
            null_mut()
        } else {
            buf.as_mut_ptr().cast()
        };
        let (mut len, mut seq) = (0usize, 0u64);
        let mut received = MaybeUninit::<relink_received>::uninit();
        let mut written = MaybeUninit::<relink_written>::uninit();
        let mut completion = MaybeUninit::<relink_completion>::uninit();
        let mut event = MaybeUninit::<relink_event>::uninit();
        let mut output = MaybeUninit::<relink_output>::uninit();
        // SAFETY: NULL or a live node; `bufp` valid for `cap` bytes (NULL
        // only with `cap` 0); every out-pointer NULL or valid for a write
        // of its type.
        unsafe {
            match self.input.u8() % 6 {
                0 => check(relink_poll_received(
                    n,
                    s,
                    or_null(null, received.as_mut_ptr()),
                )),
                1 => check(relink_poll_written(
                    n,
                    s,
                    if self.input.bool() {
                        null_mut()
                    } else {
                        &mut seq
                    },
                    or_null(null, written.as_mut_ptr()),
                )),
                2 => check(relink_poll_completion(
                    n,
                    s,
                    or_null(null, completion.as_mut_ptr()),
                )),
                3 => check(relink_poll_delivery(
                    n,
                    s,
                    bufp,
                    cap,
                    if null { null_mut() } else { &mut len },
                    if self.input.bool() {
                        null_mut()
                    } else {
                        &mut seq
                    },
                )),
                4 => check(relink_poll_event(n, s, or_null(null, event.as_mut_ptr()))),
                _ => check(relink_poll_output(
                    n,
                    or_null(null, output.as_mut_ptr()),
                    bufp,
                    cap,
                )),
            }
        }
    }

    pub(super) fn shared_receive(&mut self) {
        let n = self.node();
        let q = {
            let ids = self.queues.clone();
            self.pick_id(&ids)
        };
        // SAFETY: NULL or a live node; each out-pointer NULL or valid for
        // a write (`out` for `cap` buffers).
        unsafe {
            match self.input.u8() % 4 {
                0 => {
                    // Depths and sizes within the budget: a queue of
                    // gigabytes is the caller's to ask for.
                    let depth = self.input.num_u32() % 1024;
                    let max = self.input.num_u32() % (64 << 10);
                    let mut id = 0u64;
                    let out = if self.input.u8() % 8 == 0 {
                        null_mut()
                    } else {
                        &mut id as *mut u64
                    };
                    let st = relink_shared_receive_new(n, depth, max, out);
                    check(st);
                    if st == RELINK_OK && !out.is_null() {
                        self.queues.push(id);
                    }
                }
                1 => check(relink_shared_receive_free(n, q)),
                2 => {
                    let (r, off, len, ctx) = (
                        self.region(),
                        self.offset(),
                        self.input.num(),
                        self.input.num(),
                    );
                    check(relink_post_shared_receive(n, q, r, off, len, ctx));
                }
                _ => {
                    let cap = usize::from(self.input.u8() % 8);
                    let mut out = vec![
                        relink_posted_buffer {
                            context: 0,
                            region: 0,
                            len: 0,
                            offset: 0,
                        };
                        cap
                    ];
                    let p = if cap == 0 && self.input.bool() {
                        null_mut()
                    } else {
                        out.as_mut_ptr()
                    };
                    let mut k = 0usize;
                    let kp = if self.input.u8() % 8 == 0 {
                        null_mut()
                    } else {
                        &mut k as *mut usize
                    };
                    let st = relink_take_shared_receives(n, q, p, cap, kp);
                    check(st);
                    if st == RELINK_OK && !kp.is_null() {
                        assert!(k <= cap, "{k} buffers taken into {cap}");
                    }
                }
            }
        }
    }

    pub(super) fn recovery(&mut self) {
        let (n, s) = (self.node(), self.session());
        let (ms, manual, path) = (
            self.input.num_i64(),
            self.input.num_i32(),
            self.input.num_i64(),
        );
        // SAFETY: NULL or a live node.
        unsafe {
            match self.input.u8() % 3 {
                0 => check(relink_session_set_recovery(n, s, ms, manual)),
                1 => check(relink_resume(n, s, path)),
                _ => check(relink_suspend(n, s)),
            }
        }
    }

    pub(super) fn drain(&mut self) {
        let (n, dev) = (self.node(), self.string());
        let (mut a, mut b) = (0u32, 0u32);
        let null = self.input.bool();
        let or_null = |p: *mut u32| if null { null_mut() } else { p };
        // SAFETY: NULL or a live node; `dev` NULL or NUL-terminated; the
        // out-pointers NULL or valid for a write.
        unsafe {
            match self.input.u8() % 3 {
                0 => check(relink_drain(n, dev.ptr(), or_null(&mut a), or_null(&mut b))),
                1 => check(relink_undrain(n, dev.ptr())),
                _ => check(relink_sessions_on(n, dev.ptr(), or_null(&mut a))),
            }
        }
    }

    pub(super) fn node_getters(&mut self) {
        let n = self.node();
        let null = self.input.bool();
        let (mut i, mut l, mut u) = (0i32, 0i64, 0u64);
        let mode = self.input.num_i32();
        // SAFETY: NULL or a live node; the out-pointers NULL or valid for a
        // write.
        unsafe {
            match self.input.u8() % 7 {
                0 => check(relink_set_poll_mode(n, mode)),
                1 => check(relink_prepare_to_sleep(
                    n,
                    if null { null_mut() } else { &mut i },
                )),
                2 => check(relink_event_fd(n, if null { null_mut() } else { &mut i })),
                3 => check(relink_next_deadline_ms(
                    n,
                    if null { null_mut() } else { &mut l },
                )),
                4 => check(relink_now_ns(n, if null { null_mut() } else { &mut u })),
                5 => check(relink_poll(n, if null { null_mut() } else { &mut i })),
                _ => check(relink_wait(
                    n,
                    i64::from(self.input.u8() % 4),
                    if null { null_mut() } else { &mut i },
                )),
            }
        }
    }

    pub(super) fn texts(&mut self) {
        let s = self.input.num_i32();
        // SAFETY: each returns a NUL-terminated string valid until the next
        // call on this thread.
        unsafe {
            let _ = CStr::from_ptr(relink_status_name(s));
            assert!(!CStr::from_ptr(relink_version()).is_empty());
            let _ = CStr::from_ptr(relink_last_error());
        }
    }

    #[cfg(feature = "soft")]
    pub(super) fn fault(&mut self) {
        let (host, dev, fault) = (self.string(), self.string(), self.input.num_i32());
        let fabric = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            self.fabric
        };
        // SAFETY: NULL or a live fabric; the strings NULL or
        // NUL-terminated.
        check(unsafe { relink_soft_fabric_fault(fabric, host.ptr(), dev.ptr(), fault) });
    }

    #[cfg(not(feature = "soft"))]
    pub(super) fn fault(&mut self) {}

    /// A session between the nodes in one step, as a program makes it:
    /// options with an advertised region 1 on both ends, a listener on b,
    /// a connect from a, turns until accepted.
    pub(super) fn establish(&mut self) {
        let [a, b] = self.nodes;
        if a.is_null() || b.is_null() {
            return;
        }
        let port = 7000 + u16::from(self.input.u8());
        let addr = format!("10.0.0.2:{port}\0");
        let mut o = null_mut();
        let mut l = 0u64;
        let mut s = 0u64;
        // SAFETY: live nodes, live options made here and freed here; the
        // strings NUL-terminated; every out-pointer valid for a write.
        unsafe {
            ok(relink_options_new(&mut o));
            ok(relink_options_add_region(o, 1, 4096, 0xf, 1));
            let st = relink_listen(b, addr.as_ptr().cast(), o, &mut l);
            check(st);
            if st == RELINK_OK {
                self.listeners.push(l);
                let st = relink_connect(a, addr.as_ptr().cast(), null(), o, &mut s);
                check(st);
                if st == RELINK_OK {
                    self.sessions.push(s);
                }
            }
            relink_options_free(o);
        }
        let before = self.sessions.len();
        for _ in 0..50 {
            self.wait_both(1);
            if self.sessions.len() > before {
                break;
            }
        }
    }

    pub(super) fn node_lifecycle(&mut self) {
        let k = usize::from(self.input.u8() % 2);
        if self.input.bool() {
            // SAFETY: NULL or a live node, NULL below and not used again.
            unsafe { relink_node_free(self.nodes[k]) };
            self.nodes[k] = null_mut();
        } else if self.nodes[k].is_null() {
            let host = self.string();
            let mut n = null_mut();
            // SAFETY: a live fabric; `host` NULL or NUL-terminated; `n`
            // valid for a write.
            let st = unsafe { relink_node_new_soft(self.fabric, host.ptr(), &mut n) };
            check(st);
            if st == RELINK_OK {
                self.nodes[k] = n;
            }
        } else {
            let mut n = null_mut();
            // SAFETY: `n` valid for a write; a node made is freed at once.
            unsafe {
                let st = relink_node_new_verbs(if self.input.bool() {
                    null_mut()
                } else {
                    &mut n
                });
                check(st);
                relink_node_free(n);
            }
        }
    }

    pub(super) fn fabric_calls(&mut self) {
        if self.input.bool() {
            let mut f = null_mut();
            let out = if self.input.bool() {
                null_mut()
            } else {
                &mut f as *mut *mut relink_soft_fabric
            };
            // SAFETY: `out` NULL or valid for a write; a fabric made is
            // freed at once.
            unsafe {
                check(relink_soft_fabric_new(self.input.u64(), out));
                relink_soft_fabric_free(f);
            }
            return;
        }
        let (host, dev, cidr) = (self.string(), self.string(), self.string());
        let fabric = if self.input.u8() % 8 == 0 {
            null_mut()
        } else {
            self.fabric
        };
        // SAFETY: NULL or a live fabric; strings NULL or NUL-terminated.
        check(unsafe { relink_soft_fabric_add_device(fabric, host.ptr(), dev.ptr(), cidr.ptr()) });
    }
}
