//! Recovery policy: when to retry, how long to wait, when to give up, which
//! device may take over. Defaults follow the kernel's NVMe-oF where it is
//! right, and improve on it where it is not (`docs/DESIGN.md`, section
//! "Policy", places them in the design).
//!
//! [`Policy`] lists every knob with its default and meaning.
//!
//! A policy is made with [`Policy::builder`] (or [`Policy::default`]), which
//! checks every knob: [`PolicyBuilder::build`] names the offending key.
//!
//! ```
//! use std::time::Duration;
//! use relink_core::policy::Policy;
//!
//! let p = Policy::builder()
//!     .ctrl_loss_tmo(Some(Duration::from_secs(30)))
//!     .first_connect_tmo(Some(Duration::from_secs(5)))
//!     .build()?;
//! assert_eq!(p.reconnect_delay, Duration::from_secs(10)); // the default
//!
//! let bad = Policy::builder().reconnect_delay(Duration::ZERO).build();
//! assert_eq!(bad.unwrap_err().key, "reconnect_delay");
//! # Ok::<(), relink_core::policy::PolicyError>(())
//! ```

use std::time::Duration;

use relink_fabric::{DeviceInfo, Guid};

/// Which device may carry a session after a loss.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeviceMatch {
    /// Any device that reaches the peer's address (the same one back, or a
    /// replacement with the same IP/subnet).
    #[default]
    Any,
    /// Only a device with the GUID of the one first used (a reset keeps the
    /// GUID; a replacement does not).
    SameGuid,
    /// Only the listed devices (by name or GUID).
    AllowList(Vec<AllowedDevice>),
}

/// Who decides when a session recovers after a loss
/// ([`Policy::recovery`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RecoveryMode {
    /// relink reconnects on its own, under the backoff, as soon as a device
    /// can carry the session.
    #[default]
    Automatic,
    /// On a loss of an established session an initiator holds: every
    /// operation stays pending, it reports
    /// [`SessionEvent::AwaitingDecision`](crate::session::SessionEvent::AwaitingDecision)
    /// (again whenever the candidate paths change) and makes no attempt
    /// until the application resumes it
    /// ([`Session::resume`](crate::session::Session::resume)), closes it,
    /// or the give-up deadline passes. After the resume it recovers as an
    /// automatic session does. A target accepts a valid resume in either
    /// mode: the decision is the initiator's.
    Manual,
}

/// An entry of [`DeviceMatch::AllowList`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllowedDevice {
    /// A device name, e.g. `mlx5_1`.
    Name(String),
    /// A node GUID.
    Guid(Guid),
}

impl DeviceMatch {
    /// Whether `dev` may carry the session; `first_guid` is the GUID of the
    /// device the session first used.
    pub fn allows(&self, dev: &DeviceInfo, first_guid: Option<Guid>) -> bool {
        match self {
            DeviceMatch::Any => true,
            DeviceMatch::SameGuid => first_guid.is_none_or(|g| g == dev.node_guid),
            DeviceMatch::AllowList(list) => list.iter().any(|a| match a {
                AllowedDevice::Name(n) => *n == dev.id.name,
                AllowedDevice::Guid(g) => *g == dev.node_guid,
            }),
        }
    }
}

/// A policy setting that is out of range, named by its key: the one error
/// of [`PolicyBuilder::build`] and [`Policy::validate`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy key `{key}`: {reason}")]
#[non_exhaustive]
pub struct PolicyError {
    /// The offending key, as spelled in the policy table and in
    /// configuration files (`reconnect_delay`, ...).
    pub key: &'static str,
    /// What the key must be.
    pub reason: &'static str,
}

/// The recovery policy of a session: made with [`Policy::builder`] (which
/// checks every knob and names the offending key) or [`Policy::default`];
/// its fields are read-only outside this crate (more knobs may come).
/// Defaults follow the kernel's NVMe-oF where it is right:
///
/// | knob | default | meaning |
/// |---|---|---|
/// | `ctrl_loss_tmo` | 600 s | give-up **deadline** from the loss (not a retry count); `None` = forever |
/// | `first_connect_tmo` | 30 s | give-up deadline of a session never established, from its start (the initiator's `connect`, the target's accepted Hello); `None` = forever |
/// | `reconnect_delay` | 10 s | cap of the exponential backoff (the first attempt is immediate) |
/// | `initial_backoff` | 20 ms | delay before the second attempt, doubling per attempt |
/// | `refused_backoff` | 1 ms | retry delay after the peer's CM refused for want of a listener, doubling per refusal in a row, never longer than the backoff |
/// | `fast_io_fail_tmo` | off | after this, queued operations fail while reconnection continues |
/// | `keepalive` | 5 s | probe an idle connection (and an idle standby); silence for two periods = peer gone (the standby's: that standby gone) |
/// | `initial_connect_timeout` | 500 ms | how long the first attempt of an outage may take, doubling per attempt |
/// | `connect_timeout` | 3 s | cap of an attempt's time; a target's accepted connection gets all of it |
/// | `probe_interval` | 50 ms | while the peer is silent (its device may be away), the longest delay before the next attempt, a *probe*, never longer than the backoff; `None` = no probes |
/// | `probe_timeout` | 50 ms | how long a probe may take at least (4× the session's slowest connection if longer), never longer than the attempt timeout |
/// | `ack_delay` | 50 µs | longest a receiver holds back an acknowledgement when it has nothing to send |
/// | `device_match` | any | `any` / `same_guid` / an allow-list |
/// | `failback` | off | move back to the first path when its device returns |
/// | `replay_atomics` | off | replay unconfirmed atomics (at-least-once) instead of reporting them `Indeterminate` |
/// | `recovery` | automatic | `automatic`: reconnect on its own; `manual`: after a loss, wait for the application's decision ([`RecoveryMode`]) |
/// | `standby` | off | keep a second connection up on another path's device; a loss of the active one switches to it with no connection setup in the stall (costs a QP, a CQ, registrations and a receive area per session at both ends) |
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Policy {
    /// Give up this long after a loss of an established session (`None`:
    /// never): a **deadline** from the loss, not a retry count.
    pub ctrl_loss_tmo: Option<Duration>,
    /// Give up on a session that was never established this long after it
    /// started (`None`: never): from the initiator's connect or the
    /// target's accepted Hello. Every failed attempt meanwhile is reported
    /// ([`SessionEvent::AttemptFailed`](crate::session::SessionEvent::AttemptFailed));
    /// at the deadline the session fails
    /// ([`SessionEvent::GaveUp`](crate::session::SessionEvent::GaveUp),
    /// state `Failed`). Once established, `ctrl_loss_tmo` governs.
    pub first_connect_tmo: Option<Duration>,
    /// Upper bound of the delay between attempts.
    pub reconnect_delay: Duration,
    /// Delay before the second attempt; doubles each attempt up to
    /// `reconnect_delay` (the first attempt is immediate).
    pub initial_backoff: Duration,
    /// Delay before retrying an attempt the peer's CM refused for want of a
    /// listener (its host and device answer, its application does not
    /// listen yet — typically it is re-listening on a device that just came
    /// back); doubles with each such refusal in a row, never longer than the
    /// backoff above. A refusal costs the peer's kernel one message.
    pub refused_backoff: Duration,
    /// Fail queued operations this long after the loss while reconnection
    /// goes on (`None`: queue until give-up).
    pub fast_io_fail_tmo: Option<Duration>,
    /// Keepalive period (`None`: off).
    pub keepalive: Option<Duration>,
    /// How long one connection attempt may take at most (the cap of
    /// [`Policy::attempt_timeout`]); a target's accepted connection always
    /// gets this long for its handshake.
    pub connect_timeout: Duration,
    /// How long the first attempt after a loss (and the first connection)
    /// may take; each further attempt of the same outage gets twice as long,
    /// up to `connect_timeout`. An attempt whose request meets no device at
    /// all (the peer's HCA is gone or being replaced) gets no answer, only
    /// this timeout: a short first timeout lets the initiator try again soon
    /// after the peer's device is back, the doubling keeps a slow or loaded
    /// peer from being flooded with requests.
    pub initial_connect_timeout: Duration,
    /// While the peer is *silent* — the last attempt got no answer at all
    /// (it timed out before the connection was up, or the CM reported the
    /// peer unreachable): the longest delay before the next attempt (a
    /// *probe*; with equal jitter, so between half of it and all of it).
    /// The initiator cannot see the peer's device return; probes at this
    /// period find it within about one period. Only a session that was
    /// established probes (its connection time is known); `None`: no
    /// probes, the plain backoff and attempt timeouts only.
    pub probe_interval: Option<Duration>,
    /// The least time a probe may take: its timeout is the larger of this
    /// and four times the slowest connection the session made (so a peer
    /// that was slow to answer before is not cut short), never longer than
    /// [`Policy::attempt_timeout`] of its number.
    pub probe_timeout: Duration,
    /// How long a receiver may hold back the acknowledgement of delivered
    /// messages when it has nothing to send (a sender's message completes
    /// when the peer confirms delivery).
    pub ack_delay: Duration,
    /// Which devices may take over.
    pub device_match: DeviceMatch,
    /// Move back to the first path when its device returns.
    pub failback: bool,
    /// Replay unconfirmed atomics (at-least-once) instead of reporting them
    /// `Indeterminate`.
    pub replay_atomics: bool,
    /// Who decides when an established session recovers after a loss:
    /// relink ([`RecoveryMode::Automatic`]) or the application
    /// ([`RecoveryMode::Manual`]).
    pub recovery: RecoveryMode,
    /// Keep a hot standby connection (initiator's choice; a target takes
    /// the standby its initiator asks for): once established on one path,
    /// the initiator connects a second transport on another path whose
    /// device differs, both ends build and register everything on it and
    /// post its receives, and it stays idle. When the active transport is
    /// lost, either end promotes the standby: one in-band message each way
    /// carries the delivered sequence numbers, and the journal is replayed
    /// as after any recovery, with no connection setup in the stall. A new
    /// standby is built once a device allows. Off by default: it doubles
    /// a session's provider objects and receive memory at both ends.
    pub standby: bool,
}

impl Default for Policy {
    fn default() -> Policy {
        Policy {
            ctrl_loss_tmo: Some(Duration::from_secs(600)),
            first_connect_tmo: Some(Duration::from_secs(30)),
            reconnect_delay: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(20),
            refused_backoff: Duration::from_millis(1),
            fast_io_fail_tmo: None,
            keepalive: Some(Duration::from_secs(5)),
            connect_timeout: Duration::from_secs(3),
            initial_connect_timeout: Duration::from_millis(500),
            probe_interval: Some(Duration::from_millis(50)),
            probe_timeout: Duration::from_millis(50),
            ack_delay: Duration::from_micros(50),
            device_match: DeviceMatch::Any,
            failback: false,
            replay_atomics: false,
            recovery: RecoveryMode::Automatic,
            standby: false,
        }
    }
}

impl Policy {
    /// A builder that starts from the defaults ([`Policy::default`]).
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder {
            policy: Policy::default(),
        }
    }

    /// A builder that starts from this policy (to change a knob of it).
    pub fn to_builder(&self) -> PolicyBuilder {
        PolicyBuilder {
            policy: self.clone(),
        }
    }

    /// Check every knob; the error names the offending key.
    ///
    /// # Errors
    /// The first key out of range: `reconnect_delay` (must be > 0),
    /// `initial_backoff` (> 0 and ≤ `reconnect_delay`), `refused_backoff`
    /// (> 0 and ≤ `initial_backoff`), `connect_timeout` (> 0),
    /// `initial_connect_timeout` (> 0 and ≤ `connect_timeout`),
    /// `probe_interval` (> 0 or off), `probe_timeout` (> 0),
    /// `ack_delay` (> 0 and ≤ 1 s), `keepalive` (≥ 1 ms or off),
    /// `first_connect_tmo` (> 0 or never), `fast_io_fail_tmo` (≤
    /// `ctrl_loss_tmo`), `device_match` (an allow-list names a device),
    /// `standby` (only with automatic `recovery`: a promotion is a
    /// recovery relink decides).
    pub fn validate(&self) -> Result<(), PolicyError> {
        let err = |key, reason| Err(PolicyError { key, reason });
        if self.reconnect_delay.is_zero() {
            return err("reconnect_delay", "must be > 0");
        }
        if self.initial_backoff.is_zero() || self.initial_backoff > self.reconnect_delay {
            return err("initial_backoff", "must be > 0 and <= reconnect_delay");
        }
        if self.refused_backoff.is_zero() || self.refused_backoff > self.initial_backoff {
            return err("refused_backoff", "must be > 0 and <= initial_backoff");
        }
        if self.connect_timeout.is_zero() {
            return err("connect_timeout", "must be > 0");
        }
        if self.initial_connect_timeout.is_zero()
            || self.initial_connect_timeout > self.connect_timeout
        {
            return err(
                "initial_connect_timeout",
                "must be > 0 and <= connect_timeout",
            );
        }
        if self.probe_interval.is_some_and(|i| i.is_zero()) {
            return err("probe_interval", "must be > 0 (or off)");
        }
        if self.probe_timeout.is_zero() {
            return err("probe_timeout", "must be > 0");
        }
        if self.ack_delay.is_zero() || self.ack_delay > Duration::from_secs(1) {
            return err("ack_delay", "must be > 0 and <= 1 s");
        }
        if let Some(k) = self.keepalive {
            if k < Duration::from_millis(1) {
                return err("keepalive", "must be >= 1 ms (or off)");
            }
        }
        if self.first_connect_tmo.is_some_and(|t| t.is_zero()) {
            return err("first_connect_tmo", "must be > 0 (or never)");
        }
        if let (Some(f), Some(c)) = (self.fast_io_fail_tmo, self.ctrl_loss_tmo) {
            if f > c {
                return err("fast_io_fail_tmo", "must not exceed ctrl_loss_tmo");
            }
        }
        if let DeviceMatch::AllowList(l) = &self.device_match {
            if l.is_empty() {
                return err(
                    "device_match",
                    "an allow-list must name at least one device",
                );
            }
        }
        if self.standby && self.recovery != RecoveryMode::Automatic {
            return err(
                "standby",
                "needs automatic recovery (a promotion is a recovery relink decides)",
            );
        }
        Ok(())
    }

    /// Delay before attempt `attempt` (0 = the first, immediate), with
    /// "equal jitter": half the exponential delay plus a random part of the
    /// other half. `random` is any uniformly random u64 (the caller's RNG:
    /// the core reads none).
    pub fn backoff(&self, attempt: u32, random: u64) -> Duration {
        if attempt == 0 {
            return Duration::ZERO;
        }
        let base = doubled(self.initial_backoff, attempt, self.reconnect_delay);
        equal_jitter(base, random)
    }

    /// Delay before the next attempt after `refusals` attempts in a row
    /// that the peer refused for want of a listener (1 = the first):
    /// `refused_backoff` doubled per refusal before it, with equal jitter.
    /// The caller takes the smaller of this and [`Policy::backoff`].
    pub fn refused_delay(&self, refusals: u32, random: u64) -> Duration {
        let base = doubled(self.refused_backoff, refusals, self.reconnect_delay);
        equal_jitter(base, random)
    }

    /// How long attempt `attempt` of an outage (1 = the first) may take:
    /// `initial_connect_timeout`, doubled for each attempt before it, at
    /// most `connect_timeout`.
    pub fn attempt_timeout(&self, attempt: u32) -> Duration {
        doubled(self.initial_connect_timeout, attempt, self.connect_timeout)
    }

    /// Delay before a probe (the next attempt while the peer is silent):
    /// `probe_interval` with equal jitter; `None` when probes are off.
    /// The caller takes the smaller of this and [`Policy::backoff`] (so an
    /// interval above `reconnect_delay` changes nothing).
    pub fn probe_delay(&self, random: u64) -> Option<Duration> {
        self.probe_interval.map(|i| equal_jitter(i, random))
    }

    /// How long probe `attempt` of an outage may take, for a session whose
    /// slowest connection took `slowest`: the larger of `probe_timeout`
    /// and four times `slowest`, at most [`Policy::attempt_timeout`] of
    /// `attempt`.
    pub fn probe_attempt_timeout(&self, attempt: u32, slowest: Duration) -> Duration {
        self.probe_timeout
            .max(slowest.saturating_mul(4))
            .min(self.attempt_timeout(attempt))
    }

    /// How long silence on the connection may last before the peer is
    /// declared gone.
    pub fn keepalive_deadline(&self) -> Option<Duration> {
        self.keepalive.map(|k| k * 2)
    }
}

/// Makes a [`Policy`]: starts from the defaults ([`Policy::builder`]) or
/// from a policy ([`Policy::to_builder`]), one setter per knob
/// ([`Policy`] lists them with their defaults), checked by
/// [`build`](PolicyBuilder::build).
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PolicyBuilder {
    policy: Policy,
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $ty:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(mut self, value: $ty) -> PolicyBuilder {
            self.policy.$name = value;
            self
        }
    )*};
}

impl PolicyBuilder {
    setters! {
        /// [`Policy::ctrl_loss_tmo`]: give-up deadline after a loss
        /// (`None`: never).
        ctrl_loss_tmo: Option<Duration>;
        /// [`Policy::first_connect_tmo`]: give-up deadline of a session
        /// never established (`None`: never).
        first_connect_tmo: Option<Duration>;
        /// [`Policy::reconnect_delay`]: cap of the backoff.
        reconnect_delay: Duration;
        /// [`Policy::initial_backoff`]: delay before the second attempt.
        initial_backoff: Duration;
        /// [`Policy::refused_backoff`]: retry delay after a refusal for
        /// want of a listener.
        refused_backoff: Duration;
        /// [`Policy::fast_io_fail_tmo`]: fail queued operations this long
        /// after a loss (`None`: off).
        fast_io_fail_tmo: Option<Duration>;
        /// [`Policy::keepalive`]: keepalive period (`None`: off).
        keepalive: Option<Duration>;
        /// [`Policy::connect_timeout`]: cap of an attempt's time.
        connect_timeout: Duration;
        /// [`Policy::initial_connect_timeout`]: time of the first attempt
        /// of an outage.
        initial_connect_timeout: Duration;
        /// [`Policy::probe_interval`]: longest delay before a probe while
        /// the peer is silent (`None`: no probes).
        probe_interval: Option<Duration>;
        /// [`Policy::probe_timeout`]: least time a probe may take.
        probe_timeout: Duration;
        /// [`Policy::ack_delay`]: longest hold-back of an acknowledgement.
        ack_delay: Duration;
        /// [`Policy::device_match`]: which devices may take over.
        device_match: DeviceMatch;
        /// [`Policy::failback`]: move back to the first path when its
        /// device returns.
        failback: bool;
        /// [`Policy::replay_atomics`]: replay unconfirmed atomics
        /// (at-least-once) instead of reporting them `Indeterminate`.
        replay_atomics: bool;
        /// [`Policy::recovery`]: who decides when a session recovers after
        /// a loss.
        recovery: RecoveryMode;
        /// [`Policy::standby`]: keep a hot standby connection on another
        /// device.
        standby: bool;
    }

    /// The policy, checked.
    ///
    /// # Errors
    /// A [`PolicyError`] naming the first key out of range
    /// ([`Policy::validate`] lists the rules).
    pub fn build(self) -> Result<Policy, PolicyError> {
        self.policy.validate()?;
        Ok(self.policy)
    }
}

/// The `n`th of a series that starts at `first` and doubles each time, at
/// most `cap`.
fn doubled(first: Duration, n: u32, cap: Duration) -> Duration {
    let exp = n.saturating_sub(1).min(30);
    first.saturating_mul(1u32 << exp).min(cap)
}

/// Half of `base` plus a random part of the other half ("equal jitter").
fn equal_jitter(base: Duration, random: u64) -> Duration {
    let half = base / 2;
    let span = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX).max(1);
    half + Duration::from_nanos(random % span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use relink_fabric::{DeviceId, PortState};

    fn dev(name: &str, guid: u64) -> DeviceInfo {
        DeviceInfo {
            id: DeviceId {
                name: name.into(),
                index: 1,
                generation: 1,
            },
            node_guid: Guid(guid),
            addrs: vec![],
            netdev: None,
            port_state: PortState::Active,
        }
    }

    #[test]
    fn defaults_are_valid_and_match_the_design() {
        let p = Policy::default();
        p.validate().unwrap();
        assert_eq!(p.ctrl_loss_tmo, Some(Duration::from_secs(600)));
        assert_eq!(p.first_connect_tmo, Some(Duration::from_secs(30)));
        assert_eq!(p.reconnect_delay, Duration::from_secs(10));
        assert_eq!(p.fast_io_fail_tmo, None);
        assert_eq!(p.keepalive, Some(Duration::from_secs(5)));
        assert_eq!(p.device_match, DeviceMatch::Any);
    }

    #[test]
    fn validation_names_the_key() {
        let p = Policy {
            fast_io_fail_tmo: Some(Duration::from_secs(700)),
            ..Policy::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "fast_io_fail_tmo");
        let p = Policy {
            reconnect_delay: Duration::ZERO,
            ..Policy::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "reconnect_delay");
        let p = Policy {
            device_match: DeviceMatch::AllowList(vec![]),
            ..Policy::default()
        };
        assert_eq!(p.validate().unwrap_err().key, "device_match");
        let e = Policy::builder()
            .first_connect_tmo(Some(Duration::ZERO))
            .build()
            .unwrap_err();
        assert_eq!(e.key, "first_connect_tmo");
        assert_eq!(
            e.to_string(),
            "policy key `first_connect_tmo`: must be > 0 (or never)"
        );
    }

    #[test]
    fn builder_sets_every_knob_and_checks() {
        let p = Policy::builder()
            .ctrl_loss_tmo(None)
            .first_connect_tmo(Some(Duration::from_secs(2)))
            .reconnect_delay(Duration::from_secs(1))
            .initial_backoff(Duration::from_millis(5))
            .refused_backoff(Duration::from_millis(2))
            .fast_io_fail_tmo(Some(Duration::from_secs(3)))
            .keepalive(None)
            .connect_timeout(Duration::from_secs(2))
            .initial_connect_timeout(Duration::from_millis(100))
            .probe_interval(None)
            .probe_timeout(Duration::from_millis(7))
            .ack_delay(Duration::from_micros(10))
            .device_match(DeviceMatch::SameGuid)
            .failback(true)
            .replay_atomics(true)
            .recovery(RecoveryMode::Manual)
            .build()
            .unwrap();
        assert_eq!(p.recovery, RecoveryMode::Manual);
        assert_eq!(Policy::default().recovery, RecoveryMode::Automatic);
        assert_eq!(p.ctrl_loss_tmo, None);
        assert_eq!(p.first_connect_tmo, Some(Duration::from_secs(2)));
        assert_eq!(p.reconnect_delay, Duration::from_secs(1));
        assert_eq!(p.initial_backoff, Duration::from_millis(5));
        assert_eq!(p.refused_backoff, Duration::from_millis(2));
        assert_eq!(p.fast_io_fail_tmo, Some(Duration::from_secs(3)));
        assert_eq!(p.keepalive, None);
        assert_eq!(p.connect_timeout, Duration::from_secs(2));
        assert_eq!(p.initial_connect_timeout, Duration::from_millis(100));
        assert_eq!(p.probe_interval, None);
        assert_eq!(p.probe_timeout, Duration::from_millis(7));
        assert_eq!(p.ack_delay, Duration::from_micros(10));
        assert_eq!(p.device_match, DeviceMatch::SameGuid);
        assert!(p.failback && p.replay_atomics);
        assert_eq!(p.to_builder().build(), Ok(p));
        let e = Policy::builder()
            .initial_backoff(Duration::from_secs(60))
            .build()
            .unwrap_err();
        assert_eq!(e.key, "initial_backoff");
        let e = Policy::builder()
            .probe_interval(Some(Duration::ZERO))
            .build()
            .unwrap_err();
        assert_eq!(e.key, "probe_interval");
        let e = Policy::builder()
            .probe_timeout(Duration::ZERO)
            .build()
            .unwrap_err();
        assert_eq!(e.key, "probe_timeout");
        assert!(!Policy::default().standby);
        let p = Policy::builder().standby(true).build().unwrap();
        assert!(p.standby);
        let e = p
            .to_builder()
            .recovery(RecoveryMode::Manual)
            .build()
            .unwrap_err();
        assert_eq!(e.key, "standby");
    }

    #[test]
    fn probes_are_short_and_bounded() {
        let p = Policy::default();
        for r in [0, 1, u64::MAX, 0xdead_beef] {
            let d = p.probe_delay(r).expect("on by default");
            assert!(d >= Duration::from_millis(25) && d <= Duration::from_millis(50));
        }
        assert_eq!(
            p.probe_attempt_timeout(3, Duration::from_millis(1)),
            p.probe_timeout
        );
        // A peer that took 100 ms to answer gets 400 ms ...
        assert_eq!(
            p.probe_attempt_timeout(3, Duration::from_millis(100)),
            Duration::from_millis(400)
        );
        // ... but never more than the attempt's own timeout.
        assert_eq!(
            p.probe_attempt_timeout(1, Duration::from_secs(1)),
            p.attempt_timeout(1)
        );
        let off = Policy::builder().probe_interval(None).build().unwrap();
        assert_eq!(off.probe_delay(7), None);
    }

    #[test]
    fn first_attempt_is_immediate_and_backoff_is_capped() {
        let p = Policy::default();
        assert_eq!(p.backoff(0, 12345), Duration::ZERO);
        for attempt in 1..100 {
            for r in [0, 1, u64::MAX, 0xdead_beef] {
                let d = p.backoff(attempt, r);
                assert!(d <= p.reconnect_delay, "{attempt}: {d:?}");
                assert!(d > Duration::ZERO);
            }
        }
        // Grows: attempt 5's floor is above attempt 1's ceiling.
        assert!(p.backoff(5, 0) > p.backoff(1, u64::MAX));
    }

    #[test]
    fn device_match() {
        let a = dev("soft0", 1);
        let b = dev("soft1", 2);
        assert!(DeviceMatch::Any.allows(&b, Some(Guid(1))));
        assert!(DeviceMatch::SameGuid.allows(&a, Some(Guid(1))));
        assert!(!DeviceMatch::SameGuid.allows(&b, Some(Guid(1))));
        let allow = DeviceMatch::AllowList(vec![AllowedDevice::Name("soft1".into())]);
        assert!(allow.allows(&b, None));
        assert!(!allow.allows(&a, None));
        let allow = DeviceMatch::AllowList(vec![AllowedDevice::Guid(Guid(1))]);
        assert!(allow.allows(&a, None));
    }
}
