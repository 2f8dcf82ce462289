//! The engines' options ([`TargetConfig`], [`InitiatorConfig`]) and the
//! session options each makes of them: the regions the block service
//! needs, receive slots and one-sided depth for its queue depth.

use relink::{
    Access, OptionsError, Policy, RegionId, RegionOptions, SessionOptions, SessionOptionsBuilder,
};

/// The target's staging region (not advertised): `queue_depth` slots of
/// `max_io` bytes, one per command moving data.
pub const STAGING_REGION: RegionId = RegionId(1);
/// The initiator's data region, advertised to the target: `queue_depth`
/// slots of `max_io` bytes, one per outstanding command. Commands name
/// it in their buffer tokens.
pub const DATA_REGION: RegionId = RegionId(1);

/// Receive slots beyond the queue depth: relink's 8 for control messages
/// and room for a command or reply in flight while another is taken.
const SLOT_MARGIN: u32 = 16;
/// What a receive slot holds besides relink's header: the largest message
/// the service sends is 36 bytes (a command; relink needs at least 34 with
/// an advertised region), and 512 leave room for frames of 9 commands or
/// 15 replies (commands queued together share one SEND; DESIGN.md).
const MAX_MESSAGE: u32 = 512;

/// Why an engine's options are refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A value out of range (the key and what it must be).
    #[error("{key}: {reason}")]
    Invalid {
        /// The option.
        key: &'static str,
        /// What it must be.
        reason: &'static str,
    },
    /// relink refused the session options made of them (the policy, most
    /// likely).
    #[error(transparent)]
    Options(#[from] OptionsError),
}

fn check(queue_depth: u16, max_io: u32) -> Result<(), ConfigError> {
    if queue_depth == 0 {
        return Err(ConfigError::Invalid {
            key: "queue_depth",
            reason: "must be >= 1",
        });
    }
    if max_io == 0 {
        return Err(ConfigError::Invalid {
            key: "max_io",
            reason: "must be >= 1",
        });
    }
    Ok(())
}

fn base(queue_depth: u16, policy: &Policy) -> SessionOptionsBuilder {
    SessionOptions::builder()
        .policy(policy.clone())
        .recv_slots(u32::from(queue_depth) + SLOT_MARGIN)
        .max_message(MAX_MESSAGE)
        .max_one_sided(u32::from(queue_depth))
        // A command is one message (and a target's reply one more), each
        // outstanding until its completion is taken: room for every
        // command twice over, so a full queue never refuses a send.
        .max_outstanding(2 * u32::from(queue_depth) + SLOT_MARGIN)
}

/// The setters both engines' options share: one per field, each
/// returning the options for chaining.
macro_rules! config_setters {
    ($ty:ident) => {
        impl $ty {
            #[doc = concat!("[`", stringify!($ty), "::queue_depth`].")]
            pub fn queue_depth(mut self, n: u16) -> $ty {
                self.queue_depth = n;
                self
            }

            #[doc = concat!("[`", stringify!($ty), "::max_io`].")]
            pub fn max_io(mut self, bytes: u32) -> $ty {
                self.max_io = bytes;
                self
            }

            #[doc = concat!("[`", stringify!($ty), "::policy`].")]
            pub fn policy(mut self, policy: Policy) -> $ty {
                self.policy = policy;
                self
            }
        }
    };
}

/// A target engine's options: start from [`TargetConfig::default`] and
/// set what differs (more options may come).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TargetConfig {
    /// Commands moving data that the engine works on at once per session
    /// (one staging slot each); more wait in arrival order. Default 32.
    pub queue_depth: u16,
    /// The longest READ or WRITE, bytes (a staging slot's size).
    /// Default 128 KiB.
    pub max_io: u32,
    /// The accepted sessions' recovery policy. Default
    /// [`Policy::default`].
    pub policy: Policy,
}

impl Default for TargetConfig {
    fn default() -> TargetConfig {
        TargetConfig {
            queue_depth: 32,
            max_io: 128 * 1024,
            policy: Policy::default(),
        }
    }
}

config_setters!(TargetConfig);

impl TargetConfig {
    /// The options of the sessions the target's listener accepts: a
    /// staging region of `queue_depth * max_io` bytes per session.
    ///
    /// # Errors
    /// [`ConfigError`] naming a value out of range.
    pub fn session_options(&self) -> Result<SessionOptions, ConfigError> {
        check(self.queue_depth, self.max_io)?;
        let len = u64::from(self.queue_depth) * u64::from(self.max_io);
        Ok(base(self.queue_depth, &self.policy)
            .region(RegionOptions::new(STAGING_REGION, len, Access::LOCAL_WRITE))
            .build()?)
    }
}

/// An initiator engine's options: start from
/// [`InitiatorConfig::default`] and set what differs (more options may
/// come). `max_io` must not exceed the target's (IDENTIFY tells it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct InitiatorConfig {
    /// Commands outstanding at once (one data slot each); more wait in
    /// the engine, in submission order. Default 32.
    pub queue_depth: u16,
    /// The longest READ or WRITE, bytes (a data slot's size). Default
    /// 128 KiB.
    pub max_io: u32,
    /// The session's recovery policy (`ctrl_loss_tmo` bounds how long
    /// commands wait through an outage). Default [`Policy::default`].
    pub policy: Policy,
}

impl Default for InitiatorConfig {
    fn default() -> InitiatorConfig {
        InitiatorConfig {
            queue_depth: 32,
            max_io: 128 * 1024,
            policy: Policy::default(),
        }
    }
}

config_setters!(InitiatorConfig);

impl InitiatorConfig {
    /// The session's options: a data region of `queue_depth * max_io`
    /// bytes advertised to the target for remote read and write.
    ///
    /// # Errors
    /// [`ConfigError`] naming a value out of range.
    pub fn session_options(&self) -> Result<SessionOptions, ConfigError> {
        check(self.queue_depth, self.max_io)?;
        let len = u64::from(self.queue_depth) * u64::from(self.max_io);
        Ok(base(self.queue_depth, &self.policy)
            .region(
                RegionOptions::new(
                    DATA_REGION,
                    len,
                    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
                )
                .advertise(true),
            )
            .build()?)
    }
}
