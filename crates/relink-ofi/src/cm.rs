//! The provider's one message of its own: the acceptor's answer to a
//! connection request.
//!
//! libfabric's connection setup is a request with CM data, then an
//! accept or a reject that carries the acceptor's CM data. relink
//! carries the request's data in its handshake (a session's connect
//! data) and accepts every session itself, so the provider sends the
//! acceptor's answer as the session's first message from the accepting
//! side: `"RLFI"`, a kind byte (1 accept, 2 reject), then the CM data.
//! The connecting endpoint reads it before anything else (its
//! `FI_CONNECTED` or its rejection); every later message is the
//! application's. Being a relink message, it arrives exactly once across
//! any device loss.

#![forbid(unsafe_code)]

/// The most CM data bytes (`FI_OPT_CM_DATA_SIZE`): what relink's connect
/// data holds, for the request and the answer alike.
pub const CM_DATA_SIZE: usize = relink::MAX_CONNECT_DATA;

const MAGIC: &[u8; 4] = b"RLFI";
const ACCEPT: u8 = 1;
const REJECT: u8 = 2;

/// The acceptor's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// `fi_accept`, with its CM data.
    Accept(Vec<u8>),
    /// `fi_reject`, with its CM data.
    Reject(Vec<u8>),
}

/// Why a first message is not an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the acceptor's first message is not a relink provider answer ({0})")]
pub struct AnswerError(&'static str);

impl Answer {
    /// The message; `data` at most [`CM_DATA_SIZE`] (checked by the
    /// caller: `fi_accept`/`fi_reject` refuse more).
    pub fn encode(&self) -> Vec<u8> {
        let (kind, data) = match self {
            Answer::Accept(d) => (ACCEPT, d),
            Answer::Reject(d) => (REJECT, d),
        };
        let mut m = Vec::with_capacity(5 + data.len());
        m.extend_from_slice(MAGIC);
        m.push(kind);
        m.extend_from_slice(data);
        m
    }

    /// The answer in `m`, length-checked.
    pub fn decode(m: &[u8]) -> Result<Answer, AnswerError> {
        if m.len() < 5 {
            return Err(AnswerError("shorter than its header"));
        }
        if &m[..4] != MAGIC {
            return Err(AnswerError("no magic"));
        }
        let data = m[5..].to_vec();
        if data.len() > CM_DATA_SIZE {
            return Err(AnswerError("CM data over FI_OPT_CM_DATA_SIZE"));
        }
        match m[4] {
            ACCEPT => Ok(Answer::Accept(data)),
            REJECT => Ok(Answer::Reject(data)),
            _ => Err(AnswerError("unknown kind")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip_and_bad_ones_are_refused() {
        for a in [
            Answer::Accept(vec![]),
            Answer::Accept(vec![7; CM_DATA_SIZE]),
            Answer::Reject(b"no".to_vec()),
        ] {
            assert_eq!(Answer::decode(&a.encode()).unwrap(), a);
        }
        assert!(Answer::decode(b"RLF").is_err());
        assert!(Answer::decode(b"XLFI\x01").is_err());
        assert!(Answer::decode(b"RLFI\x03").is_err());
        let mut long = Answer::Accept(vec![]).encode();
        long.extend_from_slice(&[0; CM_DATA_SIZE + 1]);
        assert!(Answer::decode(&long).is_err());
    }
}
