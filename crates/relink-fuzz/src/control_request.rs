//! Feeds arbitrary bytes to relinkd's control protocol parser
//! (`parse_request`).
//!
//! Beyond "never panics", checks that a parsed request re-encodes to a
//! line that parses to the same request, and that every refusal is one
//! of the typed errors with a response kind.

use relinkd::control::protocol::{parse_request, ProtocolError, MAX_LINE};

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    match parse_request(data) {
        Ok(req) => {
            let line = req.to_line();
            let again = parse_request(line.as_bytes()).expect("a request's own line parses");
            assert_eq!(again, req);
        }
        Err(e) => {
            if data.len() <= MAX_LINE {
                assert!(!matches!(e, ProtocolError::TooLong { .. }));
            }
            let _ = e.kind();
            assert!(!e.to_string().is_empty());
        }
    }
}
