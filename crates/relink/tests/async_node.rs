//! `AsyncNode` (feature `tokio`): two nodes on the TCP soft fabric, each
//! driven by `progress().await` in a task of one current-thread runtime,
//! exchange messages across a reset of the server's device: every message
//! arrives exactly once, in order, every send completes once and
//! successfully, the client's session resumes, and its close reaches the
//! server as a goodbye.

#![cfg(all(unix, feature = "tokio"))]

use std::time::Duration;

use relink::{AsyncNode, Node, Path, SessionEvent, SessionOptions};
use relink_sim::{TcpHosts, INITIATOR, TARGET};
use relink_soft::Registry;

/// Messages sent before the reset; the client goes on until it resumed.
const BEFORE_RESET: u64 = 200;
/// The longest either side may hear nothing: only keeps a hang finite.
const QUIET: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "current_thread")]
async fn two_async_nodes_exchange_messages_across_a_reset() {
    let hosts = TcpHosts::new("async-node");
    let addr = std::net::SocketAddr::new(hosts.addr(TARGET), 7491);
    let mut server = Node::new(hosts.host(TARGET));
    server
        .listen(addr, SessionOptions::default())
        .expect("listen");
    let mut server = AsyncNode::new(server).expect("the TCP fabric has an event fd");
    let mut client = AsyncNode::new(Node::new(hosts.host(INITIATOR))).expect("event fd");
    let s = client
        .node()
        .connect(
            vec![Path {
                local: None,
                peer: addr,
            }],
            SessionOptions::default(),
        )
        .expect("connect");
    let target_dir = hosts.dir(TARGET);

    // The server takes messages until the client says goodbye; it resets
    // its own device after BEFORE_RESET of them.
    let serve = async move {
        let (mut got, mut t, mut reset, mut closed) = (Vec::new(), None, false, false);
        while !closed {
            assert!(
                server.progress_for(QUIET).await.expect("reactor"),
                "the server heard nothing for {QUIET:?} at message {}",
                got.len()
            );
            if t.is_none() {
                t = server.node().accept().map(|a| a.session);
            }
            let Some(t) = t else { continue };
            while let Some((seq, msg)) = server.node().poll_delivery(t) {
                assert_eq!(seq.0, got.len() as u64 + 1, "in order, exactly once");
                got.push(u64::from_le_bytes(msg[..8].try_into().expect("8 bytes")));
            }
            while let Some(e) = server.node().poll_event(t) {
                closed |= matches!(e, SessionEvent::Disconnected);
            }
            if !reset && got.len() as u64 >= BEFORE_RESET {
                Registry::open(&target_dir)
                    .expect("registry")
                    .reset("soft0")
                    .expect("reset the server's device");
                reset = true;
            }
        }
        got
    };
    // The client keeps 16 messages in flight until its session resumed
    // after the reset and everything it sent completed; then it closes.
    let send = async move {
        let (mut sent, mut done, mut resumed) = (0u64, 0u64, false);
        while !(resumed && done == sent) {
            while !resumed && sent - done < 16 {
                client.node().send(s, &sent.to_le_bytes()).expect("send");
                sent += 1;
            }
            assert!(
                client.progress_for(QUIET).await.expect("reactor"),
                "the client heard nothing for {QUIET:?} at completion {done}"
            );
            while let Some(c) = client.node().poll_completion(s) {
                assert!(c.outcome.is_success(), "{c:?}");
                done += 1;
            }
            while let Some(e) = client.node().poll_event(s) {
                resumed |= matches!(e, SessionEvent::Resumed { .. });
            }
        }
        client.node().close(s).expect("close");
        // Drive the node while the goodbye goes out.
        while client
            .progress_for(Duration::from_millis(200))
            .await
            .expect("reactor")
        {}
        sent
    };
    let (got, sent) = tokio::join!(serve, send);
    assert!(sent > BEFORE_RESET, "the client sent past the reset");
    assert_eq!(
        got,
        (0..sent).collect::<Vec<_>>(),
        "every message once, in order"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn progress_returns_when_a_queued_send_is_posted_and_times_out_when_idle() {
    let hosts = TcpHosts::new("async-node-idle");
    let mut node = AsyncNode::new(Node::new(hosts.host(INITIATOR))).expect("event fd");
    // Nothing to do: the timeout passes.
    assert!(!node
        .progress_for(Duration::from_millis(50))
        .await
        .expect("reactor"));
    // A connect queues work: the next call posts it at once.
    let peer = std::net::SocketAddr::new(hosts.addr(TARGET), 7492);
    node.node()
        .connect(vec![Path { local: None, peer }], SessionOptions::default())
        .expect("connect");
    assert!(node
        .progress_for(Duration::from_secs(5))
        .await
        .expect("reactor"));
}
