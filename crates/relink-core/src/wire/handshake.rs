//! The handshake carried in CM private data: [`ConnectData`] (Hello to
//! start a session, with the application's [`ConnectBytes`]; Resume to
//! reconnect one), [`AcceptData`] (Welcome, Resumed) and [`RejectData`]
//! (Refused with a [`RefuseReason`]), with the authenticators of Resume and
//! Resumed. The byte layout is in the [module docs](super).

use relink_fabric::{MAX_ACCEPT_PRIVATE_DATA, MAX_CONNECT_PRIVATE_DATA, MAX_REJECT_PRIVATE_DATA};

use super::cursor::{put_u32, put_u64, Cursor};
use super::{WireError, MAX_CONNECT_DATA, VERSION};
use crate::auth::{self, SessionSecret, AUTH_LEN, SECRET_LEN};
use crate::ids::{Epoch, Incarnation, Seq, SessionId};

const TAG_HELLO: u8 = 0x01;
const TAG_RESUME: u8 = 0x02;
const TAG_STANDBY: u8 = 0x03;
const TAG_WELCOME: u8 = 0x11;
const TAG_RESUMED: u8 = 0x12;
const TAG_REFUSED: u8 = 0x21;

const LABEL_RESUME: &[u8] = b"resume";
const LABEL_RESUMED: &[u8] = b"resumed";
const LABEL_STANDBY: &[u8] = b"standby";

/// Common prologue of the private-data decoders.
fn private_data<'a>(
    data: &'a [u8],
    what: &'static str,
    max: usize,
) -> Result<Cursor<'a>, WireError> {
    if data.len() > max {
        return Err(WireError::TooLong {
            what,
            len: data.len(),
            max,
        });
    }
    if data.iter().all(|&b| b == 0) {
        return Err(WireError::NoData);
    }
    let mut c = Cursor::new(data);
    c.version()?;
    Ok(c)
}

// ---------------------------------------------------------------------------
// CONNECT private data.

/// The initiator application's bytes in a [`Hello`]: at most
/// [`MAX_CONNECT_DATA`] of them (what the CM's connect private data leaves
/// after the rest of the Hello), so every Hello fits the CM's limit.
/// Empty by default.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnectBytes {
    len: u8,
    bytes: [u8; MAX_CONNECT_DATA],
}

impl ConnectBytes {
    /// No bytes.
    pub const EMPTY: ConnectBytes = ConnectBytes {
        len: 0,
        bytes: [0; MAX_CONNECT_DATA],
    };

    /// A copy of `data`.
    ///
    /// # Errors
    /// [`WireError::TooLong`] if `data` has more than
    /// [`MAX_CONNECT_DATA`] bytes.
    pub fn new(data: &[u8]) -> Result<ConnectBytes, WireError> {
        if data.len() > MAX_CONNECT_DATA {
            return Err(WireError::TooLong {
                what: "connect data",
                len: data.len(),
                max: MAX_CONNECT_DATA,
            });
        }
        let mut out = ConnectBytes::EMPTY;
        out.bytes[..data.len()].copy_from_slice(data);
        out.len = data.len() as u8;
        Ok(out)
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl Default for ConnectBytes {
    fn default() -> ConnectBytes {
        ConnectBytes::EMPTY
    }
}

impl std::ops::Deref for ConnectBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for ConnectBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ConnectBytes({:02x?})", self.as_slice())
    }
}

/// First connection of a new session (initiator → target).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hello {
    /// The session, chosen at random by the initiator.
    pub session: SessionId,
    /// The epoch of the connection being made: the initiator's attempt,
    /// which the new target session adopts (refused attempts before it
    /// used up the epochs below).
    pub epoch: Epoch,
    /// The initiator's incarnation.
    pub incarnation: Incarnation,
    /// The initiator application's bytes for the target application (only
    /// the Hello carries them: a Resume does not).
    pub connect_data: ConnectBytes,
}

/// Reconnection of an existing session (initiator → target), authenticated
/// with the session secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resume {
    /// The session to resume.
    pub session: SessionId,
    /// The epoch of the connection being made.
    pub epoch: Epoch,
    /// The highest sequence number the initiator delivered from the target.
    pub last_delivered: Seq,
    /// `authenticator(secret, [b"resume", session, epoch, last_delivered])`.
    pub auth: [u8; AUTH_LEN],
}

impl Resume {
    /// The authenticated fields, in wire encoding.
    fn tag_input(
        session: SessionId,
        epoch: Epoch,
        last_delivered: Seq,
    ) -> ([u8; 8], [u8; 4], [u8; 8]) {
        (
            session.0.to_be_bytes(),
            epoch.0.to_be_bytes(),
            last_delivered.0.to_be_bytes(),
        )
    }

    /// A `Resume` with its authenticator computed under `secret`.
    pub fn sign(
        secret: &SessionSecret,
        session: SessionId,
        epoch: Epoch,
        last_delivered: Seq,
    ) -> Resume {
        Self::sign_as(LABEL_RESUME, secret, session, epoch, last_delivered)
    }

    /// Whether `auth` was made under `secret` for exactly these fields
    /// (constant-time comparison).
    pub fn verify(&self, secret: &SessionSecret) -> bool {
        self.verify_as(LABEL_RESUME, secret)
    }

    /// A standby request ([`ConnectData::Standby`]): the same fields
    /// under another label, so a recorded Resume is never taken for a
    /// standby nor the reverse.
    pub fn sign_standby(
        secret: &SessionSecret,
        session: SessionId,
        epoch: Epoch,
        last_delivered: Seq,
    ) -> Resume {
        Self::sign_as(LABEL_STANDBY, secret, session, epoch, last_delivered)
    }

    /// Whether a standby request's `auth` was made under `secret` for
    /// exactly these fields ([`Resume::sign_standby`]).
    pub fn verify_standby(&self, secret: &SessionSecret) -> bool {
        self.verify_as(LABEL_STANDBY, secret)
    }

    fn sign_as(
        label: &[u8],
        secret: &SessionSecret,
        session: SessionId,
        epoch: Epoch,
        last_delivered: Seq,
    ) -> Resume {
        let (s, e, l) = Self::tag_input(session, epoch, last_delivered);
        Resume {
            session,
            epoch,
            last_delivered,
            auth: auth::authenticator(secret, &[label, &s, &e, &l]),
        }
    }

    fn verify_as(&self, label: &[u8], secret: &SessionSecret) -> bool {
        let (s, e, l) = Self::tag_input(self.session, self.epoch, self.last_delivered);
        auth::verify(secret, &[label, &s, &e, &l], &self.auth)
    }
}

/// CONNECT private data: what the initiator asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConnectData {
    /// A new session.
    Hello(Hello),
    /// A reconnection of an existing session.
    Resume(Resume),
    /// A standby connection of an established session
    /// ([`Policy::standby`](crate::policy::Policy::standby)): the target
    /// keeps it idle next to the current one and answers with a
    /// [`Resumed`] of its epoch. Signed with [`Resume::sign_standby`].
    Standby(Resume),
}

impl From<Hello> for ConnectData {
    fn from(h: Hello) -> ConnectData {
        ConnectData::Hello(h)
    }
}

impl From<Resume> for ConnectData {
    fn from(r: Resume) -> ConnectData {
        ConnectData::Resume(r)
    }
}

impl ConnectData {
    /// Appends the encoding to `out` (at most [`MAX_CONNECT_PRIVATE_DATA`]
    /// bytes: a Hello is [`HELLO_LEN`](super::HELLO_LEN) bytes and its connect data).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        match self {
            ConnectData::Hello(h) => {
                out.push(TAG_HELLO);
                put_u64(out, h.session.0);
                put_u32(out, h.epoch.0);
                put_u64(out, h.incarnation.0);
                out.push(h.connect_data.len);
                out.extend_from_slice(h.connect_data.as_slice());
            }
            ConnectData::Resume(r) | ConnectData::Standby(r) => {
                out.push(if matches!(self, ConnectData::Resume(_)) {
                    TAG_RESUME
                } else {
                    TAG_STANDBY
                });
                put_u64(out, r.session.0);
                put_u32(out, r.epoch.0);
                put_u64(out, r.last_delivered.0);
                out.extend_from_slice(&r.auth);
            }
        }
    }

    /// The encoding as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAX_CONNECT_PRIVATE_DATA);
        self.encode(&mut out);
        out
    }

    /// Decodes CONNECT private data (zero padding after it is accepted).
    pub fn decode(data: &[u8]) -> Result<ConnectData, WireError> {
        let mut c = private_data(data, "connect private data", MAX_CONNECT_PRIVATE_DATA)?;
        let out = match c.u8("connect tag")? {
            TAG_HELLO => ConnectData::Hello(Hello {
                session: c.session()?,
                epoch: c.epoch()?,
                incarnation: c.incarnation()?,
                connect_data: {
                    let len = usize::from(c.u8("connect data length")?);
                    if len > MAX_CONNECT_DATA {
                        return Err(WireError::TooLong {
                            what: "connect data",
                            len,
                            max: MAX_CONNECT_DATA,
                        });
                    }
                    ConnectBytes::new(c.take(len, "connect data")?)?
                },
            }),
            tag @ (TAG_RESUME | TAG_STANDBY) => {
                let r = Resume {
                    session: c.session()?,
                    epoch: c.epoch()?,
                    last_delivered: c.seq("last_delivered")?,
                    auth: c.auth()?,
                };
                if tag == TAG_RESUME {
                    ConnectData::Resume(r)
                } else {
                    ConnectData::Standby(r)
                }
            }
            tag => {
                return Err(WireError::UnknownTag {
                    what: "connect tag",
                    tag,
                })
            }
        };
        c.finish_padded("connect private data")?;
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// ACCEPT private data.

/// Acceptance of a [`Hello`] (target → initiator): the session is new.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The session (the Hello's).
    pub session: SessionId,
    /// The target's incarnation.
    pub incarnation: Incarnation,
    /// The secret that authenticates every later reconnection.
    pub secret: SessionSecret,
}

/// Acceptance of a [`Resume`] (target → initiator), authenticated with the
/// session secret so the initiator knows it reached the same target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Resumed {
    /// The session resumed.
    pub session: SessionId,
    /// The epoch of the new connection.
    pub epoch: Epoch,
    /// The target's incarnation.
    pub incarnation: Incarnation,
    /// The highest sequence number the target delivered from the initiator.
    pub last_delivered: Seq,
    /// `authenticator(secret, [b"resumed", session, epoch, last_delivered,
    /// incarnation])`.
    pub auth: [u8; AUTH_LEN],
}

impl Resumed {
    /// A `Resumed` with its authenticator computed under `secret`.
    pub fn sign(
        secret: &SessionSecret,
        session: SessionId,
        epoch: Epoch,
        incarnation: Incarnation,
        last_delivered: Seq,
    ) -> Resumed {
        Resumed {
            session,
            epoch,
            incarnation,
            last_delivered,
            auth: Self::tag(secret, session, epoch, incarnation, last_delivered),
        }
    }

    fn tag(
        secret: &SessionSecret,
        session: SessionId,
        epoch: Epoch,
        incarnation: Incarnation,
        last_delivered: Seq,
    ) -> [u8; AUTH_LEN] {
        auth::authenticator(
            secret,
            &[
                LABEL_RESUMED,
                &session.0.to_be_bytes(),
                &epoch.0.to_be_bytes(),
                &last_delivered.0.to_be_bytes(),
                &incarnation.0.to_be_bytes(),
            ],
        )
    }

    /// Whether `auth` was made under `secret` for exactly these fields
    /// (constant-time comparison).
    pub fn verify(&self, secret: &SessionSecret) -> bool {
        auth::verify(
            secret,
            &[
                LABEL_RESUMED,
                &self.session.0.to_be_bytes(),
                &self.epoch.0.to_be_bytes(),
                &self.last_delivered.0.to_be_bytes(),
                &self.incarnation.0.to_be_bytes(),
            ],
            &self.auth,
        )
    }
}

/// ACCEPT private data: the target's answer to a [`ConnectData`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcceptData {
    /// Answer to a Hello.
    Welcome(Welcome),
    /// Answer to a Resume.
    Resumed(Resumed),
}

impl From<Welcome> for AcceptData {
    fn from(w: Welcome) -> AcceptData {
        AcceptData::Welcome(w)
    }
}

impl From<Resumed> for AcceptData {
    fn from(r: Resumed) -> AcceptData {
        AcceptData::Resumed(r)
    }
}

impl AcceptData {
    /// Appends the encoding to `out` (at most [`MAX_ACCEPT_PRIVATE_DATA`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        match self {
            AcceptData::Welcome(w) => {
                out.push(TAG_WELCOME);
                put_u64(out, w.session.0);
                put_u64(out, w.incarnation.0);
                out.extend_from_slice(w.secret.as_bytes());
            }
            AcceptData::Resumed(r) => {
                out.push(TAG_RESUMED);
                put_u64(out, r.session.0);
                put_u32(out, r.epoch.0);
                put_u64(out, r.incarnation.0);
                put_u64(out, r.last_delivered.0);
                out.extend_from_slice(&r.auth);
            }
        }
    }

    /// The encoding as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        self.encode(&mut out);
        out
    }

    /// Decodes ACCEPT private data (zero padding after it is accepted).
    pub fn decode(data: &[u8]) -> Result<AcceptData, WireError> {
        let mut c = private_data(data, "accept private data", MAX_ACCEPT_PRIVATE_DATA)?;
        let out = match c.u8("accept tag")? {
            TAG_WELCOME => AcceptData::Welcome(Welcome {
                session: c.session()?,
                incarnation: c.incarnation()?,
                secret: SessionSecret::from_bytes(c.array::<SECRET_LEN>("secret")?),
            }),
            TAG_RESUMED => AcceptData::Resumed(Resumed {
                session: c.session()?,
                epoch: c.epoch()?,
                incarnation: c.incarnation()?,
                last_delivered: c.seq("last_delivered")?,
                auth: c.auth()?,
            }),
            tag => {
                return Err(WireError::UnknownTag {
                    what: "accept tag",
                    tag,
                })
            }
        };
        c.finish_padded("accept private data")?;
        Ok(out)
    }
}

// ---------------------------------------------------------------------------
// REJECT private data.

/// Why the target refused a connection. More reasons may come with a
/// later version of the handshake: a match needs a wildcard arm, and
/// [`RefuseReason::is_final`] says what to do with any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RefuseReason {
    /// The target does not know the session of a Resume (it was destroyed,
    /// or the target lost its state).
    UnknownSession,
    /// The Resume's authenticator does not verify under the session secret.
    BadAuthenticator,
    /// The Resume's epoch is not newer than the session's current epoch.
    StaleEpoch,
    /// The target does not speak the version of the connect data.
    UnsupportedVersion,
    /// The target cannot take the connection now; retry later.
    Busy,
    /// The target is shutting down; retrying this target is pointless.
    ShuttingDown,
}

impl RefuseReason {
    /// Every reason, in code order.
    pub const ALL: [RefuseReason; 6] = [
        RefuseReason::UnknownSession,
        RefuseReason::BadAuthenticator,
        RefuseReason::StaleEpoch,
        RefuseReason::UnsupportedVersion,
        RefuseReason::Busy,
        RefuseReason::ShuttingDown,
    ];

    /// The reason's byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            RefuseReason::UnknownSession => 1,
            RefuseReason::BadAuthenticator => 2,
            RefuseReason::StaleEpoch => 3,
            RefuseReason::UnsupportedVersion => 4,
            RefuseReason::Busy => 5,
            RefuseReason::ShuttingDown => 6,
        }
    }

    /// Whether retrying cannot help: the initiator's session fails on it
    /// instead of trying again. Final: `UnknownSession` (the target has no
    /// such session: it ended there, or the target is a new process),
    /// `BadAuthenticator` (the target's secret is not ours),
    /// `UnsupportedVersion` and `ShuttingDown`. Not final: `Busy` (the
    /// target holds a live session of that id) and `StaleEpoch` (the next
    /// attempt carries a newer epoch).
    pub fn is_final(self) -> bool {
        !matches!(self, RefuseReason::Busy | RefuseReason::StaleEpoch)
    }

    /// The reason with wire byte `code`, if any.
    pub fn from_code(code: u8) -> Option<RefuseReason> {
        RefuseReason::ALL.into_iter().find(|r| r.code() == code)
    }

    /// Lower-case words, for logs and messages.
    pub fn name(self) -> &'static str {
        match self {
            RefuseReason::UnknownSession => "unknown session",
            RefuseReason::BadAuthenticator => "bad authenticator",
            RefuseReason::StaleEpoch => "stale epoch",
            RefuseReason::UnsupportedVersion => "unsupported version",
            RefuseReason::Busy => "busy",
            RefuseReason::ShuttingDown => "shutting down",
        }
    }
}

impl std::fmt::Display for RefuseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Refusal of a connection (target → initiator).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Refused {
    /// Why the target refused; the initiator decides from it whether to
    /// retry.
    pub reason: RefuseReason,
}

/// REJECT private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RejectData {
    /// The target refused the connection.
    Refused(Refused),
}

impl From<Refused> for RejectData {
    fn from(r: Refused) -> RejectData {
        RejectData::Refused(r)
    }
}

impl RejectData {
    /// Appends the encoding to `out` (at most [`MAX_REJECT_PRIVATE_DATA`] bytes).
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.push(VERSION);
        match self {
            RejectData::Refused(r) => {
                out.push(TAG_REFUSED);
                out.push(r.reason.code());
            }
        }
    }

    /// The encoding as a new vector.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8);
        self.encode(&mut out);
        out
    }

    /// Decodes REJECT private data (zero padding after it is accepted).
    ///
    /// A reject the CM made itself (no listener, timeout) carries no private
    /// data and fails with [`WireError::NoData`].
    pub fn decode(data: &[u8]) -> Result<RejectData, WireError> {
        let mut c = private_data(data, "reject private data", MAX_REJECT_PRIVATE_DATA)?;
        let out = match c.u8("reject tag")? {
            TAG_REFUSED => {
                let code = c.u8("refuse reason")?;
                let reason = RefuseReason::from_code(code).ok_or(WireError::UnknownTag {
                    what: "refuse reason",
                    tag: code,
                })?;
                RejectData::Refused(Refused { reason })
            }
            tag => {
                return Err(WireError::UnknownTag {
                    what: "reject tag",
                    tag,
                })
            }
        };
        c.finish_padded("reject private data")?;
        Ok(out)
    }
}
