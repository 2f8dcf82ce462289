//! Packets in, events out: [`HostState::receive`] hands each arriving packet
//! to address resolution, the CM, the responder or the requester; events
//! queue until the transport polls them.

use relink_fabric::{CmEventKind, Event, ObjectCounts, PortState};

use super::{CmState, HostState};
use crate::outbox::{Outbox, Outgoing};
use crate::packet::{Body, Packet};

impl HostState {
    /// A packet arrived for one of this host's addresses.
    pub fn receive(&mut self, pkt: Packet, out: &mut Outbox) {
        let Some(dev) = self.device_owning(pkt.dst) else {
            return;
        };
        if dev.port_state != PortState::Active {
            return;
        }
        match pkt.body {
            Body::ArpRequest { cookie } => out.packets.push(Outgoing {
                conn: 0,
                packet: Packet {
                    src: pkt.dst,
                    dst: pkt.src,
                    body: Body::ArpReply { cookie },
                },
            }),
            Body::ArpReply { cookie } => self.on_arp_reply(cookie),
            Body::Cm(msg) => self.on_cm(pkt.src, pkt.dst, msg, out),
            Body::Request {
                dst_qpn,
                src_qpn,
                psn,
                op,
            } => {
                self.on_request(pkt.src, src_qpn, dst_qpn, psn, &op, out);
                // Executed (or dropped): the payload's buffer can serve this
                // host's next request, unless the requester still shares it
                // (in-process; it recycles the buffer when it retires the
                // request).
                self.recycle_req(op);
            }
            Body::Response {
                dst_qpn,
                src_qpn,
                psn,
                kind,
            } => self.on_response(pkt.src, src_qpn, dst_qpn, psn, kind, out),
        }
    }

    /// Address resolution answered for id `cookie`.
    pub fn on_arp_reply(&mut self, cookie: u64) {
        let Some(cm) = self.cm_ids.get_mut(&cookie) else {
            return;
        };
        if cm.state != CmState::ResolvingAddr {
            return;
        }
        cm.state = CmState::AddrResolved;
        cm.timer_gen += 1;
        self.cm_event(cookie, CmEventKind::AddrResolved);
    }

    /// The oldest queued event (device, async or CM), if any; `None`
    /// clears the readiness fd ([`take_drained`](Self::take_drained)).
    pub fn poll_event(&mut self) -> Option<Event> {
        let ev = self.events.pop_front();
        if ev.is_none() {
            self.drained = true;
        }
        ev
    }

    /// How many objects of each kind exist on the host (all devices).
    pub fn object_counts(&self) -> ObjectCounts {
        ObjectCounts {
            contexts: self.ctxs.len(),
            pds: self.pds.len(),
            cqs: self.cqs.len(),
            srqs: self.srqs.len(),
            mrs: self.mrs.len(),
            mws: self.mws.len(),
            qps: self.qps.len(),
            cm_ids: self.cm_ids.len(),
        }
    }
}
