//! The file backend's operations directly (no server).

use relink_nbd::{BlockError, BlockOp, BlockReply, FileStore};

fn store(ro: bool) -> (tempfile::TempDir, FileStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("img");
    std::fs::write(&path, vec![0x77u8; 1 << 20]).expect("image");
    let s = FileStore::open(&path, ro).expect("open");
    (dir, s)
}

fn read(s: &FileStore, offset: u64, len: u32) -> Vec<u8> {
    match s.execute(BlockOp::Read { offset, len }).expect("read") {
        BlockReply::Data(d) => d,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn write_read_zero_trim_flush() {
    let (_d, s) = store(false);
    assert_eq!(s.size().expect("size"), 1 << 20);
    let w = BlockOp::Write {
        offset: 10,
        data: b"hello".to_vec(),
        fua: true,
    };
    assert_eq!(s.execute(w), Ok(BlockReply::Done));
    assert_eq!(read(&s, 10, 5), b"hello");
    for may_trim in [false, true] {
        let z = BlockOp::WriteZeroes {
            offset: 4096,
            len: 3 * 4096 + 17,
            fua: false,
            may_trim,
        };
        assert_eq!(s.execute(z), Ok(BlockReply::Done));
        assert!(read(&s, 4096, 3 * 4096 + 17).iter().all(|&b| b == 0));
        assert_eq!(read(&s, 4096 * 4 + 17, 1), [0x77]);
    }
    let t = BlockOp::Trim {
        offset: 65536,
        len: 65536,
        fua: false,
    };
    assert_eq!(s.execute(t), Ok(BlockReply::Done));
    assert_eq!(s.execute(BlockOp::Flush), Ok(BlockReply::Done));
    // a read past the end of the file is an error, not short data
    assert!(s
        .execute(BlockOp::Read {
            offset: (1 << 20) - 2,
            len: 4
        })
        .is_err());
}

#[test]
fn read_only_store_refuses_modifications() {
    let (_d, s) = store(true);
    let w = BlockOp::Write {
        offset: 0,
        data: vec![1],
        fua: false,
    };
    assert_eq!(s.execute(w), Err(BlockError::PermissionDenied));
    let z = BlockOp::WriteZeroes {
        offset: 0,
        len: 1,
        fua: false,
        may_trim: true,
    };
    assert_eq!(s.execute(z), Err(BlockError::PermissionDenied));
    assert_eq!(s.execute(BlockOp::Flush), Ok(BlockReply::Done));
    assert_eq!(read(&s, 0, 2), [0x77, 0x77]);
}
