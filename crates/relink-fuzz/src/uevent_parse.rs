//! Feeds arbitrary bytes to the kernel uevent parser of `relink-devwatch`
//! (`ACTION@DEVPATH\0KEY=VALUE\0...`) and to its RDMA classification
//! (subsystems `infiniband` and `infiniband_verbs`).
//!
//! Beyond "never panics", checks the parser's guarantees: a non-empty
//! action, an absolute device path, non-empty keys, and `ACTION`/`DEVPATH`
//! variables that agree with the header.

use relink_devwatch::uevent::{classify, parse_uevent, UeventTarget};

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    let Ok(ev) = parse_uevent(data) else {
        return;
    };
    assert!(!ev.action.is_empty());
    assert!(ev.devpath.starts_with('/'));
    assert!(ev.vars.iter().all(|(k, _)| !k.is_empty()));
    assert!(ev.get("ACTION").is_none_or(|a| a == ev.action));
    assert!(ev.get("DEVPATH").is_none_or(|d| d == ev.devpath));
    if let Ok(Some(rdma)) = classify(&ev) {
        if let UeventTarget::Device { name } = &rdma.target {
            assert!(!name.is_empty() && !name.contains('/'));
        }
        let _ = rdma.to_string();
    }
}
