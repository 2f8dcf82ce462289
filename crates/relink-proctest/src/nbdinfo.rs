//! What `nbdinfo --map` printed (libnbd's tool, the client end-to-end
//! tests ask for an export's holes with).

/// The data extents (offset, length) of `map`, the output of
/// `nbdinfo --map`: one line per extent, "offset length type
/// description", type 0 data and 3 a hole that reads as zeros.
///
/// # Panics
/// Unless the extents start at 0, follow each other with no gap or
/// overlap and cover exactly `size` bytes, or on a type other than 0 and
/// 3 (the message quotes `map`).
#[must_use]
pub fn data_extents(map: &str, size: u64) -> Vec<(u64, u64)> {
    let mut data = Vec::new();
    let mut covered = 0u64;
    for line in map.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [offset, length, kind, ..] = f[..] else {
            continue;
        };
        let (offset, length): (u64, u64) = (
            offset.parse().expect("offset"),
            length.parse().expect("length"),
        );
        assert_eq!(offset, covered, "extents in order, no gap: {map}");
        covered += length;
        match kind {
            "0" => data.push((offset, length)),
            "3" => {}
            other => panic!("type {other} in {map}"),
        }
    }
    assert_eq!(covered, size, "the map covers the export: {map}");
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_and_holes_in_order() {
        let map = "         0     4096    3  hole,zero\n      4096     8192    0  data\n     12288     4096    3  hole,zero\n";
        assert_eq!(data_extents(map, 16384), [(4096, 8192)]);
        let gap =
            std::panic::catch_unwind(|| data_extents("0 4096 0 data\n8192 4096 0 data\n", 12288));
        assert!(gap.is_err(), "a gap is refused");
        let short = std::panic::catch_unwind(|| data_extents("0 4096 0 data\n", 8192));
        assert!(short.is_err(), "a map short of the size is refused");
    }
}
