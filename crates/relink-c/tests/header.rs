//! librelink's headers, `include/relink.h` (the API) and
//! `include/relink_soft.h` (the soft fabric's fault hooks), are what
//! cbindgen makes of the crate today: a change to the exported API that did
//! not regenerate them fails here. `RELINK_BLESS=1 cargo test -p relink-c
//! --test header` rewrites them.
//!
//! One cbindgen run orders its output by kind — enums, opaque types, the
//! other types, then functions — so a header is made section by section,
//! one concept each: one cbindgen run per module of `src/` (its own file,
//! then those of its submodules), in the order [`HEADERS`] lists, each
//! section headed by the first paragraph of the module's docs, inside the
//! frame (preamble, include guard, includes, `extern "C"`) that the
//! header's cbindgen configuration gives. A section may use what an
//! earlier one declares.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A header and how it is made.
struct Header {
    /// Where it is, in the crate.
    file: &'static str,
    /// Its cbindgen configuration, in the crate: style, preamble, include
    /// guard, includes.
    config: &'static str,
    /// Its sections in order: the source files of each, in the crate —
    /// the module's own file first (its docs head the section), then its
    /// submodules', in the order cbindgen reads them: a section's
    /// functions come in that order, its types where they are first used.
    sections: &'static [&'static [&'static str]],
}

const HEADERS: [Header; 2] = [
    Header {
        file: "include/relink.h",
        config: "cbindgen.toml",
        sections: &[
            // First: every declaration after it returns a `relink_status`.
            &["src/status.rs"],
            &["src/node.rs"],
            &["src/soft_fabric.rs"],
            // Before the sessions: `relink_connect` takes options, and
            // `relink_accepted` has `RELINK_MAX_CONNECT_DATA` bytes.
            &["src/options.rs"],
            &["src/session.rs"],
            &["src/shared_receive.rs"],
            &["src/region.rs"],
            &[
                "src/ops.rs",
                "src/ops/op.rs",
                "src/ops/work_request.rs",
                "src/ops/per_kind.rs",
                "src/ops/post.rs",
                // `relink_room` after `relink_post`.
                "src/ops/submit.rs",
            ],
            // Before the outputs: `relink_output` carries a
            // `relink_received` and a `relink_written`.
            &["src/receives.rs"],
            &[
                "src/output.rs",
                "src/output/completion.rs",
                "src/output/event.rs",
                "src/output/poll.rs",
            ],
            &["src/policy.rs"],
            &["src/recovery.rs"],
        ],
    },
    Header {
        file: "include/relink_soft.h",
        config: "cbindgen_soft.toml",
        sections: &[&["src/soft_hooks.rs"]],
    },
];

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

/// The first paragraph of a source file's module docs, as C comment lines
/// between two rules.
fn heading(file: &Path) -> String {
    let source = read(file);
    let lines: Vec<&str> = source
        .lines()
        .map_while(|l| l.strip_prefix("//!"))
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(
        !lines.is_empty(),
        "{} has no module docs to head its section with",
        file.display()
    );
    let rule = format!("// {}", "-".repeat(74));
    let mut out = format!("{rule}\n");
    for l in lines {
        let _ = writeln!(out, "// {l}");
    }
    out + &rule
}

/// What cbindgen makes of a section's source files with the header's
/// style, without the frame.
fn section(config: &cbindgen::Config, files: &[PathBuf]) -> String {
    let mut config = config.clone();
    config.header = None;
    config.include_guard = None;
    config.pragma_once = false;
    config.autogen_warning = None;
    config.include_version = false;
    config.package_version = false;
    config.no_includes = true;
    config.sys_includes.clear();
    config.includes.clear();
    config.after_includes = None;
    config.trailer = None;
    config.cpp_compat = false;
    let mut builder = cbindgen::Builder::new().with_config(config);
    for file in files {
        // cbindgen reads each file as a crate root: it would also read a
        // submodule it declares from the file's own directory, where Rust
        // has none (a section lists its submodules' files itself).
        let dir = file.parent().expect("a source file is in src/");
        for line in read(file).lines() {
            let Some(name) = line.trim().strip_prefix("mod ") else {
                continue;
            };
            let name = name.trim_end_matches(';');
            assert!(
                !dir.join(format!("{name}.rs")).exists() && !dir.join(name).join("mod.rs").exists(),
                "{}'s `mod {name}` names a file cbindgen would read in its place: rename one",
                file.display()
            );
        }
        builder = builder.with_src(file);
    }
    let mut made = Vec::new();
    builder
        .generate()
        .unwrap_or_else(|e| panic!("cbindgen on {}: {e}", files[0].display()))
        .write(&mut made);
    String::from_utf8(made).expect("the header is UTF-8")
}

/// The header as cbindgen and its configuration make it now.
fn generate(h: &Header) -> String {
    let dir = crate_dir();
    let config = cbindgen::Config::from_file(dir.join(h.config))
        .unwrap_or_else(|e| panic!("{} parses: {e}", h.config));
    assert!(
        config.no_includes && config.after_includes.is_none() && config.trailer.is_none(),
        "{}: the frame made here has only `header`, `include_guard`, \
         `sys_includes`, `includes` and `cpp_compat`",
        h.config
    );
    let guard = config
        .include_guard
        .clone()
        .unwrap_or_else(|| panic!("{} names an include guard", h.config));
    let mut out = String::new();
    if let Some(preamble) = &config.header {
        let _ = writeln!(out, "{preamble}\n");
    }
    let _ = writeln!(out, "#ifndef {guard}\n#define {guard}\n");
    for i in &config.sys_includes {
        let _ = writeln!(out, "#include <{i}>");
    }
    for i in &config.includes {
        let _ = writeln!(out, "#include \"{i}\"");
    }
    if config.cpp_compat {
        out.push_str("\n#ifdef __cplusplus\nextern \"C\" {\n#endif  // __cplusplus\n");
    }
    for s in h.sections {
        let files: Vec<PathBuf> = s.iter().map(|f| dir.join(f)).collect();
        let body = section(&config, &files);
        let _ = write!(out, "\n{}\n\n{}\n", heading(&files[0]), body.trim());
    }
    if config.cpp_compat {
        out.push_str("\n#ifdef __cplusplus\n}  // extern \"C\"\n#endif  // __cplusplus\n");
    }
    let _ = writeln!(out, "\n#endif  /* {guard} */");
    out
}

#[test]
fn headers_are_current() {
    let bless = std::env::var_os("RELINK_BLESS").is_some();
    let mut stale = Vec::new();
    for h in &HEADERS {
        let made = generate(h);
        let path = crate_dir().join(h.file);
        if bless {
            std::fs::write(&path, &made).unwrap_or_else(|e| panic!("write {}: {e}", h.file));
        } else if std::fs::read_to_string(&path).unwrap_or_default() != made {
            stale.push(h.file);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?}: not what cbindgen makes of the crate now: \
         run `RELINK_BLESS=1 cargo test -p relink-c --test header` and commit them"
    );
}

/// Every source file that exports something to C is in exactly one
/// section of one header, and every file a section lists is a source
/// file: an item cannot fall out of the headers because its file is
/// missing from [`HEADERS`].
#[test]
fn every_exporting_file_is_one_section() {
    let mut files = Vec::new();
    let mut dirs = vec![crate_dir().join("src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("read src/") {
            let p = e.expect("a directory entry").path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                files.push(p);
            }
        }
    }
    let listed: Vec<PathBuf> = HEADERS
        .iter()
        .flat_map(|h| h.sections.iter().copied().flatten())
        .map(|s| crate_dir().join(s))
        .collect();
    for s in &listed {
        assert!(
            s.is_file(),
            "section file {} is no source file",
            s.display()
        );
        let times = listed.iter().filter(|x| *x == s).count();
        assert_eq!(times, 1, "{} is in sections {times} times", s.display());
    }
    for f in files {
        let text = read(&f);
        let exports = ["#[no_mangle]", "#[repr(C)]", "pub const ", "pub type "]
            .iter()
            .any(|m| text.contains(m));
        assert!(
            !exports || listed.contains(&f),
            "{} exports to C but is in no header's section: add it to HEADERS in tests/header.rs",
            f.display()
        );
    }
}

/// The code lines of a header: not its comments.
fn code(header: &str) -> impl Iterator<Item = &str> {
    header.lines().filter(|l| !l.trim_start().starts_with("//"))
}

fn words(line: &str) -> impl Iterator<Item = &str> {
    line.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.to_ascii_lowercase().starts_with("relink_"))
}

/// The names a header's code mentions.
fn mentioned(header: &str) -> BTreeSet<&str> {
    code(header).flat_map(words).collect()
}

/// The names a header declares: functions (`name(`), typedefs (`} name;`,
/// `typedef ... name;`), enum variants (`NAME = 1,`) and macros
/// (`#define NAME`).
fn declared(header: &str) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    for line in code(header) {
        let t = line.trim();
        if (t.starts_with('}') || t.starts_with("typedef ")) && t.ends_with(';') {
            names.extend(words(t).last());
        }
        if let Some(m) = t.strip_prefix("#define ") {
            names.extend(words(m).next());
        }
        for w in words(t) {
            let after = t[t.find(w).expect("a word of the line") + w.len()..].trim_start();
            if after.starts_with('(') || (t.starts_with(w) && after.starts_with('=')) {
                names.insert(w);
            }
        }
    }
    names
}

/// Every item a section's file exports — function, type, constant — is
/// declared in the section's header: cbindgen writes a type only if the
/// file's functions use it or the configuration's `[export] include`
/// names it.
#[test]
fn every_exported_item_is_declared() {
    for h in &HEADERS {
        let made = generate(h);
        let declared = declared(&made);
        for s in h.sections.iter().copied().flatten() {
            let source = read(&crate_dir().join(s));
            for line in source.lines() {
                let rest = ["pub unsafe extern \"C\" fn ", "pub extern \"C\" fn "]
                    .iter()
                    .chain(&["pub enum ", "pub struct ", "pub type ", "pub const "])
                    .find_map(|p| line.strip_prefix(p));
                let Some(rest) = rest else { continue };
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                assert!(
                    declared.contains(name.as_str()),
                    "{s} exports {name}, which {} does not declare: name it in `[export] include` of {}",
                    h.file,
                    h.config
                );
            }
        }
    }
}

/// `relink.h` mentions nothing `relink_soft.h` declares: the fault hooks
/// stay out of the production header.
#[test]
fn relink_h_has_no_fault_hook() {
    // As made now (`headers_are_current` holds the files to it).
    let main = generate(&HEADERS[0]);
    let soft = generate(&HEADERS[1]);
    let hooks = declared(&soft);
    for hook in [
        "relink_soft_fabric_fault",
        "relink_soft_fault",
        "RELINK_FAULT_RESET",
        "relink_soft_device",
        "relink_soft_device_op",
        "RELINK_DEVICE_RESET",
    ] {
        assert!(
            hooks.contains(hook),
            "relink_soft.h declares {hook}: {hooks:?}"
        );
    }
    let in_main: Vec<&str> = hooks.intersection(&mentioned(&main)).copied().collect();
    assert!(in_main.is_empty(), "relink.h mentions hooks: {in_main:?}");
}

/// The value of `#define name value` in a header.
fn define(header: &str, name: &str) -> Option<String> {
    code(header).find_map(|l| {
        let rest = l.trim().strip_prefix("#define ")?.strip_prefix(name)?;
        rest.starts_with(' ').then(|| rest.trim().to_string())
    })
}

/// The body of `typedef enum|struct { ... } name;` in a header: its code
/// lines.
fn typedef_body<'a>(header: &'a str, name: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = code(header).collect();
    let end = lines
        .iter()
        .position(|l| l.trim() == format!("}} {name};"))
        .unwrap_or_else(|| panic!("the header declares no {name}"));
    let start = lines[..end]
        .iter()
        .rposition(|l| l.starts_with("typedef "))
        .unwrap_or_else(|| panic!("{name} has no typedef"));
    lines[start + 1..end].to_vec()
}

/// An enum's `NAME = value` pairs, in order.
fn enum_values(header: &str, name: &str) -> Vec<(String, i64)> {
    typedef_body(header, name)
        .into_iter()
        .filter_map(|l| l.trim().trim_end_matches(',').split_once(" = "))
        .map(|(k, v)| {
            let v = v.parse().unwrap_or_else(|_| panic!("{name}: {k} = {v}"));
            (k.to_string(), v)
        })
        .collect()
}

/// The numbers C programs are built with stay theirs: event kinds and
/// standby loss causes keep their values, new ones come after (before the
/// catch-all `*_OTHER` = 99), and `relink_event`'s members keep their
/// order, the ones added last at its end.
#[test]
fn event_numbers_and_members_are_pinned() {
    let main = generate(&HEADERS[0]);
    let pinned = |name: &str, want: &[(&str, i64)]| {
        let got = enum_values(&main, name);
        let want: Vec<(String, i64)> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, want, "{name}: values changed (append, never renumber)");
    };
    pinned(
        "relink_event_kind",
        &[
            ("RELINK_EVENT_TRANSITION", 1),
            ("RELINK_EVENT_DEVICE_LOST", 2),
            ("RELINK_EVENT_RECOVERING", 3),
            ("RELINK_EVENT_RESUMED", 4),
            ("RELINK_EVENT_GAVE_UP", 5),
            ("RELINK_EVENT_REFUSED", 6),
            ("RELINK_EVENT_PEER_LOST", 7),
            ("RELINK_EVENT_DISCONNECTED", 8),
            ("RELINK_EVENT_ATTEMPT_FAILED", 9),
            ("RELINK_EVENT_AWAITING_DECISION", 10),
            ("RELINK_EVENT_QUIESCING", 11),
            ("RELINK_EVENT_SUSPENDED", 12),
            ("RELINK_EVENT_DRAIN_BLOCKED", 13),
            ("RELINK_EVENT_STANDBY_UP", 14),
            ("RELINK_EVENT_STANDBY_LOST", 15),
            ("RELINK_EVENT_WRITABLE", 16),
            ("RELINK_EVENT_OTHER", 99),
        ],
    );
    pinned(
        "relink_standby_loss",
        &[
            ("RELINK_STANDBY_NONE", 0),
            ("RELINK_STANDBY_SILENT", 1),
            ("RELINK_STANDBY_DOWN", 2),
            ("RELINK_STANDBY_RELEASED", 3),
            ("RELINK_STANDBY_OTHER", 99),
        ],
    );
    let members: Vec<String> = typedef_body(&main, "relink_event")
        .into_iter()
        .map(|l| {
            let decl = l.trim().trim_end_matches(';');
            let name = decl.rsplit(' ').next().expect("a member");
            name.split('[').next().expect("a name").to_string()
        })
        .collect();
    assert_eq!(
        members,
        [
            "kind",
            "from",
            "to",
            "attempt",
            "downtime_ns",
            "replayed",
            "retrying",
            "text",
            "standby_loss"
        ],
        "relink_event's members moved (add new ones at its end)"
    );
}

/// A struct's member names, in order (a pointer's without its `*`).
fn members(header: &str, name: &str) -> Vec<String> {
    typedef_body(header, name)
        .into_iter()
        .map(|l| {
            let decl = l.trim().trim_end_matches(';');
            let name = decl.rsplit(' ').next().expect("a member");
            let name = name.trim_start_matches('*');
            name.split('[').next().expect("a name").to_string()
        })
        .collect()
}

/// Status codes, outcomes and failure reasons keep their numbers (new
/// codes take new ones: one code per mistake, documented in the header),
/// and `relink_completion`'s members keep their order, those added later
/// (`executed` in its tail padding; `context`, `len`, `kind`) at its end.
/// Their offsets are pinned in `src/output/completion.rs`.
#[test]
fn statuses_outcomes_and_completion_members_are_pinned() {
    let main = generate(&HEADERS[0]);
    let pinned = |name: &str, want: &[(&str, i64)]| {
        let got = enum_values(&main, name);
        let want: Vec<(String, i64)> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, want, "{name}: values changed (append, never renumber)");
    };
    pinned(
        "relink_status",
        &[
            ("RELINK_OK", 0),
            ("RELINK_EMPTY", 1),
            ("RELINK_ERR_ARGUMENT", -1),
            ("RELINK_ERR_NO_SESSION", -2),
            ("RELINK_ERR_NO_REGION", -3),
            ("RELINK_ERR_SESSION", -4),
            ("RELINK_ERR_OPTIONS", -5),
            ("RELINK_ERR_PROVIDER", -6),
            ("RELINK_ERR_TRUNCATED", -7),
            ("RELINK_ERR_UNSUPPORTED", -8),
            ("RELINK_ERR_IO", -9),
            ("RELINK_ERR_ADDR_IN_USE", -10),
            ("RELINK_ERR_TOO_LARGE", -11),
            ("RELINK_ERR_RANGE", -12),
            ("RELINK_ERR_MISALIGNED", -13),
            ("RELINK_ERR_AGAIN", -14),
            ("RELINK_ERR_BUSY", -15),
            ("RELINK_ERR_INTERNAL", -100),
        ],
    );
    pinned(
        "relink_outcome",
        &[
            ("RELINK_OUTCOME_SUCCESS", 0),
            ("RELINK_OUTCOME_FAILED", 1),
            ("RELINK_OUTCOME_INDETERMINATE", 2),
        ],
    );
    pinned(
        "relink_op_error",
        &[
            ("RELINK_OP_NONE", 0),
            ("RELINK_OP_GAVE_UP", 1),
            ("RELINK_OP_FAST_FAIL", 2),
            ("RELINK_OP_PEER_LOST", 3),
            ("RELINK_OP_DISCONNECTED", 4),
            ("RELINK_OP_REMOTE", 5),
            ("RELINK_OP_TOO_LARGE_FOR_PEER", 6),
            ("RELINK_OP_OTHER", 99),
        ],
    );
    assert_eq!(
        members(&main, "relink_completion"),
        ["op", "outcome", "error", "replayed", "executed", "context", "len", "kind"],
        "relink_completion's members moved (add new ones at its end)"
    );
    // Every status has its name.
    for (code, _) in enum_values(&main, "relink_status") {
        assert!(
            read(&crate_dir().join("src/status.rs")).contains(&format!("c\"{code}\"")),
            "relink_status_name does not name {code}"
        );
    }
}

/// Operation kinds keep their numbers (`RELINK_OP_KIND_NONE` 0 for a work
/// request whose kind was not set, new kinds before the catch-all
/// `RELINK_OP_KIND_OTHER` = 99), and `relink_work_request`'s members keep
/// their order (a later librelink adds members at its end, read only when
/// a flag says so); their offsets are pinned in `src/ops/work_request.rs`.
#[test]
fn operation_kinds_and_work_request_members_are_pinned() {
    let main = generate(&HEADERS[0]);
    let got = enum_values(&main, "relink_op_kind");
    let want: Vec<(String, i64)> = [
        ("RELINK_OP_KIND_NONE", 0),
        ("RELINK_OP_KIND_MESSAGE", 1),
        ("RELINK_OP_KIND_WRITE", 2),
        ("RELINK_OP_KIND_READ", 3),
        ("RELINK_OP_KIND_FETCH_ADD", 4),
        ("RELINK_OP_KIND_CMP_SWAP", 5),
        ("RELINK_OP_KIND_FLUSH", 6),
        ("RELINK_OP_KIND_WRITE_IMM", 7),
        ("RELINK_OP_KIND_OTHER", 99),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), *v))
    .collect();
    assert_eq!(
        got, want,
        "relink_op_kind: values changed (append, never renumber)"
    );
    assert_eq!(
        members(&main, "relink_work_request"),
        [
            "kind", "flags", "context", "buf", "len", "region", "offset", "remote", "add",
            "compare", "swap", "sgl", "num_sge", "imm"
        ],
        "relink_work_request's members moved (add new ones at its end)"
    );
    assert_eq!(
        members(&main, "relink_sge"),
        ["region", "offset", "len"],
        "relink_sge's members moved"
    );
    // The flags and the list's limit keep their values (new flags take
    // new bits).
    for (name, value) in [
        ("RELINK_WR_FROM_REGION", "(1 << 0)"),
        ("RELINK_WR_SGL", "(1 << 1)"),
        ("RELINK_MAX_SGE", "4"),
    ] {
        assert_eq!(
            define(&main, name).as_deref(),
            Some(value),
            "{name}: its value changed"
        );
    }
    // The new calls are in the header, in their sections.
    let declared = declared(&main);
    for name in [
        "relink_post",
        "relink_room",
        "relink_options_set_max_outstanding",
        "relink_sge",
        "RELINK_WR_FROM_REGION",
        "RELINK_WR_SGL",
        "RELINK_MAX_SGE",
        "relink_write_imm",
    ] {
        assert!(declared.contains(name), "relink.h declares {name}");
    }
}

/// Posted receives and WRITE notices: the receive outcomes and the output
/// kinds keep their numbers (new ones before the catch-all `*_OTHER` =
/// 99), `relink_received`'s and `relink_written`'s members keep their
/// order, and `relink_output`'s members of the layout before them keep
/// theirs, `received` and `written` after them (its offsets are pinned in
/// `src/output/poll.rs`, the structs' in `src/receives.rs`).
#[test]
fn receives_written_and_output_members_are_pinned() {
    let main = generate(&HEADERS[0]);
    let pinned = |name: &str, want: &[(&str, i64)]| {
        let got = enum_values(&main, name);
        let want: Vec<(String, i64)> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, want, "{name}: values changed (append, never renumber)");
    };
    pinned(
        "relink_receive_outcome",
        &[
            ("RELINK_RECEIVE_NONE", 0),
            ("RELINK_RECEIVE_MESSAGE", 1),
            ("RELINK_RECEIVE_WRITTEN", 2),
            ("RELINK_RECEIVE_FLUSHED", 3),
            ("RELINK_RECEIVE_OTHER", 99),
        ],
    );
    pinned(
        "relink_output_kind",
        &[
            ("RELINK_OUTPUT_ACCEPTED", 1),
            ("RELINK_OUTPUT_EVENT", 2),
            ("RELINK_OUTPUT_COMPLETION", 3),
            ("RELINK_OUTPUT_DELIVERY", 4),
            ("RELINK_OUTPUT_RECEIVED", 5),
            ("RELINK_OUTPUT_WRITTEN", 6),
            ("RELINK_OUTPUT_OTHER", 99),
        ],
    );
    assert_eq!(
        members(&main, "relink_received"),
        [
            "context",
            "outcome",
            "region",
            "offset",
            "len",
            "truncated",
            "seq",
            "imm",
            "written_region",
            "written_offset",
            "written_len"
        ],
        "relink_received's members moved (add new ones at its end)"
    );
    assert_eq!(
        members(&main, "relink_written"),
        ["imm", "region", "offset", "len"],
        "relink_written's members moved (add new ones at its end)"
    );
    assert_eq!(
        members(&main, "relink_output"),
        [
            "kind",
            "session",
            "accepted",
            "event",
            "completion",
            "seq",
            "len",
            "received",
            "written"
        ],
        "relink_output's members moved (add new ones at its end)"
    );
    let declared = declared(&main);
    for name in [
        "relink_post_receive",
        "relink_poll_received",
        "relink_poll_written",
        "relink_received",
        "relink_written",
        "relink_receive_outcome",
    ] {
        assert!(declared.contains(name), "relink.h declares {name}");
    }
    // The section comes before the outputs, whose `relink_output` uses
    // its types.
    let at = |needle: &str| {
        main.find(needle)
            .unwrap_or_else(|| panic!("relink.h has no {needle}"))
    };
    assert!(at("} relink_received;") < at("} relink_output;"));
    assert!(at("} relink_written;") < at("} relink_output;"));
}

/// The shared receive queue's pool: its calls are declared in the
/// queues' section, and `relink_posted_buffer`'s members keep their order
/// (an array of them is `relink_take_shared_receives`' ABI: it never
/// grows; its offsets are pinned in `src/shared_receive.rs`).
#[test]
fn shared_receive_pool_is_declared_and_pinned() {
    let main = generate(&HEADERS[0]);
    assert_eq!(
        members(&main, "relink_posted_buffer"),
        ["context", "region", "len", "offset"],
        "relink_posted_buffer's members changed (it never grows: add a call)"
    );
    let declared = declared(&main);
    for name in [
        "relink_post_shared_receive",
        "relink_take_shared_receives",
        "relink_posted_buffer",
    ] {
        assert!(declared.contains(name), "relink.h declares {name}");
    }
    let at = |needle: &str| {
        main.find(needle)
            .unwrap_or_else(|| panic!("relink.h has no {needle}"))
    };
    // In the queues' section, which comes before the regions'.
    assert!(at("relink_shared_receive_new(") < at("relink_post_shared_receive("));
    assert!(at("relink_take_shared_receives(") < at("relink_register("));
}

/// Counters keep their numbers (`relink_session_counter`; new ones come
/// after), and `relink_counters`' members stay the first eight: its size
/// is the ABI, the counters added since are reached by number.
#[test]
fn counter_numbers_and_members_are_pinned() {
    let main = generate(&HEADERS[0]);
    let got = enum_values(&main, "relink_counter");
    let want: Vec<(String, i64)> = [
        "LOSSES",
        "ATTEMPTS",
        "RESUMES",
        "REPLAYED",
        "DEDUPLICATED",
        "DOWNTIME_NS",
        "DELIVERED",
        "PLANNED",
        "ADVERTS_SENT",
        "PACKED",
        "COMPLETED",
        "STANDBYS",
        "FAILOVERS",
        "STANDBYS_SILENT",
        "STANDBY_KEEPALIVES_SENT",
        "STANDBY_KEEPALIVES_RECEIVED",
        "SEND_COPIED_BYTES",
        "RECEIVE_COPIED_BYTES",
        "FETCHED",
        "FETCHES_REWOUND",
    ]
    .iter()
    .zip(0..)
    .map(|(k, v)| (format!("RELINK_COUNTER_{k}"), v))
    .collect();
    assert_eq!(
        got, want,
        "relink_counter: values changed (append, never renumber)"
    );
    assert_eq!(
        members(&main, "relink_counters"),
        [
            "losses",
            "attempts",
            "resumes",
            "replayed",
            "deduplicated",
            "downtime_ns",
            "delivered",
            "planned"
        ],
        "relink_counters' members changed (its size is the ABI: add counters to relink_counter)"
    );
}
