//! The input as the driver reads it, and the hints of `getinfo` made
//! from it.

use std::ffi::{c_int, CString};
use std::mem::{size_of, zeroed};
use std::ptr::null_mut;

use super::ptr;
use crate::ffi::sys::*;

/// The input, read from the front; reads past its end give zeros.
pub(super) struct Input<'a> {
    pub(super) data: &'a [u8],
}

impl Input<'_> {
    pub(super) fn u8(&mut self) -> u8 {
        match self.data.split_first() {
            Some((b, rest)) => {
                self.data = rest;
                *b
            }
            None => 0,
        }
    }

    pub(super) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(super) fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    pub(super) fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }

    /// A number that is often at an edge.
    pub(super) fn num(&mut self) -> u64 {
        const EDGES: [u64; 12] = [
            0,
            1,
            16,
            32,
            33,
            4096,
            65536,
            1 << 30,
            u32::MAX as u64,
            u64::MAX,
            usize::MAX as u64 / 2 + 1,
            (1 << 30) + 1,
        ];
        match self.u8() % 4 {
            0 => EDGES[usize::from(self.u8()) % EDGES.len()],
            1 => u64::from(self.u8()),
            2 => u64::from(self.u32() % 8192),
            _ => self.u64(),
        }
    }

    /// A length for a buffer the driver makes: up to 4 KiB.
    pub(super) fn len(&mut self) -> usize {
        match self.u8() % 4 {
            0 => 0,
            1 => usize::from(self.u8()),
            2 => usize::from(self.u8() % 64),
            _ => (self.u32() % 4097) as usize,
        }
    }

    /// NULL, one of `fixed`, or bytes of the input.
    pub(super) fn string(&mut self, fixed: &[&str]) -> Option<CString> {
        let k = usize::from(self.u8()) % (fixed.len() + 2);
        if k < fixed.len() {
            CString::new(fixed[k]).ok()
        } else if k == fixed.len() {
            None
        } else {
            let n = usize::from(self.u8() % 24);
            let v: Vec<u8> = (0..n).map(|_| self.u8()).filter(|&b| b != 0).collect();
            CString::new(v).ok()
        }
    }

    /// An address of `len` bytes: a sockaddr_in (of any family, port and
    /// address) cut or padded to `len`.
    pub(super) fn addr(&mut self) -> Vec<u8> {
        let len = match self.u8() % 4 {
            0 => size_of::<libc::sockaddr_in>(),
            1 => 0,
            2 => size_of::<libc::sockaddr_in6>(),
            _ => usize::from(self.u8() % 64),
        };
        let family = match self.u8() % 4 {
            0 | 1 => libc::AF_INET as u16,
            2 => libc::AF_INET6 as u16,
            _ => u16::from(self.u8()),
        };
        let port = match self.u8() % 2 {
            0 => 0,
            _ => u16::from(self.u8()) << 8 | u16::from(self.u8()),
        };
        let ip = match self.u8() % 3 {
            0 => [127, 0, 0, 1],
            1 => [0, 0, 0, 0],
            _ => [self.u8(), self.u8(), self.u8(), self.u8()],
        };
        let mut v = Vec::with_capacity(len.max(16));
        v.extend(family.to_ne_bytes());
        v.extend(port.to_be_bytes());
        v.extend(ip);
        v.resize(len.max(8), 0);
        v.truncate(len);
        v
    }
}

/// Hints and everything their pointers reach, kept alive for the call.
pub(super) struct Hints {
    info: Box<fi_info>,
    tx: Box<fi_tx_attr>,
    rx: Box<fi_rx_attr>,
    ep: Box<fi_ep_attr>,
    dom: Box<fi_domain_attr>,
    fab: Box<fi_fabric_attr>,
    src: Vec<u8>,
    dest: Vec<u8>,
    names: Vec<Option<CString>>,
}

impl Hints {
    pub(super) fn build(input: &mut Input<'_>) -> Option<Hints> {
        if input.u8() % 8 == 0 {
            return None;
        }
        // SAFETY: plain C structures of integers and pointers: all zero is
        // libfabric's "unspecified".
        let mut h = unsafe {
            Hints {
                info: Box::new(zeroed()),
                tx: Box::new(zeroed()),
                rx: Box::new(zeroed()),
                ep: Box::new(zeroed()),
                dom: Box::new(zeroed()),
                fab: Box::new(zeroed()),
                src: Vec::new(),
                dest: Vec::new(),
                names: Vec::new(),
            }
        };
        let small = |i: &mut Input<'_>| match i.u8() % 3 {
            0 => 0,
            1 => i.u64(),
            _ => 1u64 << (i.u8() % 64),
        };
        h.info.caps = small(input);
        h.info.mode = small(input);
        h.info.addr_format = match input.u8() % 3 {
            0 => 0,
            1 => FI_SOCKADDR_IN,
            _ => input.u32(),
        };
        if input.bool() {
            h.src = input.addr();
        }
        if input.bool() {
            h.dest = input.addr();
        }
        let sel = input.u8();
        if sel & 1 != 0 {
            h.tx.caps = small(input);
            h.tx.mode = small(input);
            h.tx.op_flags = small(input);
            h.tx.msg_order = small(input);
            h.tx.inject_size = input.num() as usize;
            h.tx.size = input.num() as usize;
            h.tx.iov_limit = input.num() as usize;
            h.tx.rma_iov_limit = input.num() as usize;
        }
        if sel & 2 != 0 {
            h.rx.caps = small(input);
            h.rx.mode = small(input);
            h.rx.op_flags = small(input);
            h.rx.msg_order = small(input);
            h.rx.total_buffered_recv = input.num() as usize;
            h.rx.size = input.num() as usize;
            h.rx.iov_limit = input.num() as usize;
        }
        if sel & 4 != 0 {
            h.ep.type_ = match input.u8() % 3 {
                0 => FI_EP_MSG,
                1 => 0,
                _ => input.u32(),
            };
            h.ep.protocol = input.u32() % 40;
            h.ep.protocol_version = input.u32();
            h.ep.max_msg_size = input.num() as usize;
            h.ep.msg_prefix_size = input.num() as usize;
            h.ep.mem_tag_format = small(input);
            h.ep.tx_ctx_cnt = input.num() as usize;
            h.ep.rx_ctx_cnt = input.num() as usize;
        }
        if sel & 8 != 0 {
            let name = input.string(&["soft0", "relink", ""]);
            h.dom.name = ptr(&name).cast_mut();
            h.names.push(name);
            h.dom.threading = input.u32() % 8;
            h.dom.control_progress = input.u32() % 4;
            h.dom.data_progress = input.u32() % 4;
            h.dom.resource_mgmt = input.u32() % 4;
            h.dom.av_type = input.u32() % 4;
            h.dom.mr_mode = match input.u8() % 3 {
                0 => 0,
                1 => -1,
                _ => input.u32() as c_int,
            };
            h.dom.mr_key_size = input.num() as usize;
            h.dom.cq_data_size = input.num() as usize;
            h.dom.ep_cnt = input.num() as usize;
            h.dom.mr_iov_limit = input.num() as usize;
            h.dom.caps = small(input);
            h.dom.mode = small(input);
        }
        if sel & 16 != 0 {
            let name = input.string(&["relink", "soft", ""]);
            h.fab.name = ptr(&name).cast_mut();
            h.names.push(name);
            let prov = input.string(&["relink", "relink;ofi_rxm", "verbs"]);
            h.fab.prov_name = ptr(&prov).cast_mut();
            h.names.push(prov);
            h.fab.prov_version = input.u32();
            h.fab.api_version = input.u32();
        }
        h.info.src_addrlen = h.src.len();
        h.info.dest_addrlen = h.dest.len();
        Some(h)
    }

    /// The hints, their pointers set (the boxes and vectors do not move).
    pub(super) fn ptr(&mut self) -> *mut fi_info {
        let i = &mut *self.info;
        i.src_addr = if self.src.is_empty() {
            null_mut()
        } else {
            self.src.as_mut_ptr().cast()
        };
        i.dest_addr = if self.dest.is_empty() {
            null_mut()
        } else {
            self.dest.as_mut_ptr().cast()
        };
        i.tx_attr = &mut *self.tx;
        i.rx_attr = &mut *self.rx;
        i.ep_attr = &mut *self.ep;
        i.domain_attr = &mut *self.dom;
        i.fabric_attr = &mut *self.fab;
        &mut *self.info
    }
}
