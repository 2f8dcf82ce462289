//! Sessions: connect, listen, accept, close, and what a session is now
//! (its state and its counters).

use std::ffi::c_char;
use std::net::SocketAddr;

use relink_rs::{ListenerHandle, Path, SessionHandle, State};

use crate::node::{node_mut, relink_node};
use crate::options::{options_ref, relink_options, RELINK_MAX_CONNECT_DATA};
use crate::status::*;

/// A session of a node: a number the node never reuses (also after the
/// session ended and was reaped).
pub type relink_session = u64;

/// A listener of a node: a number the node never reuses.
pub type relink_listener = u64;

/// A session's state.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_state {
    /// Created, not yet connecting.
    RELINK_STATE_IDLE = 0,
    /// First connection under way.
    RELINK_STATE_CONNECTING = 1,
    /// Connected; operations flow.
    RELINK_STATE_ESTABLISHED = 2,
    /// The transport is down; waiting for a device and the backoff.
    RELINK_STATE_RECOVERING = 3,
    /// A reconnection attempt is under way.
    RELINK_STATE_RECONNECTING = 4,
    /// Reconnected; re-advertising buffers and replaying.
    RELINK_STATE_RESYNCING = 5,
    /// Ended: gave up, the peer lost its state, or refused for good.
    RELINK_STATE_FAILED = 6,
    /// Ended: closed by the application or an administrator.
    RELINK_STATE_CLOSED = 7,
    /// Suspended (`relink_suspend`) until the initiator resumes it.
    RELINK_STATE_SUSPENDED = 8,
    /// A state this header does not know (a newer librelink).
    RELINK_STATE_OTHER = 99,
}

impl From<State> for relink_state {
    fn from(s: State) -> relink_state {
        #[allow(unreachable_patterns)]
        match s {
            State::Idle => relink_state::RELINK_STATE_IDLE,
            State::Connecting => relink_state::RELINK_STATE_CONNECTING,
            State::Established => relink_state::RELINK_STATE_ESTABLISHED,
            State::Recovering => relink_state::RELINK_STATE_RECOVERING,
            State::Reconnecting => relink_state::RELINK_STATE_RECONNECTING,
            State::Resyncing => relink_state::RELINK_STATE_RESYNCING,
            State::Failed => relink_state::RELINK_STATE_FAILED,
            State::Closed => relink_state::RELINK_STATE_CLOSED,
            State::Suspended => relink_state::RELINK_STATE_SUSPENDED,
            _ => relink_state::RELINK_STATE_OTHER,
        }
    }
}

fn addr(s: &str, name: &str) -> Result<SocketAddr, Fail> {
    s.parse().map_err(|_| {
        Fail::arg(format!(
            "`{name}` {s:?} is not an address with a port (10.0.0.2:7471)"
        ))
    })
}

/// Connect a session to `peer` (`"10.0.0.2:7471"`), from `local` (the
/// IP address of a local device, no port, or NULL: any device that reaches the peer),
/// with `options` (NULL: the defaults; copied). Store the session in
/// `*session`. The first attempt starts at once; operations may be
/// submitted right away (they go out once the session is up). A peer that
/// cannot be reached yet is retried by the policy until its give-up
/// deadline; its progress shows in `relink_poll_event`.
///
/// # Safety
/// `node` is a live node; `peer` a NUL-terminated string; `local` NULL or
/// one; `options` NULL or live options; `session` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_connect(
    node: *mut relink_node,
    peer: *const c_char,
    local: *const c_char,
    options: *const relink_options,
    session: *mut relink_session,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (n, peer, local) = unsafe {
            (
                node_mut(node)?,
                c_str(peer, "peer")?,
                opt_c_str(local, "local")?,
            )
        };
        let path = Path {
            local: local
                .map(|l| {
                    l.parse::<std::net::IpAddr>().map_err(|_| {
                        Fail::arg(format!("`local` {l:?} is not an IP address (10.0.0.1)"))
                    })
                })
                .transpose()?,
            peer: addr(peer, "peer")?,
        };
        let opts = if options.is_null() {
            Default::default()
        } else {
            // SAFETY: the caller's contract.
            unsafe { options_ref(options)? }.opts.clone()
        };
        non_null(session, "session")?;
        let s = n.node.connect(vec![path], opts)?;
        // SAFETY: the caller's contract.
        unsafe { put(session, "session", s.0) }?;
        Ok(RELINK_OK)
    })
}

/// Listen on `addr` (a local device's address with a port, or
/// `"0.0.0.0:PORT"`) with `options` (NULL: the defaults; copied) for the
/// sessions it accepts. Store the listener in `*listener`. Sessions that
/// connect are taken with `relink_accept`.
///
/// # Safety
/// `node` is a live node; `addr` a NUL-terminated string; `options` NULL or
/// live options; `listener` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_listen(
    node: *mut relink_node,
    addr: *const c_char,
    options: *const relink_options,
    listener: *mut relink_listener,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract, for each argument.
        let (n, a) = unsafe { (node_mut(node)?, c_str(addr, "addr")?) };
        let a = self::addr(a, "addr")?;
        let opts = if options.is_null() {
            Default::default()
        } else {
            // SAFETY: the caller's contract.
            unsafe { options_ref(options)? }.opts.clone()
        };
        non_null(listener, "listener")?;
        let l = n.node.listen(a, opts)?;
        // SAFETY: the caller's contract.
        unsafe { put(listener, "listener", l.0) }?;
        Ok(RELINK_OK)
    })
}

/// Stop a listener; the sessions it accepted go on. An unknown listener is
/// ignored.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_close_listener(
    node: *mut relink_node,
    listener: relink_listener,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        n.node.close_listener(ListenerHandle(listener));
        Ok(RELINK_OK)
    })
}

/// Whether a listener listens now (`*active` = 1), or waits for a device
/// that owns its address (0); `RELINK_ERR_ARGUMENT` for an unknown
/// listener.
///
/// # Safety
/// `node` is a live node; `active` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_listener_active(
    node: *mut relink_node,
    listener: relink_listener,
    active: *mut i32,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let a = n
            .node
            .listener_active(ListenerHandle(listener))
            .ok_or_else(|| Fail::arg(format!("no listener {listener}")))?;
        // SAFETY: the caller's contract.
        unsafe { put(active, "active", i32::from(a)) }?;
        Ok(RELINK_OK)
    })
}

/// A session a listener accepted.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct relink_accepted {
    /// The new session.
    pub session: relink_session,
    /// The listener it came to.
    pub listener: relink_listener,
    /// The initiator's address, `"ip:port"`, NUL-terminated.
    pub peer: [c_char; 64],
    /// The local address it was sent to, `"ip:port"`, NUL-terminated.
    pub local: [c_char; 64],
    /// The initiator application's connect data
    /// (`relink_options_set_connect_data`): its first `connect_data_len`
    /// bytes.
    pub connect_data: [u8; RELINK_MAX_CONNECT_DATA],
    /// How many bytes of `connect_data` there are.
    pub connect_data_len: usize,
}

/// `text`, NUL-terminated and cut to fit, in a C string field.
pub(crate) fn c_text<const N: usize>(text: &str) -> [c_char; N] {
    let mut out = [0 as c_char; N];
    let bytes = text.as_bytes();
    let n = bytes.len().min(N - 1);
    for (d, s) in out.iter_mut().zip(&bytes[..n]) {
        *d = *s as c_char;
    }
    out
}

impl From<&relink_rs::Accepted> for relink_accepted {
    fn from(a: &relink_rs::Accepted) -> relink_accepted {
        let mut data = [0u8; RELINK_MAX_CONNECT_DATA];
        let n = a.connect_data.len().min(RELINK_MAX_CONNECT_DATA);
        data[..n].copy_from_slice(&a.connect_data[..n]);
        relink_accepted {
            session: a.session.0,
            listener: a.listener.0,
            peer: c_text(&a.peer.to_string()),
            local: c_text(&a.local.to_string()),
            connect_data: data,
            connect_data_len: n,
        }
    }
}

/// Take the oldest session a listener accepted: `RELINK_OK` and `*out`
/// filled, or `RELINK_EMPTY` when none waits.
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_accept(
    node: *mut relink_node,
    out: *mut relink_accepted,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        non_null(out, "out")?;
        match n.node.accept() {
            None => Ok(RELINK_EMPTY),
            Some(s) => {
                // SAFETY: the caller's contract.
                unsafe { put(out, "out", relink_accepted::from(&s)) }?;
                Ok(RELINK_OK)
            }
        }
    })
}

/// Close a session: recovery stops, pending operations complete with
/// `RELINK_OP_DISCONNECTED`, an established session says goodbye (its peer
/// closes its half instead of recovering). Its last output stays to be
/// taken; the session is reaped once it is. Requests already on the send
/// queue may still reach the application's memory until the transport is
/// destroyed, so the session's completions (which hand that memory back)
/// and events come only then: a poll round after the goodbye left, or the
/// goodbye bound.
///
/// # Safety
/// `node` is a live node.
#[no_mangle]
pub unsafe extern "C" fn relink_close(
    node: *mut relink_node,
    session: relink_session,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        n.node.close(SessionHandle(session))?;
        Ok(RELINK_OK)
    })
}

/// A session's state in `*state`; `RELINK_ERR_NO_SESSION` if there is no
/// such session (never made, or ended and reaped).
///
/// # Safety
/// `node` is a live node; `state` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_session_state(
    node: *mut relink_node,
    session: relink_session,
    state: *mut relink_state,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let s = n
            .node
            .state(SessionHandle(session))
            .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?;
        // SAFETY: the caller's contract.
        unsafe { put(state, "state", s.into()) }?;
        Ok(RELINK_OK)
    })
}

/// A session's counters: the first eight relink kept. Its members are
/// fixed — `relink_session_counters` writes the whole struct, so its size
/// is the ABI — and every counter added since (`relink_counter`, from
/// `RELINK_COUNTER_ADVERTS_SENT` on: the copied bytes
/// `RELINK_COUNTER_SEND_COPIED_BYTES` and
/// `RELINK_COUNTER_RECEIVE_COPIED_BYTES` among them) is reached by number
/// with `relink_session_counter`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct relink_counters {
    /// Transport losses.
    pub losses: u64,
    /// Connection attempts, the first connect's included.
    pub attempts: u64,
    /// Outages that ended with the session established again.
    pub resumes: u64,
    /// Operations posted again after a loss, over every resume.
    pub replayed: u64,
    /// Duplicate messages the receiver dropped.
    pub deduplicated: u64,
    /// Total time without a transport, in nanoseconds.
    pub downtime_ns: u64,
    /// Messages delivered to the application.
    pub delivered: u64,
    /// Planned outages taken (drains, suspends): not losses.
    pub planned: u64,
}

/// A session's counters in `*out`; `RELINK_ERR_NO_SESSION` if there is no
/// such session. The struct's set is fixed (its layout is the ABI);
/// [`relink_session_counter`] reaches every counter by number.
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_session_counters(
    node: *mut relink_node,
    session: relink_session,
    out: *mut relink_counters,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let c = n
            .node
            .counters(SessionHandle(session))
            .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?;
        let v = relink_counters {
            losses: c.losses,
            attempts: c.attempts,
            resumes: c.resumes,
            replayed: c.replayed,
            deduplicated: c.deduplicated,
            downtime_ns: c.downtime_ns,
            delivered: c.delivered,
            planned: c.planned,
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", v) }?;
        Ok(RELINK_OK)
    })
}

/// One of a session's counters, for [`relink_session_counter`]: every
/// counter the library keeps, the ones of `relink_counters` and those
/// added since (new ones take new numbers; a number keeps its meaning).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum relink_counter {
    /// Transport losses.
    RELINK_COUNTER_LOSSES = 0,
    /// Connection attempts, the first connect's included (an initiator's;
    /// a target's stays 0).
    RELINK_COUNTER_ATTEMPTS = 1,
    /// Outages that ended with the session established again.
    RELINK_COUNTER_RESUMES = 2,
    /// Operations posted again after a loss, over every resume.
    RELINK_COUNTER_REPLAYED = 3,
    /// Duplicate messages the receiver dropped.
    RELINK_COUNTER_DEDUPLICATED = 4,
    /// Total time without a transport, in nanoseconds.
    RELINK_COUNTER_DOWNTIME_NS = 5,
    /// Messages delivered to the application.
    RELINK_COUNTER_DELIVERED = 6,
    /// Planned outages taken (drains, suspends): not losses.
    RELINK_COUNTER_PLANNED = 7,
    /// Region advertisements sent (each region, once per connection).
    RELINK_COUNTER_ADVERTS_SENT = 8,
    /// Messages received behind another in one SEND (a frame: messages
    /// queued together share a SEND while the receive slot has room).
    RELINK_COUNTER_PACKED = 9,
    /// Operations completed (each once, whatever its outcome).
    RELINK_COUNTER_COMPLETED = 10,
    /// Standby connections established (`relink_options_set_standby`).
    RELINK_COUNTER_STANDBYS = 11,
    /// Losses that switched to the standby, with no connection attempt
    /// (each also counted in the losses and resumes).
    RELINK_COUNTER_FAILOVERS = 12,
    /// Standbys torn down because no keepalive was heard on them for two
    /// keepalive periods.
    RELINK_COUNTER_STANDBYS_SILENT = 13,
    /// Keepalives (probes and replies) sent on standby connections.
    RELINK_COUNTER_STANDBY_KEEPALIVES_SENT = 14,
    /// Keepalives (probes and replies) received on standby connections.
    RELINK_COUNTER_STANDBY_KEEPALIVES_RECEIVED = 15,
    /// Bytes of the application's message payloads relink copied to send
    /// them, replays included: a message of bytes (`relink_send`,
    /// `relink_post` without a flag) is copied when it is submitted and
    /// again into a send slot when it is posted. A message from
    /// registered memory (`RELINK_WR_FROM_REGION`, `RELINK_WR_SGL`) adds
    /// nothing: the SEND reads its bytes where they are.
    RELINK_COUNTER_SEND_COPIED_BYTES = 16,
    /// Bytes of message payloads relink copied to deliver them: from a
    /// receive slot into a delivery, once per message delivered.
    RELINK_COUNTER_RECEIVE_COPIED_BYTES = 17,
    /// Messages this side read from the peer's memory straight into a
    /// posted receive (`relink_options_set_rendezvous`): no byte copied.
    RELINK_COUNTER_FETCHED = 18,
    /// Such reads given up with their connection (each read again after
    /// the resume).
    RELINK_COUNTER_FETCHES_REWOUND = 19,
}

/// Counter `which` (a `relink_counter`) of a session in `*out`:
/// `RELINK_ERR_ARGUMENT` for a number that is no `relink_counter`,
/// `RELINK_ERR_NO_SESSION` if there is no such session. Unlike
/// `relink_session_counters`, whose struct is fixed, it reaches every
/// counter, those added later included, without a change of layout.
///
/// # Safety
/// `node` is a live node; `out` valid for a write.
#[no_mangle]
pub unsafe extern "C" fn relink_session_counter(
    node: *mut relink_node,
    session: relink_session,
    which: i32,
    out: *mut u64,
) -> relink_status {
    guard(|| {
        // SAFETY: the caller's contract.
        let n = unsafe { node_mut(node)? };
        let c = n
            .node
            .counters(SessionHandle(session))
            .ok_or_else(|| Fail::new(RELINK_ERR_NO_SESSION, format!("no session {session}")))?;
        let v = match which {
            0 => c.losses,
            1 => c.attempts,
            2 => c.resumes,
            3 => c.replayed,
            4 => c.deduplicated,
            5 => c.downtime_ns,
            6 => c.delivered,
            7 => c.planned,
            8 => c.adverts_sent,
            9 => c.packed,
            10 => c.completed,
            11 => c.standbys,
            12 => c.failovers,
            13 => c.standbys_silent,
            14 => c.standby_keepalives_sent,
            15 => c.standby_keepalives_received,
            16 => c.send_copied_bytes,
            17 => c.receive_copied_bytes,
            18 => c.fetched,
            19 => c.fetches_rewound,
            _ => return Err(Fail::arg(format!("`which` {which} is no relink_counter"))),
        };
        // SAFETY: the caller's contract.
        unsafe { put(out, "out", v) }?;
        Ok(RELINK_OK)
    })
}
