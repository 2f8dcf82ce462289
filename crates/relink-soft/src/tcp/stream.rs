//! A stream's two threads: the writer, which batches the frames queued for
//! the connection into one system call, and the reader, which cuts the
//! byte stream into frames and hands each packet to the host (and, between
//! processes of one host, takes part in [`crate::direct`]'s loans).

use super::*;

impl Shared {
    /// Write queued frames in order; everything queued at the moment goes
    /// out in one system call (small messages would otherwise cost a
    /// syscall each).
    ///
    /// The first frame is this end's `Hello` if it lends payloads
    /// ([`crate::direct`]).
    pub(super) fn write_loop(&self, mut stream: TcpStream, rx: Receiver<Frame>, d: &Direct) {
        const BATCH: usize = 256 * 1024;
        let mut batch: Vec<u8> = Vec::with_capacity(BATCH);
        if let Some(h) = d.hello() {
            wire::encode_link(&Link::Hello(h), &mut batch);
        }
        // Encode one frame; true for `Close`.
        let put = |f: Frame, batch: &mut Vec<u8>| -> bool {
            match f {
                Frame::Packet(p) => match p.payload().and_then(|data| d.lend(data)) {
                    Some(r) => wire::encode_remote(&p, r, batch),
                    None => wire::encode(&p, batch),
                },
                Frame::Link(l) => wire::encode_link(&l, batch),
                Frame::Close => return true,
            }
            false
        };
        'outer: while let Ok(f) = rx.recv() {
            let mut close = put(f, &mut batch);
            while !close && batch.len() < BATCH {
                match rx.try_recv() {
                    Ok(f) => close = put(f, &mut batch),
                    Err(_) => break,
                }
            }
            if !batch.is_empty() && stream.write_all(&batch).is_err() {
                break 'outer;
            }
            batch.clear();
            if close {
                break;
            }
        }
        let _ = stream.flush();
        let _ = stream.shutdown(Shutdown::Both);
    }

    /// Read frames until the stream ends. `conn` is known for streams we
    /// opened; an accepted stream learns it from its first frame (a REQ).
    ///
    /// Payloads are decoded into buffers of the stream's own pool: the
    /// reader keeps a handle on each while the host handles the packet, and
    /// recycles the buffer once the host is done with it.
    ///
    /// `d` is this end's same-host state, shared with its writer: a
    /// `Hello` from the peer is checked here (and answered `DirectOk`),
    /// payloads the peer lent are read from its memory and released.
    pub(super) fn read_loop(
        self: Arc<Self>,
        mut stream: TcpStream,
        mut conn: Option<u64>,
        d: Arc<Direct>,
    ) {
        let mut reader = wire::FrameReader::new();
        // One packet is in the host at a time: a few idle buffers suffice.
        let mut pool = BufferPool::with_limits(READER_POOL_BYTES, 2);
        let mut buf = vec![0u8; 256 * 1024];
        // The peer, once its `Hello` proved this process reads it.
        let mut peer: Option<Peer> = None;
        // A `DirectOk` to send once the stream has a writer.
        let mut ok_due = false;
        'outer: loop {
            let n = match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            reader.push(&buf[..n]);
            loop {
                let frame = match reader.next_frame() {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "soft-tcp: bad frame, dropping connection");
                        break 'outer;
                    }
                };
                let (pkt, release) = match wire::decode_in(&frame, &mut pool) {
                    Ok(Incoming::Packet(p)) => (p, None),
                    Ok(Incoming::Remote(mut p, r)) => {
                        let Some(from) = peer else {
                            tracing::warn!("soft-tcp: a lent payload from a peer that was not checked, dropping connection");
                            break 'outer;
                        };
                        let mut data = pool.take(r.len as usize);
                        let into = data
                            .get_mut()
                            .expect("a buffer fresh from the pool is not shared");
                        if !from.pull(&r, into) {
                            // The peer's end let its loans go (its stream
                            // is closing): as a broken stream, no warning.
                            tracing::debug!(
                                len = r.len,
                                "soft-tcp: a lent payload is gone from the peer process, dropping connection"
                            );
                            break 'outer;
                        }
                        self.same_host_bytes
                            .fetch_add(u64::from(r.len), Ordering::Relaxed);
                        p.set_payload(data);
                        (p, Some(r.lent))
                    }
                    Ok(Incoming::Link(l)) => {
                        match l {
                            Link::Hello(h) => {
                                if self.same_host.load(Ordering::Relaxed) {
                                    peer = Peer::verify(&h, &stream);
                                    tracing::debug!(
                                        pid = h.pid,
                                        same_host = peer.is_some(),
                                        "soft-tcp: the peer's hello"
                                    );
                                    ok_due = peer.is_some();
                                }
                            }
                            Link::DirectOk => d.peer_reads(),
                            Link::Release { upto } => {
                                // A released READ response's buffer goes
                                // back to the host's pool (a WRITE's is
                                // still the requester's until its ACK).
                                let back: Vec<_> = d
                                    .release(upto)
                                    .into_iter()
                                    .filter(|p| !p.is_shared())
                                    .collect();
                                if !back.is_empty() {
                                    let mut inner = self.lock();
                                    for p in back {
                                        inner.host.recycle_payload(p);
                                    }
                                }
                            }
                        }
                        if ok_due {
                            if let Some(c) =
                                conn.and_then(|c| self.lock().conns.get(&c).map(|c| c.tx.clone()))
                            {
                                let _ = c.send(Frame::Link(Link::DirectOk));
                                ok_due = false;
                            }
                        }
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "soft-tcp: bad packet, dropping connection");
                        break 'outer;
                    }
                };
                let mut inner = self.lock();
                if conn.is_none() {
                    // First frame of an accepted stream: must be a REQ.
                    let Body::Cm(CmMsg::Req { conn_id, .. }) = &pkt.body else {
                        break 'outer;
                    };
                    let (tx, rx) = mpsc::channel();
                    let w = match stream.try_clone() {
                        Ok(w) => w,
                        Err(_) => break 'outer,
                    };
                    let slot = Arc::new(Mutex::new(stream.try_clone().ok()));
                    let me = self.clone();
                    let d2 = d.clone();
                    let _ = thread::Builder::new()
                        .name(format!("soft-tcp-write-{conn_id:x}"))
                        .spawn(move || me.write_loop(w, rx, &d2));
                    if ok_due {
                        let _ = tx.send(Frame::Link(Link::DirectOk));
                        ok_due = false;
                    }
                    inner.conns.insert(*conn_id, Conn { tx, stream: slot });
                    conn = Some(*conn_id);
                }
                // The loan is released before the host answers the packet
                // (the answer follows the release on the stream).
                if let Some(upto) = release {
                    if let Some(c) = conn.and_then(|c| inner.conns.get(&c)) {
                        let _ = c.tx.send(Frame::Link(Link::Release { upto }));
                    }
                }
                let payload = pkt.payload().cloned();
                let mut out = Outbox::new(self.now());
                inner.host.receive(pkt, &mut out);
                self.apply(&mut inner, out);
                drop(inner);
                if let Some(p) = payload {
                    pool.recycle(p);
                }
            }
        }
        if let Some(c) = conn {
            self.lost(c);
        }
    }
}
