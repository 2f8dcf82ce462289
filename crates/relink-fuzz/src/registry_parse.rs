//! Feeds arbitrary text to the soft device registry's file parser: the first
//! line is the file's stem (device name), the rest its contents. Whatever
//! parses must survive a write/parse round trip.

use relink_soft::registry;

/// Runs the target on one input: panics only when the code under test
/// breaks what this module checks (the crate's contract).
pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (stem, contents) = text.split_once('\n').unwrap_or((text, ""));
    if let Ok(dev) = registry::parse_device(stem, contents) {
        let written = registry::format_device(&dev);
        assert_eq!(
            registry::parse_device(stem, &written),
            Ok(dev),
            "device file does not round-trip"
        );
    }
    let _ = registry::parse_guid(contents);
}
