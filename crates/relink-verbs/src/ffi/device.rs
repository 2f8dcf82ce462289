//! The kernel's device list and verbs contexts: opening, querying and
//! closing a context, and its async events.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::fd::{BorrowedFd, RawFd};
use std::os::raw::c_int;
use std::ptr::NonNull;
use std::sync::Arc;

use relink_verbs_sys as sys;

use super::{last_errno, Raw};

/// The list `ibv_get_device_list` returns, freed when dropped.
pub(crate) struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
}

impl DeviceList {
    /// The devices the kernel lists now; the errno if there is no list.
    pub(crate) fn get() -> Result<DeviceList, i32> {
        let mut n: c_int = 0;
        // SAFETY: no preconditions; `n` is a live int to fill. The list is
        // freed once, by `Drop`.
        let list = unsafe { sys::ibv_get_device_list(&mut n) };
        match NonNull::new(list) {
            Some(list) => Ok(DeviceList {
                list,
                len: usize::try_from(n).unwrap_or(0),
            }),
            None => Err(last_errno()),
        }
    }

    /// The devices of the list, in order (up to its first null entry).
    pub(crate) fn iter(&self) -> impl Iterator<Item = Device<'_>> + '_ {
        (0..self.len)
            .map(|i| {
                // SAFETY: the list holds `len` device pointers (and a null
                // after them), alive until the list is freed, which the
                // borrow of `self` prevents meanwhile.
                unsafe { *self.list.as_ptr().add(i) }
            })
            .map_while(NonNull::new)
            .map(|raw| Device {
                raw,
                _list: PhantomData,
            })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list and is freed once;
        // no `Device` borrowed from it outlives this (their lifetime).
        // A context opened from one of its entries holds its own reference
        // to the device.
        unsafe { sys::ibv_free_device_list(self.list.as_ptr()) };
    }
}

/// A device: an entry of a live [`DeviceList`], or the device of a live
/// context (a CM id's); valid for `'a`.
#[derive(Clone, Copy)]
pub(crate) struct Device<'a> {
    raw: NonNull<sys::ibv_device>,
    _list: PhantomData<&'a ()>,
}

/// A fixed-size, NUL-terminated C string field as a string.
fn c_array_str(a: &[std::os::raw::c_char]) -> String {
    let bytes: Vec<u8> = a
        .iter()
        .take_while(|c| **c != 0)
        .map(|c| *c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl<'a> Device<'a> {
    /// The device of a context that lives for `'a`; `None` for null.
    ///
    /// # Safety
    /// `ctx` is null or a context that stays open for `'a`.
    pub(super) unsafe fn of_context(ctx: *mut sys::ibv_context) -> Option<Device<'a>> {
        if ctx.is_null() {
            return None;
        }
        // SAFETY: the caller guarantees a live context; its `device` field
        // names its device, which lives as long as the context.
        let dev = unsafe { (*ctx).device };
        NonNull::new(dev).map(|raw| Device {
            raw,
            _list: PhantomData,
        })
    }

    /// The device's name (`rxe0`).
    pub(crate) fn name(&self) -> String {
        // SAFETY: a live device (this type's invariant); the name is a
        // NUL-terminated string inside it.
        unsafe { CStr::from_ptr(sys::ibv_get_device_name(self.raw.as_ptr())) }
            .to_string_lossy()
            .into_owned()
    }

    /// The kernel's index of the device (negative if unknown).
    pub(crate) fn kernel_index(&self) -> i32 {
        // SAFETY: a live device.
        unsafe { sys::ibv_get_device_index(self.raw.as_ptr()) }
    }

    /// The device's GUID, in network byte order as rdma-core returns it.
    pub(crate) fn guid_be(&self) -> u64 {
        // SAFETY: a live device.
        unsafe { sys::ibv_get_device_guid(self.raw.as_ptr()) }
    }

    /// The uverbs node's name (`uverbs0`) and the device's sysfs path.
    pub(crate) fn dev_name_and_path(&self) -> (String, String) {
        // SAFETY: a live device; the fields are plain arrays inside it.
        let d = unsafe { &*self.raw.as_ptr() };
        (c_array_str(&d.dev_name), c_array_str(&d.ibdev_path))
    }

    /// Open a verbs context on the device; the errno on failure.
    pub(crate) fn open(&self) -> Result<Context, i32> {
        // SAFETY: a live device; the context holds its own reference to it
        // and is closed once, by `Context::close` (or leaked).
        let raw =
            Raw::new(unsafe { sys::ibv_open_device(self.raw.as_ptr()) }).ok_or_else(last_errno)?;
        Ok(Context {
            node: Arc::new(CtxNode { raw }),
        })
    }
}

/// The context itself, held by its [`Context`] and by every object on it
/// (rule 2).
pub(super) struct CtxNode {
    pub(super) raw: Raw<sys::ibv_context>,
}

/// A verbs context of the provider's own (`ibv_open_device`).
pub(crate) struct Context {
    pub(super) node: Arc<CtxNode>,
}

/// An async event, read and acknowledged: its type and the address of the
/// object it names (a QP, CQ or SRQ; the port number's bits for port
/// events), never dereferenced.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AsyncEventInfo {
    /// `IBV_EVENT_*`.
    pub(crate) event_type: u32,
    /// The element's address (compare with the handles' `key`).
    pub(crate) element: usize,
}

impl Context {
    /// The device attributes (`ibv_query_device`); the errno on failure.
    pub(crate) fn query_device(&self) -> Result<sys::ibv_device_attr, i32> {
        let mut attr = sys::ibv_device_attr::default();
        // SAFETY: a live context (rule 1) and a plain struct to fill.
        let rc = unsafe { sys::ibv_query_device(self.node.raw.get(), &mut attr) };
        if rc != 0 {
            return Err(rc);
        }
        Ok(attr)
    }

    /// A port's attributes; the errno on failure.
    pub(crate) fn query_port(&self, port: u8) -> Result<sys::ibv_port_attr, i32> {
        let mut attr = sys::ibv_port_attr::default();
        // SAFETY: a live context and a plain struct to fill (the inline
        // wrapper, not the compat symbol).
        let rc = unsafe { sys::___ibv_query_port(self.node.raw.get(), port, &mut attr) };
        if rc != 0 {
            return Err(rc);
        }
        Ok(attr)
    }

    /// The context's async-event fd (rdma-core's, open while the context
    /// is).
    pub(crate) fn async_fd(&self) -> RawFd {
        // SAFETY: a live context; the fd is a plain field.
        unsafe { (*self.node.raw.get()).async_fd }
    }

    /// The async-event fd, borrowed for as long as the context.
    pub(crate) fn async_fd_borrowed(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is the context's, open until it is closed, which
        // the borrow of `self` prevents meanwhile (rule 1).
        unsafe { BorrowedFd::borrow_raw(self.async_fd()) }
    }

    /// Read one async event and acknowledge it at once; `None` if there is
    /// none (the fd is nonblocking) or the read failed.
    pub(crate) fn get_async_event(&self) -> Option<AsyncEventInfo> {
        let mut ev = sys::ibv_async_event::default();
        // SAFETY: a live context and a struct to fill.
        if unsafe { sys::ibv_get_async_event(self.node.raw.get(), &mut ev) } != 0 {
            return None;
        }
        // SAFETY: reading the pointer member of the element union: every
        // member shares its bits, and the union was zeroed before the call
        // (a port number fills only part of it). The address is only
        // compared, never dereferenced.
        let element = unsafe { ev.element.qp } as usize;
        let info = AsyncEventInfo {
            event_type: ev.event_type,
            element,
        };
        // SAFETY: the event came from ibv_get_async_event and is acked once,
        // here (rule 4); its element is not used afterwards.
        unsafe { sys::ibv_ack_async_event(&mut ev) };
        Some(info)
    }

    /// Allocate a protection domain; the errno on failure.
    pub(crate) fn alloc_pd(&self) -> Result<super::Pd, i32> {
        super::pd::alloc_pd(self)
    }

    /// Create the context's completion channel; the errno on failure.
    pub(crate) fn create_comp_channel(&self) -> Result<super::CompChannel, i32> {
        super::cq::create_comp_channel(self)
    }

    /// Close the context: once nothing on it holds it (rule 2; otherwise
    /// `EBUSY` and nothing is called); the errno if `ibv_close_device`
    /// failed (the context is gone either way).
    pub(crate) fn close(self) -> Result<(), i32> {
        let node = match Arc::try_unwrap(self.node) {
            Ok(node) => node,
            Err(_still_held) => return Err(crate::errno::codes::EBUSY),
        };
        // SAFETY: no object on the context is left (rule 2: none holds the
        // node); the context is closed once, as `self` is consumed.
        let rc = unsafe { sys::ibv_close_device(node.raw.get()) };
        if rc != 0 {
            return Err(last_errno());
        }
        Ok(())
    }
}
