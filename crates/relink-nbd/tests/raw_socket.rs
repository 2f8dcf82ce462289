//! The server against a hand-written client on a raw socket: malformed
//! handshakes and requests, errors that keep the connection, out-of-order
//! replies, disconnect with requests in flight.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use relink_nbd::consts::*;
use relink_nbd::handshake::OptionHeader;
use relink_nbd::reply::{OptionReply, SimpleReply};
use relink_nbd::request::RequestHeader;
use relink_nbd::{
    spawn_file_export, BlockOp, BlockReply, BlockRequest, BlockSizes, Export, ExportFlags,
    FileStore, Server, ServerConfig,
};
use tokio::runtime::Runtime;
use tokio::sync::mpsc;

const SIZE: u64 = 1 << 20;

struct Rig {
    rt: Runtime,
    server: Server,
    _dir: tempfile::TempDir,
}

fn rig(config: ServerConfig, extra: impl FnOnce() -> Vec<Export>) -> Rig {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = rt.block_on(async {
        let mut exports = Vec::new();
        for (name, ro) in [("disk", false), ("ro", true)] {
            let path = dir.path().join(name);
            std::fs::File::create(&path)
                .and_then(|f| f.set_len(SIZE))
                .expect("image");
            let store = FileStore::open(&path, ro).expect("open");
            exports.push(spawn_file_export(name, store).expect("export"));
        }
        exports.extend(extra());
        Server::new(exports, config).expect("server")
    });
    Rig {
        rt,
        server,
        _dir: dir,
    }
}

impl Rig {
    /// A connected client socket, greeting already read and checked.
    fn connect(&self) -> UnixStream {
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        b.set_nonblocking(true).expect("nonblocking");
        let server = self.server.clone();
        self.rt.spawn(async move {
            let stream = tokio::net::UnixStream::from_std(b).expect("tokio stream");
            let _ = server.serve_connection(stream).await;
        });
        let mut a = a;
        a.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        let mut greeting = [0u8; 18];
        a.read_exact(&mut greeting).expect("greeting");
        assert_eq!(&greeting[0..8], b"NBDMAGIC");
        assert_eq!(&greeting[8..16], b"IHAVEOPT");
        assert_eq!(
            u16::from_be_bytes([greeting[16], greeting[17]]),
            NBD_FLAG_FIXED_NEWSTYLE | NBD_FLAG_NO_ZEROES
        );
        a
    }

    /// Connected, negotiated with NBD_OPT_GO on `name`; returns the
    /// transmission flags.
    fn go(&self, name: &str) -> (UnixStream, u16) {
        let mut s = self.connect();
        s.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
            .expect("flags");
        send_option(&mut s, NBD_OPT_GO, &go_data(name, &[]));
        let mut flags = None;
        loop {
            let r = read_option_reply(&mut s);
            assert_eq!(r.option, NBD_OPT_GO);
            match r.reply_type {
                NBD_REP_INFO if r.data[0..2] == NBD_INFO_EXPORT.to_be_bytes() => {
                    assert_eq!(&r.data[2..10], &SIZE.to_be_bytes());
                    flags = Some(u16::from_be_bytes([r.data[10], r.data[11]]));
                }
                NBD_REP_INFO => {}
                NBD_REP_ACK => break,
                other => panic!("unexpected reply {other:#x}"),
            }
        }
        (s, flags.expect("NBD_INFO_EXPORT sent"))
    }
}

fn go_data(name: &str, infos: &[u16]) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d.extend_from_slice(&(infos.len() as u16).to_be_bytes());
    for i in infos {
        d.extend_from_slice(&i.to_be_bytes());
    }
    d
}

fn send_option(s: &mut UnixStream, option: u32, data: &[u8]) {
    let h = OptionHeader {
        option,
        len: data.len() as u32,
    };
    s.write_all(&h.encode()).expect("option header");
    s.write_all(data).expect("option data");
}

fn read_option_reply(s: &mut UnixStream) -> OptionReply {
    let mut head = [0u8; 20];
    s.read_exact(&mut head).expect("option reply header");
    let len = u32::from_be_bytes(head[16..20].try_into().expect("4")) as usize;
    let mut all = head.to_vec();
    all.resize(20 + len, 0);
    s.read_exact(&mut all[20..]).expect("option reply data");
    OptionReply::parse(&all).expect("option reply").0
}

fn request(s: &mut UnixStream, kind: u16, flags: u16, cookie: u64, offset: u64, len: u32) {
    let h = RequestHeader {
        flags,
        kind,
        cookie,
        offset,
        len,
    };
    s.write_all(&h.encode()).expect("request");
}

fn reply(s: &mut UnixStream) -> SimpleReply {
    let mut b = [0u8; 16];
    s.read_exact(&mut b).expect("reply");
    SimpleReply::parse(&b).expect("simple reply")
}

/// One structured reply chunk: magic, flags, type, cookie and payload.
fn chunk(s: &mut UnixStream) -> (u32, u16, u16, u64, Vec<u8>) {
    let mut h = [0u8; 20];
    s.read_exact(&mut h).expect("chunk header");
    let len = u32::from_be_bytes(h[16..20].try_into().unwrap()) as usize;
    let mut payload = vec![0u8; len];
    s.read_exact(&mut payload).expect("chunk payload");
    (
        u32::from_be_bytes(h[0..4].try_into().unwrap()),
        u16::from_be_bytes([h[4], h[5]]),
        u16::from_be_bytes([h[6], h[7]]),
        u64::from_be_bytes(h[8..16].try_into().unwrap()),
        payload,
    )
}

fn assert_closed(s: &mut UnixStream) {
    let mut b = [0u8; 1];
    match s.read(&mut b) {
        Ok(0) => {}
        Ok(_) => panic!("server sent more data instead of closing"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}

#[test]
fn write_then_read_round_trips_and_flags_match_the_export() {
    let rig = rig(ServerConfig::default(), Vec::new);
    let (mut s, flags) = rig.go("disk");
    for bit in [
        NBD_FLAG_HAS_FLAGS,
        NBD_FLAG_SEND_FLUSH,
        NBD_FLAG_SEND_FUA,
        NBD_FLAG_SEND_TRIM,
        NBD_FLAG_SEND_WRITE_ZEROES,
        NBD_FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(flags & bit, 0, "flag {bit:#x} missing");
    }
    assert_eq!(flags & NBD_FLAG_READ_ONLY, 0);
    request(&mut s, NBD_CMD_WRITE, NBD_CMD_FLAG_FUA, 1, 4096, 8);
    s.write_all(b"relink!!").expect("payload");
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 1
        }
    );
    request(&mut s, NBD_CMD_READ, 0, 2, 4096, 8);
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 2
        }
    );
    let mut data = [0u8; 8];
    s.read_exact(&mut data).expect("data");
    assert_eq!(&data, b"relink!!");
    request(
        &mut s,
        NBD_CMD_WRITE_ZEROES,
        NBD_CMD_FLAG_NO_HOLE,
        3,
        4096,
        4,
    );
    assert_eq!(reply(&mut s).error, 0);
    request(&mut s, NBD_CMD_FLUSH, 0, 4, 0, 0);
    assert_eq!(reply(&mut s).error, 0);
    request(&mut s, NBD_CMD_READ, 0, 5, 4096, 8);
    assert_eq!(reply(&mut s).error, 0);
    s.read_exact(&mut data).expect("data");
    assert_eq!(&data, b"\0\0\0\0nk!!");
    request(&mut s, NBD_CMD_DISC, 0, 6, 0, 0);
    assert_closed(&mut s);
}

#[test]
fn bad_request_magic_ends_the_connection() {
    let rig = rig(ServerConfig::default(), Vec::new);
    let (mut s, _) = rig.go("disk");
    let mut h = RequestHeader {
        flags: 0,
        kind: NBD_CMD_READ,
        cookie: 1,
        offset: 0,
        len: 512,
    }
    .encode();
    h[0] ^= 0xff;
    s.write_all(&h).expect("request");
    assert_closed(&mut s);
}

#[test]
fn out_of_range_requests_get_errors_and_the_connection_continues() {
    let rig = rig(ServerConfig::default(), Vec::new);
    let (mut s, _) = rig.go("disk");
    // read past the end: EINVAL
    request(&mut s, NBD_CMD_READ, 0, 1, SIZE - 512, 4096);
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: NBD_EINVAL,
            cookie: 1
        }
    );
    // offset + len overflows u64: EINVAL
    request(&mut s, NBD_CMD_READ, 0, 2, u64::MAX - 10, 4096);
    assert_eq!(reply(&mut s).error, NBD_EINVAL);
    // write past the end: ENOSPC, and its payload is consumed
    request(&mut s, NBD_CMD_WRITE, 0, 3, SIZE - 2, 4);
    s.write_all(b"abcd").expect("payload");
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: NBD_ENOSPC,
            cookie: 3
        }
    );
    request(&mut s, NBD_CMD_TRIM, 0, 4, SIZE, 1);
    assert_eq!(reply(&mut s).error, NBD_ENOSPC);
    // unknown command and unknown flag: EINVAL
    request(&mut s, 99, 0, 5, 0, 0);
    assert_eq!(reply(&mut s).error, NBD_EINVAL);
    request(&mut s, NBD_CMD_READ, 1 << 12, 6, 0, 512);
    assert_eq!(reply(&mut s).error, NBD_EINVAL);
    // still in step: a good read works
    request(&mut s, NBD_CMD_READ, 0, 7, SIZE - 512, 512);
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 7
        }
    );
    let mut data = vec![0u8; 512];
    s.read_exact(&mut data).expect("data");
    assert!(data.iter().all(|&b| b == 0));
}

#[test]
fn oversize_requests_are_refused_and_the_connection_goes_on() {
    let config = ServerConfig::default().with_max_payload(64 * 1024);
    let rig = rig(config, Vec::new);
    let (mut s, _) = rig.go("disk");
    // a read of 4 GiB - 1: EINVAL, nothing allocated for it
    request(&mut s, NBD_CMD_READ, 0, 1, 0, u32::MAX);
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: NBD_EINVAL,
            cookie: 1
        }
    );
    // an oversize write: its payload is read (and dropped, never held)
    // before the refusal, as the protocol has it: a client such as libnbd
    // takes a reply to a request it is still sending for a broken server
    // and drops the connection
    request(&mut s, NBD_CMD_WRITE, 0, 2, 0, 256 * 1024);
    s.write_all(&vec![0x5a; 128 * 1024])
        .expect("half the payload");
    s.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .expect("timeout");
    let mut early = [0u8; 1];
    match s.read(&mut early) {
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) => {}
        other => panic!("the server answered before the payload was all sent: {other:?}"),
    }
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(&vec![0x5a; 128 * 1024])
        .expect("the rest of the payload");
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: NBD_EINVAL,
            cookie: 2
        }
    );
    // the next requests on the same connection are served
    request(&mut s, NBD_CMD_WRITE, 0, 3, 4096, 4096);
    s.write_all(&[0x33; 4096]).expect("payload");
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 3
        }
    );
    request(&mut s, NBD_CMD_READ, 0, 4, 0, 8192);
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: 0,
            cookie: 4
        }
    );
    let mut data = vec![0u8; 8192];
    s.read_exact(&mut data).expect("data");
    assert!(
        data[..4096].iter().all(|&b| b == 0),
        "the refused write must not land"
    );
    assert!(data[4096..].iter().all(|&b| b == 0x33), "the next one does");
}

#[test]
fn read_only_export_refuses_modifications_with_eperm() {
    let rig = rig(ServerConfig::default(), Vec::new);
    let (mut s, flags) = rig.go("ro");
    assert_ne!(flags & NBD_FLAG_READ_ONLY, 0);
    assert_eq!(flags & (NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES), 0);
    request(&mut s, NBD_CMD_WRITE, 0, 1, 0, 4);
    s.write_all(b"nope").expect("payload");
    assert_eq!(
        reply(&mut s),
        SimpleReply {
            error: NBD_EPERM,
            cookie: 1
        }
    );
    request(&mut s, NBD_CMD_TRIM, 0, 2, 0, 4096);
    assert_eq!(reply(&mut s).error, NBD_EPERM);
    request(&mut s, NBD_CMD_WRITE_ZEROES, 0, 3, 0, 4096);
    assert_eq!(reply(&mut s).error, NBD_EPERM);
    request(&mut s, NBD_CMD_READ, 0, 4, 0, 4);
    assert_eq!(reply(&mut s).error, 0);
    let mut data = [0u8; 4];
    s.read_exact(&mut data).expect("data");
    assert_eq!(data, [0u8; 4]);
}

fn answer(req: BlockRequest) {
    let reply = match req.op {
        BlockOp::Read { offset, len } => BlockReply::Data(vec![offset as u8; len as usize]),
        _ => BlockReply::Done,
    };
    let _ = req.reply.send(Ok(reply));
}

/// A backend that holds its first request, answers the second at once, and
/// answers the first when the third arrives; later ones at once.
fn reversing_export() -> Vec<Export> {
    let (tx, mut rx) = mpsc::channel::<BlockRequest>(8);
    tokio::spawn(async move {
        let Some(first) = rx.recv().await else { return };
        let Some(second) = rx.recv().await else {
            return;
        };
        answer(second);
        let Some(third) = rx.recv().await else { return };
        answer(first);
        answer(third);
        while let Some(req) = rx.recv().await {
            answer(req);
        }
    });
    vec![Export::new("reverse", SIZE, ExportFlags::read_only(), tx)]
}

#[test]
fn replies_go_out_as_the_backend_completes_them() {
    let rig = rig(ServerConfig::default(), reversing_export);
    let mut s = rig.connect();
    s.write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("flags");
    // NBD_OPT_EXPORT_NAME without NO_ZEROES: size, flags, 124 zeroes
    send_option(&mut s, NBD_OPT_EXPORT_NAME, b"reverse");
    let mut b = [0u8; 8 + 2 + 124];
    s.read_exact(&mut b).expect("export reply");
    assert_eq!(&b[0..8], &SIZE.to_be_bytes());
    assert!(b[10..].iter().all(|&z| z == 0));
    request(&mut s, NBD_CMD_READ, 0, 1, 1, 4);
    request(&mut s, NBD_CMD_READ, 0, 2, 2, 4);
    let mut data = [0u8; 4];
    // the first is still held by the backend: the second's reply comes first
    assert_eq!(reply(&mut s).cookie, 2, "second request answered first");
    s.read_exact(&mut data).expect("data");
    assert_eq!(data, [2; 4]);
    request(&mut s, NBD_CMD_READ, 0, 3, 3, 4);
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = reply(&mut s);
        s.read_exact(&mut data).expect("data");
        assert_eq!(data, [r.cookie as u8; 4]);
        got.push(r.cookie);
    }
    got.sort_unstable();
    assert_eq!(got, [1, 3]);
    // requests in flight at NBD_CMD_DISC are answered before the close
    request(&mut s, NBD_CMD_READ, 0, 4, 4, 4);
    request(&mut s, NBD_CMD_READ, 0, 5, 5, 4);
    request(&mut s, NBD_CMD_DISC, 0, 6, 0, 0);
    let mut cookies = Vec::new();
    for _ in 0..2 {
        cookies.push(reply(&mut s).cookie);
        s.read_exact(&mut data).expect("data");
    }
    cookies.sort_unstable();
    assert_eq!(cookies, [4, 5]);
    assert_closed(&mut s);
}

#[test]
fn handshake_options_errors_and_list() {
    let rig = rig(ServerConfig::default(), Vec::new);
    // unknown client flags: closed
    let mut s = rig.connect();
    s.write_all(&0x8000_0001u32.to_be_bytes()).expect("flags");
    assert_closed(&mut s);

    let mut s = rig.connect();
    s.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .expect("flags");
    for opt in [NBD_OPT_STARTTLS, 4242] {
        send_option(&mut s, opt, &[1, 2, 3]);
        let r = read_option_reply(&mut s);
        assert_eq!((r.option, r.reply_type), (opt, NBD_REP_ERR_UNSUP));
    }
    // Metadata contexts are served; data that does not parse is invalid.
    send_option(&mut s, NBD_OPT_SET_META_CONTEXT, &[1, 2, 3]);
    let r = read_option_reply(&mut s);
    assert_eq!(
        (r.option, r.reply_type),
        (NBD_OPT_SET_META_CONTEXT, NBD_REP_ERR_INVALID)
    );
    // Structured replies are served, but the option carries no data.
    send_option(&mut s, NBD_OPT_STRUCTURED_REPLY, &[1, 2, 3]);
    let r = read_option_reply(&mut s);
    assert_eq!(
        (r.option, r.reply_type),
        (NBD_OPT_STRUCTURED_REPLY, NBD_REP_ERR_INVALID)
    );
    send_option(&mut s, NBD_OPT_LIST, b"x");
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ERR_INVALID);
    send_option(&mut s, NBD_OPT_GO, &go_data("missing", &[]));
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ERR_UNKNOWN);
    let mut truncated = go_data("disk", &[NBD_INFO_NAME]);
    truncated.pop();
    send_option(&mut s, NBD_OPT_INFO, &truncated);
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ERR_INVALID);
    send_option(&mut s, NBD_OPT_LIST, &[]);
    let mut names = Vec::new();
    loop {
        let r = read_option_reply(&mut s);
        if r.reply_type == NBD_REP_ACK {
            break;
        }
        assert_eq!(r.reply_type, NBD_REP_SERVER);
        let n = u32::from_be_bytes(r.data[0..4].try_into().expect("4")) as usize;
        names.push(String::from_utf8(r.data[4..4 + n].to_vec()).expect("utf-8"));
    }
    assert_eq!(names, ["disk", "ro"]);
    // NBD_OPT_INFO with a name request, then stay in the handshake
    send_option(&mut s, NBD_OPT_INFO, &go_data("ro", &[NBD_INFO_NAME]));
    let mut saw_name = false;
    loop {
        let r = read_option_reply(&mut s);
        match r.reply_type {
            NBD_REP_ACK => break,
            NBD_REP_INFO if r.data[0..2] == NBD_INFO_NAME.to_be_bytes() => {
                assert_eq!(&r.data[2..], b"ro");
                saw_name = true;
            }
            NBD_REP_INFO => {}
            other => panic!("unexpected {other:#x}"),
        }
    }
    assert!(saw_name);
    send_option(&mut s, NBD_OPT_ABORT, &[]);
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ACK);
    assert_closed(&mut s);

    // NBD_OPT_EXPORT_NAME of an unknown export: closed (no error reply exists)
    let mut s = rig.connect();
    s.write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("flags");
    send_option(&mut s, NBD_OPT_EXPORT_NAME, b"missing");
    assert_closed(&mut s);

    // an option longer than the limit: closed without reading it
    let mut s = rig.connect();
    s.write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("flags");
    let h = OptionHeader {
        option: NBD_OPT_GO,
        len: u32::MAX,
    };
    s.write_all(&h.encode()).expect("header");
    assert_closed(&mut s);
}

/// An export named "sect" of `SIZE` bytes with 512 / 4096 / 64 KiB block
/// sizes, on a file.
fn sector_export(dir: &std::path::Path) -> Export {
    let path = dir.join("sect");
    std::fs::File::create(&path)
        .and_then(|f| f.set_len(SIZE))
        .expect("image");
    let store = FileStore::open(&path, false).expect("open");
    spawn_file_export("sect", store)
        .expect("export")
        .with_block_sizes(BlockSizes::new(512, 4096, 64 * 1024))
}

#[test]
fn block_sizes_are_advertised_and_unaligned_requests_get_einval() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rig = rig(ServerConfig::default(), || vec![sector_export(dir.path())]);
    let mut s = rig.connect();
    s.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .expect("flags");
    // GO without asking for the block sizes: the client is told to ask.
    send_option(&mut s, NBD_OPT_GO, &go_data("sect", &[]));
    assert_eq!(
        read_option_reply(&mut s).reply_type,
        NBD_REP_ERR_BLOCK_SIZE_REQD
    );
    // GO asking for them: they are sent, then transmission.
    send_option(&mut s, NBD_OPT_GO, &go_data("sect", &[NBD_INFO_BLOCK_SIZE]));
    let mut sizes = None;
    loop {
        let r = read_option_reply(&mut s);
        match r.reply_type {
            NBD_REP_INFO if r.data[0..2] == NBD_INFO_BLOCK_SIZE.to_be_bytes() => {
                let n = |i: usize| u32::from_be_bytes(r.data[i..i + 4].try_into().expect("4"));
                sizes = Some((n(2), n(6), n(10)));
            }
            NBD_REP_INFO => {}
            NBD_REP_ACK => break,
            other => panic!("unexpected reply {other:#x}"),
        }
    }
    assert_eq!(sizes, Some((512, 4096, 64 * 1024)));
    // Unaligned offsets and lengths: EINVAL, and the connection goes on.
    for (cookie, offset, len) in [(1, 1, 512), (2, 0, 100), (3, 512, 513)] {
        request(&mut s, NBD_CMD_READ, 0, cookie, offset, len);
        let r = reply(&mut s);
        assert_eq!((r.cookie, r.error), (cookie, NBD_EINVAL));
    }
    // An unaligned write's payload is consumed: the stream stays in step.
    request(&mut s, NBD_CMD_WRITE, 0, 4, 0, 100);
    s.write_all(&[7u8; 100]).expect("payload");
    assert_eq!(reply(&mut s).error, NBD_EINVAL);
    request(&mut s, NBD_CMD_TRIM, 0, 5, 100, 512);
    assert_eq!(reply(&mut s).error, NBD_EINVAL);
    // Longer than the export's maximum: EINVAL.
    request(&mut s, NBD_CMD_READ, 0, 6, 0, 128 * 1024);
    assert_eq!(reply(&mut s).error, NBD_EINVAL);
    // Aligned requests work.
    request(&mut s, NBD_CMD_WRITE, 0, 7, 512, 1024);
    s.write_all(&[9u8; 1024]).expect("payload");
    assert_eq!(reply(&mut s).error, 0);
    request(&mut s, NBD_CMD_READ, 0, 8, 512, 1024);
    let r = reply(&mut s);
    assert_eq!((r.cookie, r.error), (8, 0));
    let mut data = vec![0u8; 1024];
    s.read_exact(&mut data).expect("data");
    assert_eq!(data, vec![9u8; 1024]);
}

#[test]
fn block_sizes_that_break_the_protocol_are_refused() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let (tx, _rx) = mpsc::channel(1);
    for (min, pref, max) in [(3, 4096, 8192), (512, 256, 8192), (512, 4096, 1000)] {
        let e = Export::new("x", SIZE, ExportFlags::read_write(), tx.clone())
            .with_block_sizes(BlockSizes::new(min, pref, max));
        let err = Server::new(vec![e], ServerConfig::default()).expect_err("refused");
        assert!(
            matches!(err, relink_nbd::ConfigError::BadBlockSizes { .. }),
            "{err:?}"
        );
    }
}

#[test]
fn garbage_in_a_handshake_ends_that_connection_and_others_go_on() {
    let rig = rig(ServerConfig::default(), Vec::new);
    let (mut good, _) = rig.go("disk");
    // Garbage as client flags.
    let mut a = rig.connect();
    a.write_all(&[0xab; 64]).expect("garbage");
    assert_closed(&mut a);
    // Valid flags, then garbage where an option header belongs.
    let mut b = rig.connect();
    b.write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("flags");
    b.write_all(b"this is not an NBD option header")
        .expect("garbage");
    assert_closed(&mut b);
    // An option announcing a huge length: closed unread.
    let mut c = rig.connect();
    c.write_all(&NBD_FLAG_C_FIXED_NEWSTYLE.to_be_bytes())
        .expect("flags");
    c.write_all(
        &OptionHeader {
            option: NBD_OPT_GO,
            len: u32::MAX,
        }
        .encode(),
    )
    .expect("header");
    assert_closed(&mut c);
    // The first client is still served.
    request(&mut good, NBD_CMD_WRITE, 0, 1, 4096, 512);
    good.write_all(&[5u8; 512]).expect("payload");
    assert_eq!(reply(&mut good).error, 0);
    request(&mut good, NBD_CMD_READ, 0, 2, 4096, 512);
    assert_eq!(reply(&mut good).error, 0);
    let mut data = vec![0u8; 512];
    good.read_exact(&mut data).expect("data");
    assert_eq!(data, vec![5u8; 512]);
}

/// A client beyond `max_connections` is closed as soon as it is accepted
/// (no greeting); once a served client leaves, the next is served.
#[test]
fn clients_beyond_max_connections_are_closed_at_once() {
    let r = rig(ServerConfig::default().with_max_connections(1), Vec::new);
    let path = r._dir.path().join("nbd.sock");
    let listener =
        r.rt.block_on(async { tokio::net::UnixListener::bind(&path) })
            .expect("bind");
    let server = r.server.clone();
    r.rt.spawn(async move {
        let _ = server.serve_unix(listener).await;
    });
    let connect = || {
        let s = UnixStream::connect(&path).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        s
    };
    let greeted = |s: &mut UnixStream| {
        let mut greeting = [0u8; 18];
        s.read_exact(&mut greeting).is_ok() && &greeting[0..8] == b"NBDMAGIC"
    };
    let mut first = connect();
    assert!(greeted(&mut first), "the first client is served");
    let mut second = connect();
    let mut buf = [0u8; 18];
    assert_eq!(
        second.read(&mut buf).unwrap_or(0),
        0,
        "the second client is closed without a greeting"
    );
    assert_eq!(r.server.connections(), 1);
    drop(first);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while r.server.connections() != 0 {
        assert!(std::time::Instant::now() < deadline, "the first never left");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut third = connect();
    assert!(
        greeted(&mut third),
        "a client is served again once one left"
    );
}

/// After `NBD_OPT_STRUCTURED_REPLY`, replies come as one chunk each with
/// `NBD_REPLY_FLAG_DONE`: a read's data at its offset, a write's `NONE`,
/// and an error with its number and a message in words.
#[test]
fn structured_replies_carry_data_at_its_offset_and_errors_with_words() {
    let rig = rig(ServerConfig::default(), Vec::new);
    let mut s = rig.connect();
    s.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .expect("flags");
    send_option(&mut s, NBD_OPT_STRUCTURED_REPLY, &[]);
    let r = read_option_reply(&mut s);
    assert_eq!(
        (r.option, r.reply_type),
        (NBD_OPT_STRUCTURED_REPLY, NBD_REP_ACK)
    );
    send_option(&mut s, NBD_OPT_GO, &go_data("ro", &[]));
    while read_option_reply(&mut s).reply_type != NBD_REP_ACK {}

    let request = |s: &mut UnixStream, kind: u16, cookie: u64, offset: u64, len: u32| {
        let h = RequestHeader {
            flags: 0,
            kind,
            cookie,
            offset,
            len,
        };
        s.write_all(&h.encode()).expect("request");
    };
    request(&mut s, NBD_CMD_READ, 7, 4096, 512);
    let (magic, flags, kind, cookie, payload) = chunk(&mut s);
    assert_eq!(
        (magic, flags, kind, cookie),
        (
            STRUCTURED_REPLY_MAGIC,
            NBD_REPLY_FLAG_DONE,
            NBD_REPLY_TYPE_OFFSET_DATA,
            7
        )
    );
    assert_eq!(u64::from_be_bytes(payload[0..8].try_into().unwrap()), 4096);
    assert_eq!(payload.len(), 8 + 512);

    // A write to the read-only export: refused, with words.
    request(&mut s, NBD_CMD_WRITE, 8, 0, 512);
    s.write_all(&[0u8; 512]).expect("payload");
    let (magic, flags, kind, cookie, payload) = chunk(&mut s);
    assert_eq!(
        (magic, flags, kind, cookie),
        (
            STRUCTURED_REPLY_MAGIC,
            NBD_REPLY_FLAG_DONE,
            NBD_REPLY_TYPE_ERROR,
            8
        )
    );
    assert_eq!(
        u32::from_be_bytes(payload[0..4].try_into().unwrap()),
        NBD_EPERM
    );
    let n = u16::from_be_bytes([payload[4], payload[5]]) as usize;
    let message = std::str::from_utf8(&payload[6..6 + n]).expect("UTF-8");
    assert_eq!(payload.len(), 6 + n);
    assert!(message.contains("read-only"), "{message:?}");

    request(&mut s, NBD_CMD_FLUSH, 9, 0, 0);
    let (_, flags, kind, cookie, payload) = chunk(&mut s);
    assert_eq!(
        (flags, kind, cookie),
        (NBD_REPLY_FLAG_DONE, NBD_REPLY_TYPE_NONE, 9)
    );
    assert!(payload.is_empty());
}

/// `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT` data: the
/// export's name and the queries.
fn meta_data(export: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = (export.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(export.as_bytes());
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&(q.len() as u32).to_be_bytes());
        d.extend_from_slice(q.as_bytes());
    }
    d
}

/// Block status, as a client meets it: selecting `base:allocation` needs
/// structured replies (`NBD_REP_ERR_INVALID` before them); a list shows it
/// with id 0, a selection with id 1, a malformed option is
/// `NBD_REP_ERR_INVALID` and an unknown export `NBD_REP_ERR_UNKNOWN`, the
/// handshake going on after each; a block status before a selection is
/// `EINVAL`; after one, the 1 MiB image written at 64 KiB shows a hole, the
/// data, a hole (each with its flags, the whole range covered), one
/// extent only with `NBD_CMD_FLAG_REQ_ONE`, and a range past the end is
/// `EINVAL`.
#[test]
fn block_status_needs_a_selected_context_and_reports_holes_and_data() {
    let rig = rig(ServerConfig::default(), Vec::new);
    // Data at 64 KiB..128 KiB of "disk".
    {
        let (mut s, _) = rig.go("disk");
        request(&mut s, NBD_CMD_WRITE, 0, 1, 64 << 10, 64 << 10);
        s.write_all(&vec![0x5a; 64 << 10]).expect("payload");
        assert_eq!(reply(&mut s).error, 0);
        request(&mut s, NBD_CMD_FLUSH, 0, 2, 0, 0);
        assert_eq!(reply(&mut s).error, 0);
    }
    // Before structured replies: no selection; and a block status then.
    let (mut s, _) = rig.go("disk");
    request(&mut s, NBD_CMD_BLOCK_STATUS, 0, 3, 0, 4096);
    assert_eq!(reply(&mut s).error, NBD_EINVAL, "no context selected");

    let mut s = rig.connect();
    s.write_all(&(NBD_FLAG_C_FIXED_NEWSTYLE | NBD_FLAG_C_NO_ZEROES).to_be_bytes())
        .expect("flags");
    send_option(
        &mut s,
        NBD_OPT_SET_META_CONTEXT,
        &meta_data("disk", &[BASE_ALLOCATION]),
    );
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ERR_INVALID);
    send_option(&mut s, NBD_OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ACK);
    send_option(&mut s, NBD_OPT_LIST_META_CONTEXT, &meta_data("disk", &[]));
    let r = read_option_reply(&mut s);
    assert_eq!(r.reply_type, NBD_REP_META_CONTEXT);
    assert_eq!(&r.data[0..4], &0u32.to_be_bytes(), "a list's id is 0");
    assert_eq!(&r.data[4..], BASE_ALLOCATION.as_bytes());
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ACK);
    send_option(&mut s, NBD_OPT_SET_META_CONTEXT, &[0, 0, 0, 9]);
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ERR_INVALID);
    send_option(
        &mut s,
        NBD_OPT_SET_META_CONTEXT,
        &meta_data("nope", &[BASE_ALLOCATION]),
    );
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ERR_UNKNOWN);
    send_option(
        &mut s,
        NBD_OPT_SET_META_CONTEXT,
        &meta_data("disk", &["qemu:dirty-bitmap:x", BASE_ALLOCATION]),
    );
    let r = read_option_reply(&mut s);
    assert_eq!(r.reply_type, NBD_REP_META_CONTEXT);
    assert_eq!(&r.data[0..4], &BASE_ALLOCATION_ID.to_be_bytes());
    assert_eq!(read_option_reply(&mut s).reply_type, NBD_REP_ACK);
    send_option(&mut s, NBD_OPT_GO, &go_data("disk", &[]));
    while read_option_reply(&mut s).reply_type != NBD_REP_ACK {}

    let chunk = |s: &mut UnixStream| {
        let (_, _, kind, _, payload) = chunk(s);
        (kind, payload)
    };
    let extents = |payload: &[u8]| -> Vec<(u32, u32)> {
        assert_eq!(&payload[0..4], &BASE_ALLOCATION_ID.to_be_bytes());
        payload[4..]
            .chunks_exact(8)
            .map(|d| {
                (
                    u32::from_be_bytes(d[0..4].try_into().unwrap()),
                    u32::from_be_bytes(d[4..8].try_into().unwrap()),
                )
            })
            .collect()
    };
    let (hole, data) = (NBD_STATE_HOLE | NBD_STATE_ZERO, 0);
    request(&mut s, NBD_CMD_BLOCK_STATUS, 0, 4, 0, SIZE as u32);
    let (kind, payload) = chunk(&mut s);
    assert_eq!(kind, NBD_REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(
        extents(&payload),
        [
            (64 << 10, hole),
            (64 << 10, data),
            (SIZE as u32 - (128 << 10), hole)
        ]
    );
    request(
        &mut s,
        NBD_CMD_BLOCK_STATUS,
        NBD_CMD_FLAG_REQ_ONE,
        5,
        32 << 10,
        96 << 10,
    );
    let (kind, payload) = chunk(&mut s);
    assert_eq!(kind, NBD_REPLY_TYPE_BLOCK_STATUS);
    assert_eq!(extents(&payload), [(32 << 10, hole)], "one extent asked");
    request(&mut s, NBD_CMD_BLOCK_STATUS, 0, 6, SIZE - 4096, 8192);
    let (kind, payload) = chunk(&mut s);
    assert_eq!(kind, NBD_REPLY_TYPE_ERROR);
    assert_eq!(&payload[0..4], &NBD_EINVAL.to_be_bytes(), "past the end");
}
