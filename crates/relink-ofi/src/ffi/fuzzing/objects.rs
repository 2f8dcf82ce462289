//! The objects a script opens from an answer, and one method per step.

use std::ffi::{c_int, c_void};
use std::mem::{size_of, zeroed};
use std::ptr::{null, null_mut};

use super::{check, Input, MAX_STEPS};
use crate::ffi::info::free_info;
use crate::ffi::sys::*;

/// The objects a script opened, by their fids; closed ones are removed.
pub(super) struct World<'a> {
    input: Input<'a>,
    /// The answer objects are opened from.
    info: *mut fi_info,
    fabric: *mut fid_fabric,
    /// Whether `fabric` is the input's own (closed at the end).
    own_fabric: bool,
    domain: *mut fid_domain,
    eqs: Vec<*mut fid_eq>,
    cqs: Vec<*mut fid_cq>,
    pep: *mut fid_pep,
    eps: Vec<*mut fid_ep>,
    mrs: Vec<*mut fid_mr>,
    /// Connection requests read from an event queue: their info (freed at
    /// the end) and handle.
    connreqs: Vec<*mut fi_info>,
    /// Memory the registrations and posted receives use, alive to the end.
    buffers: Vec<Vec<u8>>,
}

/// `fi_close` of any fid.
///
/// # Safety
/// `f` is a live fid of the provider's.
unsafe fn close(f: *mut fid) -> c_int {
    // SAFETY: the caller's contract; every fid has its fi_ops.
    unsafe { ((*(*f).ops).close.expect("close"))(f) }
}

/// Whether `RELINK_FUZZ_TRACE` is set: each step and each entry point's
/// return are then printed (to see what a kept input does).
pub(super) fn trace() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("RELINK_FUZZ_TRACE").is_some())
}

/// The fabric every input but those that open their own uses: opened
/// once, never closed (a static holds it).
fn shared_fabric(prov: &fi_provider) -> *mut fid_fabric {
    static FABRIC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *FABRIC.get_or_init(|| {
        let mut f = null_mut();
        // SAFETY: no attributes; `f` valid for a write.
        let r = unsafe { (prov.fabric.expect("fabric"))(null_mut(), &mut f, null_mut()) };
        assert_eq!(r, 0, "the shared fabric did not open");
        f as usize
    }) as *mut fid_fabric
}

impl<'a> World<'a> {
    pub(super) fn new(input: Input<'a>, info: *mut fi_info) -> World<'a> {
        World {
            input,
            info,
            fabric: null_mut(),
            own_fabric: false,
            domain: null_mut(),
            eqs: Vec::new(),
            cqs: Vec::new(),
            pep: null_mut(),
            eps: Vec::new(),
            mrs: Vec::new(),
            connreqs: Vec::new(),
            buffers: Vec::new(),
        }
    }

    /// Run the script on a fabric: one opened from the answer's
    /// attributes (and closed at the end) for one input in four, else the
    /// process's (opening one costs milliseconds: a node, its soft host and
    /// a progress thread). Every other object is the input's own.
    pub(super) fn script(&mut self, prov: &fi_provider) {
        if self.input.u8() % 4 == 0 {
            let mut f = null_mut();
            // SAFETY: the answer's fabric attributes, `f` valid for a write.
            let r = unsafe {
                (prov.fabric.expect("fabric"))((*self.info).fabric_attr, &mut f, null_mut())
            };
            check(r as isize);
            if r != 0 {
                return;
            }
            self.fabric = f;
            self.own_fabric = true;
        } else {
            self.fabric = shared_fabric(prov);
        }
        for _ in 0..MAX_STEPS {
            if self.input.data.is_empty() {
                break;
            }
            self.step();
        }
    }

    fn pick<T: Copy>(&mut self, v: &[T]) -> Option<T> {
        if v.is_empty() {
            None
        } else {
            Some(v[usize::from(self.input.u8()) % v.len()])
        }
    }

    /// An info to open an endpoint from: the answer or a request's.
    fn info_for_ep(&mut self) -> *mut fi_info {
        let reqs = self.connreqs.clone();
        match self.input.u8() % 3 {
            0 => self.pick(&reqs).unwrap_or(self.info),
            _ => self.info,
        }
    }

    fn step(&mut self) {
        let step = self.input.u8() % 20;
        if trace() {
            eprintln!("step {step}");
        }
        // SAFETY: every object pointer used below is a live object of the
        // provider's (closed ones are removed from the world), every
        // buffer as long as the length passed with it.
        unsafe {
            match step {
                0 => self.open_domain(),
                1 => self.open_eq(),
                2 => self.open_cq(),
                3 => self.open_pep(),
                4 | 5 => self.open_ep(),
                6 => self.bind(),
                7 => self.enable_and_listen(),
                8 => self.names(),
                9 => self.connect(),
                10 | 11 => self.read_eq(),
                12 => self.accept_or_reject(),
                13 => self.register(),
                14 | 15 => self.data(),
                16 => self.rma(),
                17 => self.read_cq(),
                18 => self.close_one(),
                _ => std::thread::yield_now(),
            }
        }
    }

    unsafe fn open_domain(&mut self) {
        if !self.domain.is_null() {
            return;
        }
        let mut d = null_mut();
        // SAFETY: a live fabric, the answer, `d` valid for a write.
        let r = unsafe {
            ((*(*self.fabric).ops).domain.expect("domain"))(
                self.fabric,
                self.info,
                &mut d,
                null_mut(),
            )
        };
        check(r as isize);
        if r == 0 {
            self.domain = d;
        }
    }

    unsafe fn open_eq(&mut self) {
        if self.eqs.len() >= 2 {
            return;
        }
        // SAFETY: zero is every attribute unspecified.
        let mut attr: fi_eq_attr = unsafe { zeroed() };
        attr.size = self.input.num() as usize % 65536;
        attr.flags = u64::from(self.input.u8());
        attr.wait_obj = u32::from(self.input.u8() % 6);
        let mut eq = null_mut();
        // SAFETY: a live fabric; `attr` and `eq` valid.
        let r = unsafe {
            ((*(*self.fabric).ops).eq_open.expect("eq_open"))(
                self.fabric,
                &mut attr,
                &mut eq,
                null_mut(),
            )
        };
        check(r as isize);
        if r == 0 {
            self.eqs.push(eq);
        }
    }

    unsafe fn open_cq(&mut self) {
        if self.domain.is_null() || self.cqs.len() >= 2 {
            return;
        }
        // SAFETY: zero is every attribute unspecified.
        let mut attr: fi_cq_attr = unsafe { zeroed() };
        attr.size = self.input.num() as usize % 65536;
        attr.flags = u64::from(self.input.u8());
        attr.format = match self.input.u8() % 3 {
            0 => FI_CQ_FORMAT_DATA,
            1 => u32::from(self.input.u8() % 6),
            _ => self.input.u32(),
        };
        attr.wait_obj = u32::from(self.input.u8() % 6);
        let mut cq = null_mut();
        // SAFETY: a live domain; `attr` and `cq` valid.
        let r = unsafe {
            ((*(*self.domain).ops).cq_open.expect("cq_open"))(
                self.domain,
                &mut attr,
                &mut cq,
                null_mut(),
            )
        };
        check(r as isize);
        if r == 0 {
            self.cqs.push(cq);
        }
    }

    unsafe fn open_pep(&mut self) {
        if !self.pep.is_null() {
            return;
        }
        let mut p = null_mut();
        // SAFETY: a live fabric, the answer, `p` valid for a write.
        let r = unsafe {
            ((*(*self.fabric).ops).passive_ep.expect("passive_ep"))(
                self.fabric,
                self.info,
                &mut p,
                null_mut(),
            )
        };
        check(r as isize);
        if r == 0 {
            self.pep = p;
        }
    }

    unsafe fn open_ep(&mut self) {
        if self.domain.is_null() || self.eps.len() >= 3 {
            return;
        }
        let info = self.info_for_ep();
        let mut ep = null_mut();
        // SAFETY: the answer or a request's info, alive to the end.
        let from_request = unsafe { !(*info).handle.is_null() } && info != self.info;
        // SAFETY: a live domain, an answer or a request's info, `ep` valid.
        let r = unsafe {
            ((*(*self.domain).ops).endpoint.expect("endpoint"))(
                self.domain,
                info,
                &mut ep,
                null_mut(),
            )
        };
        check(r as isize);
        if r == 0 {
            self.eps.push(ep);
            if from_request {
                // SAFETY: as above. The endpoint owns the handle now.
                unsafe { (*info).handle = null_mut() };
            }
        }
    }

    /// Reject every request neither rejected nor taken by an endpoint (an
    /// application answers each): that frees its handle.
    fn answer_requests(&mut self) {
        if self.pep.is_null() {
            return;
        }
        for &i in &self.connreqs {
            // SAFETY: a request's info, alive to the end; its handle NULL
            // or not answered yet; a live passive endpoint.
            unsafe {
                if (*i).handle.is_null() {
                    continue;
                }
                let r =
                    ((*(*self.pep).cm).reject.expect("reject"))(self.pep, (*i).handle, null(), 0);
                assert_eq!(r, 0, "a request's reject failed: {r}");
                (*i).handle = null_mut();
            }
        }
    }

    unsafe fn bind(&mut self) {
        let flags = match self.input.u8() % 4 {
            0 => FI_TRANSMIT | FI_RECV,
            1 => FI_TRANSMIT,
            2 => FI_RECV,
            _ => self.input.u64(),
        };
        let eqs = self.eqs.clone();
        let cqs = self.cqs.clone();
        let target: Option<*mut fid> = if self.input.bool() {
            self.pick(&eqs).map(|e| e.cast())
        } else {
            self.pick(&cqs).map(|c| c.cast())
        };
        let Some(target) = target else { return };
        let eps = self.eps.clone();
        let from: *mut fid = if self.input.u8() % 4 == 0 || eps.is_empty() {
            self.pep.cast()
        } else {
            self.pick(&eps).unwrap_or(null_mut()).cast()
        };
        if from.is_null() {
            return;
        }
        // SAFETY: live fids of the provider's.
        let r = unsafe { ((*(*from).ops).bind.expect("bind"))(from, target, flags) };
        check(r as isize);
    }

    unsafe fn enable_and_listen(&mut self) {
        if self.input.bool() && !self.pep.is_null() {
            // SAFETY: a live passive endpoint.
            let r = unsafe { ((*(*self.pep).cm).listen.expect("listen"))(self.pep) };
            check(r as isize);
            return;
        }
        let eps = self.eps.clone();
        if let Some(ep) = self.pick(&eps) {
            let f: *mut fid = ep.cast();
            // SAFETY: a live endpoint.
            let r = unsafe {
                ((*(*f).ops).control.expect("control"))(f, FI_ENABLE as c_int, null_mut())
            };
            check(r as isize);
        }
    }

    /// The endpoint's or listener's fid and its cm ops.
    fn cm_target(&mut self) -> Option<(*mut fid, *mut fi_ops_cm)> {
        let eps = self.eps.clone();
        if self.input.bool() && !self.pep.is_null() {
            // SAFETY: a live passive endpoint.
            Some((self.pep.cast(), unsafe { (*self.pep).cm }))
        } else {
            // SAFETY: a live endpoint.
            self.pick(&eps).map(|e| (e.cast(), unsafe { (*e).cm }))
        }
    }

    unsafe fn names(&mut self) {
        let Some((f, cm)) = self.cm_target() else {
            return;
        };
        if self.input.bool() {
            let mut buf = vec![0u8; self.input.len()];
            let mut len = buf.len();
            let p = if buf.is_empty() && self.input.bool() {
                null_mut()
            } else {
                buf.as_mut_ptr().cast()
            };
            // SAFETY: `buf` valid for `len` bytes; `len` valid.
            let r = unsafe { ((*cm).getname.expect("getname"))(f, p, &mut len) };
            check(r as isize);
            return;
        }
        // SAFETY: the live object's cm ops table.
        if let Some(setname) = unsafe { (*cm).setname } {
            let mut a = self.input.addr();
            let p = if a.is_empty() {
                null_mut()
            } else {
                a.as_mut_ptr().cast()
            };
            // SAFETY: `a` valid for its length.
            let r = unsafe { setname(f, p, a.len()) };
            check(r as isize);
        }
    }

    /// CM data of any length (up to 4 KiB, as long as its buffer), or
    /// NULL with any length.
    fn param(&mut self) -> (Vec<u8>, *const c_void, usize) {
        if self.input.u8() % 8 == 0 {
            let n = self.input.num() as usize;
            return (Vec::new(), null(), if self.input.bool() { 0 } else { n });
        }
        let n = self.input.len();
        let fill = self.input.u8();
        let v = vec![fill; n];
        let p = v.as_ptr().cast();
        (v, p, n)
    }

    unsafe fn connect(&mut self) {
        let eps = self.eps.clone();
        let Some(ep) = self.pick(&eps) else { return };
        // The listener's own address, or any (as long as a sockaddr_in6).
        let mut addr = vec![0u8; size_of::<libc::sockaddr_in6>()];
        if self.input.bool() && !self.pep.is_null() {
            let mut len = addr.len();
            // SAFETY: a live passive endpoint; `addr` valid for `len`.
            let r = unsafe {
                ((*(*self.pep).cm).getname.expect("getname"))(
                    self.pep.cast(),
                    addr.as_mut_ptr().cast(),
                    &mut len,
                )
            };
            check(r as isize);
        } else {
            let a = self.input.addr();
            let n = a.len().min(addr.len());
            addr[..n].copy_from_slice(&a[..n]);
        }
        let (_keep, p, n) = self.param();
        // SAFETY: a live endpoint; `addr` a sockaddr's size; `p` valid for
        // `n` bytes or NULL.
        let r = unsafe { ((*(*ep).cm).connect.expect("connect"))(ep, addr.as_ptr().cast(), p, n) };
        check(r as isize);
    }

    unsafe fn read_eq(&mut self) {
        let eqs = self.eqs.clone();
        let Some(eq) = self.pick(&eqs) else { return };
        if self.input.u8() % 4 == 0 {
            // SAFETY: zero is a valid error entry to fill.
            let mut e: fi_eq_err_entry = unsafe { zeroed() };
            // SAFETY: a live queue, `e` valid.
            let r = unsafe { ((*(*eq).ops).readerr.expect("readerr"))(eq, &mut e, 0) };
            check(r);
            return;
        }
        // Big enough for an entry with the most CM data, or any size.
        let len = if self.input.bool() {
            256
        } else {
            self.input.len()
        };
        let mut buf = vec![0u64; len.div_ceil(8)];
        let mut event = 0u32;
        // SAFETY: a live queue; `buf` valid for `len` bytes.
        let r = unsafe {
            ((*(*eq).ops).read.expect("read"))(eq, &mut event, buf.as_mut_ptr().cast(), len, 0)
        };
        check(r);
        if r >= size_of::<fi_eq_cm_entry>() as isize && event == FI_CONNREQ {
            // SAFETY: a CONNREQ event is an fi_eq_cm_entry.
            let entry = unsafe { &*buf.as_ptr().cast::<fi_eq_cm_entry>() };
            if !entry.info.is_null() {
                self.connreqs.push(entry.info);
            }
        }
    }

    unsafe fn accept_or_reject(&mut self) {
        let (_keep, p, n) = self.param();
        if self.input.bool() {
            let eps = self.eps.clone();
            let Some(ep) = self.pick(&eps) else { return };
            // SAFETY: a live endpoint; `p` valid for `n` bytes or NULL.
            let r = unsafe { ((*(*ep).cm).accept.expect("accept"))(ep, p, n) };
            check(r as isize);
        } else if !self.pep.is_null() {
            let reqs = self.connreqs.clone();
            let req = if self.input.u8() % 4 == 0 {
                None
            } else {
                self.pick(&reqs)
            };
            // SAFETY: a request's info, alive until freed at the end.
            let handle = req.map_or(null_mut(), |i| unsafe { (*i).handle });
            // SAFETY: a live passive endpoint; NULL or a request's handle
            // not answered yet; `p` valid for `n` bytes or NULL.
            let r = unsafe { ((*(*self.pep).cm).reject.expect("reject"))(self.pep, handle, p, n) };
            check(r as isize);
            if let (0, Some(i)) = (r, req) {
                // SAFETY: as above. The handle is freed: no more use of it.
                unsafe { (*i).handle = null_mut() };
            }
        }
    }

    unsafe fn register(&mut self) {
        if self.domain.is_null() || self.mrs.len() >= 4 {
            return;
        }
        let len = self.input.len();
        let mut buf = vec![0u8; len.max(1)];
        let p: *const c_void = if self.input.u8() % 8 == 0 {
            null()
        } else {
            buf.as_mut_ptr().cast()
        };
        let access = match self.input.u8() % 3 {
            0 => 0x3f00,
            1 => u64::from(self.input.u32()),
            _ => self.input.u64(),
        };
        let (offset, key, flags) = (
            self.input.num(),
            self.input.num(),
            self.input.num() & 0xffff,
        );
        let mut mr = null_mut();
        let dom: *mut fid = self.domain.cast();
        // SAFETY: a live domain; `p` NULL or valid for `len` bytes and
        // kept alive to the end; `mr` valid.
        let r = unsafe {
            ((*(*self.domain).mr).reg.expect("reg"))(
                dom,
                p,
                len,
                access,
                offset,
                key,
                flags,
                &mut mr,
                null_mut(),
            )
        };
        check(r as isize);
        if r == 0 {
            self.mrs.push(mr);
        }
        self.buffers.push(buf);
    }

    /// Up to 8 iovecs of buffers as long as their lengths, and descriptors
    /// (the registrations' or NULL).
    fn iovs(&mut self) -> (Vec<Vec<u8>>, Vec<iovec>, Vec<*mut c_void>) {
        let n = usize::from(self.input.u8() % 9);
        let mut bufs = Vec::new();
        let mut iov = Vec::new();
        let mut desc = Vec::new();
        for _ in 0..n {
            let mut b = vec![0u8; self.input.len()];
            iov.push(iovec {
                iov_base: if b.is_empty() {
                    null_mut()
                } else {
                    b.as_mut_ptr().cast()
                },
                iov_len: b.len(),
            });
            bufs.push(b);
            let mrs = self.mrs.clone();
            desc.push(match self.pick(&mrs) {
                // SAFETY: a live registration.
                Some(m) if self.input.bool() => unsafe { (*m).mem_desc },
                _ => null_mut(),
            });
        }
        (bufs, iov, desc)
    }

    unsafe fn data(&mut self) {
        let eps = self.eps.clone();
        let Some(ep) = self.pick(&eps) else { return };
        let (bufs, iov, mut desc) = self.iovs();
        // SAFETY: a live endpoint.
        let msg = unsafe { &*(*ep).msg };
        let count = iov.len();
        let data = self.input.u64();
        let which = self.input.u8() % 6;
        // SAFETY: `iov` holds `count` iovecs whose buffers are as long as
        // their lengths; posted receives' buffers are kept to the end.
        let r = unsafe {
            match which {
                0 => (msg.sendv.expect("sendv"))(
                    ep,
                    iov.as_ptr(),
                    desc.as_mut_ptr(),
                    count,
                    0,
                    null_mut(),
                ),
                1 => (msg.recvv.expect("recvv"))(
                    ep,
                    iov.as_ptr(),
                    desc.as_mut_ptr(),
                    count,
                    0,
                    null_mut(),
                ),
                2 => {
                    let m = fi_msg {
                        msg_iov: iov.as_ptr(),
                        desc: desc.as_mut_ptr(),
                        iov_count: count,
                        addr: 0,
                        context: null_mut(),
                        data,
                    };
                    (msg.sendmsg.expect("sendmsg"))(
                        ep,
                        &m,
                        self.input.u64() & 0xffff_ffff_0000_0000,
                    )
                }
                3 => {
                    let (p, n) = iov
                        .first()
                        .map_or((null_mut(), 0), |i| (i.iov_base, i.iov_len));
                    (msg.inject.expect("inject"))(ep, p, n, 0)
                }
                4 => {
                    let (p, n) = iov
                        .first()
                        .map_or((null_mut(), 0), |i| (i.iov_base, i.iov_len));
                    (msg.senddata.expect("senddata"))(ep, p, n, null_mut(), data, 0, null_mut())
                }
                _ => {
                    let (p, n) = iov
                        .first()
                        .map_or((null_mut(), 0), |i| (i.iov_base, i.iov_len));
                    (msg.recv.expect("recv"))(ep, p, n, null_mut(), 0, null_mut())
                }
            }
        };
        check(r);
        // A receive posted keeps its buffers until the endpoint closes.
        self.buffers.extend(bufs);
    }

    unsafe fn rma(&mut self) {
        let eps = self.eps.clone();
        let Some(ep) = self.pick(&eps) else { return };
        // SAFETY: a live endpoint.
        let rma = unsafe { &*(*ep).rma };
        let mut b = vec![0u8; self.input.len()];
        let (addr, key) = (self.input.num(), self.input.num());
        let mrs = self.mrs.clone();
        let key = match self.pick(&mrs) {
            // SAFETY: a live registration.
            Some(m) if self.input.bool() => unsafe { (*m).key },
            _ => key,
        };
        let (p, n) = (b.as_mut_ptr().cast::<c_void>(), b.len());
        // SAFETY: `b` valid for `n` bytes, kept to the end.
        let r = unsafe {
            match self.input.u8() % 3 {
                0 => rma
                    .read
                    .map_or(0, |f| f(ep, p, n, null_mut(), 0, addr, key, null_mut())),
                1 => rma
                    .write
                    .map_or(0, |f| f(ep, p, n, null_mut(), 0, addr, key, null_mut())),
                _ => rma.inject.map_or(0, |f| f(ep, p, n, 0, addr, key)),
            }
        };
        check(r);
        self.buffers.push(b);
    }

    unsafe fn read_cq(&mut self) {
        let cqs = self.cqs.clone();
        let Some(cq) = self.pick(&cqs) else { return };
        if self.input.bool() {
            // SAFETY: zero is a valid error entry to fill.
            let mut e: fi_cq_err_entry = unsafe { zeroed() };
            // SAFETY: a live queue, `e` valid.
            let r = unsafe { ((*(*cq).ops).readerr.expect("readerr"))(cq, &mut e, 0) };
            check(r);
            return;
        }
        let count = usize::from(self.input.u8() % 9);
        // Room for `count` entries of the largest format.
        let mut buf = vec![0u64; count * 8 + 1];
        // SAFETY: a live queue; `buf` holds `count` entries of any format.
        let r = unsafe { ((*(*cq).ops).read.expect("read"))(cq, buf.as_mut_ptr().cast(), count) };
        check(r);
        assert!(r <= count as isize, "{r} completions into {count}");
    }

    /// Close an object (in any order: closing one still in use may be
    /// refused, and it stays).
    unsafe fn close_one(&mut self) {
        let f: *mut fid = match self.input.u8() % 6 {
            0 => self.eps.last().map_or(null_mut(), |e| e.cast()),
            1 => self.mrs.last().map_or(null_mut(), |m| m.cast()),
            2 => self.cqs.last().map_or(null_mut(), |c| c.cast()),
            3 => self.eqs.last().map_or(null_mut(), |e| e.cast()),
            4 => self.pep.cast(),
            _ => self.domain.cast(),
        };
        if f.is_null() {
            return;
        }
        if f == self.pep.cast() {
            self.answer_requests();
        }
        // SAFETY: a live fid of the provider's, forgotten once closed.
        let r = unsafe { close(f) };
        check(r as isize);
        if r == 0 {
            self.forget(f);
        }
    }

    fn forget(&mut self, f: *mut fid) {
        self.eps.retain(|e| e.cast() != f);
        self.mrs.retain(|m| m.cast() != f);
        self.cqs.retain(|c| c.cast() != f);
        self.eqs.retain(|e| e.cast() != f);
        if self.pep.cast() == f {
            self.pep = null_mut();
        }
        if self.domain.cast() == f {
            self.domain = null_mut();
        }
    }

    /// Close what is left, in the order an application does; each close
    /// must succeed.
    pub(super) fn close_all(mut self) {
        self.answer_requests();
        let mut order: Vec<*mut fid> = Vec::new();
        order.extend(self.eps.iter().map(|e| e.cast::<fid>()));
        order.extend(self.mrs.iter().map(|m| m.cast::<fid>()));
        if !self.pep.is_null() {
            order.push(self.pep.cast());
        }
        order.extend(self.cqs.iter().map(|c| c.cast::<fid>()));
        order.extend(self.eqs.iter().map(|e| e.cast::<fid>()));
        if !self.domain.is_null() {
            order.push(self.domain.cast());
        }
        if self.own_fabric {
            order.push(self.fabric.cast());
        }
        for f in order {
            // SAFETY: a live fid of the provider's, closed once.
            let r = unsafe { close(f) };
            assert_eq!(r, 0, "closing in order failed: {r}");
        }
        for i in self.connreqs.drain(..) {
            // SAFETY: a request's info, freed once; its `next` is NULL.
            unsafe { free_info(i) };
        }
        self.buffers.clear();
    }
}
