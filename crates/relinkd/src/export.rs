//! One export on the node thread: its target engine, whether it listens
//! (an address no device owns yet waits for one), and its sessions'
//! initiators (to close the sessions of one that restarted).

use std::collections::HashMap;
use std::net::IpAddr;

use relink::{Incarnation, SessionHandle, State};
use relink_block::{Node, TargetConfig, TargetEngine, Volume};

use crate::config::ExportConfig;
use crate::node_loop::StartError;

/// One export on the node thread.
pub(crate) struct Export {
    pub(crate) config: ExportConfig,
    pub(crate) engine: TargetEngine,
    /// Whether it listens (said on stdout when it starts to): a listen
    /// address no device owns yet waits for one.
    pub(crate) listening: bool,
    /// Bytes of its volume (for the progress line).
    size: u64,
    /// Each session's initiator: its address and its node's incarnation
    /// (a new one: that relinkd restarted).
    peers: HashMap<SessionHandle, (IpAddr, Option<Incarnation>)>,
}

impl Export {
    /// Open the export's file and listen on its address.
    pub(crate) fn listen(node: &mut Node, e: &ExportConfig) -> Result<Export, StartError> {
        let volume = Volume::open(&e.file, e.read_only).map_err(|err| StartError::File {
            name: e.name.clone(),
            file: e.file.clone(),
            reason: err.to_string(),
        })?;
        let size = volume.size();
        let config = TargetConfig::default()
            .queue_depth(e.queue_depth)
            .max_io(e.max_io);
        let engine = TargetEngine::listen(node, e.listen, volume, config).map_err(|err| {
            StartError::Listen {
                name: e.name.clone(),
                addr: e.listen,
                reason: err.to_string(),
            }
        })?;
        let mut export = Export {
            config: e.clone(),
            engine,
            listening: false,
            size,
            peers: HashMap::new(),
        };
        if !export.check_listening(node) {
            println!(
                "export {} waiting for a device that owns {} (listening once one does)",
                e.name,
                e.listen.ip()
            );
        }
        Ok(export)
    }

    /// Session `new` was accepted from `peer`: sessions of the same
    /// initiator address that are not established and come from another
    /// incarnation of the initiator's node belong to an initiator that is
    /// gone (its relinkd restarted, and a new one connected): they could
    /// only wait for their give-up deadline, so they are closed now.
    pub(crate) fn initiator_restarted(
        &mut self,
        node: &mut Node,
        new: SessionHandle,
        peer: IpAddr,
    ) {
        let incarnation = node.session_info(new).and_then(|i| i.peer_incarnation);
        self.peers.retain(|s, _| node.state(*s).is_some());
        let stale: Vec<SessionHandle> = self
            .peers
            .iter()
            .filter(|(s, (ip, inc))| {
                **s != new
                    && *ip == peer
                    && incarnation.is_some()
                    && inc.is_some()
                    && *inc != incarnation
                    && node
                        .state(**s)
                        .is_some_and(|st| !matches!(st, State::Established | State::Closed))
            })
            .map(|(s, _)| *s)
            .collect();
        for s in stale {
            tracing::info!(
                export = %self.config.name,
                initiator = %peer,
                session = s.0,
                "the initiator restarted (a new incarnation connected): its old session, which could only wait for its give-up deadline, is closed"
            );
            let _ = node.close(s);
            self.peers.remove(&s);
        }
        self.peers.insert(new, (peer, incarnation));
    }

    /// Whether the export listens now; says so on stdout when it starts
    /// to.
    pub(crate) fn check_listening(&mut self, node: &Node) -> bool {
        let now = node.listener_active(self.engine.listener()) == Some(true);
        if now && !self.listening {
            let e = &self.config;
            println!(
                "export {} listening on {} ({} bytes from {}{})",
                e.name,
                e.listen,
                self.size,
                e.file.display(),
                if e.read_only { ", read-only" } else { "" }
            );
        } else if !now && self.listening {
            tracing::warn!(
                export = %self.config.name,
                listen = %self.config.listen,
                "no device owns the export's address any more: waiting for one"
            );
        }
        self.listening = now;
        now
    }
}
