#!/usr/bin/env python3
"""Writes crates/relink-ofi/src/ffi/nosys/ from ffi/sys.rs: for every
libfabric ops table (`fi_ops*`), a const of it whose every entry answers
-FI_ENOSYS (NULL for the string ones). The provider's tables start from
these (`..DOMAIN_NOSYS`), so no entry libfabric's inline calls jump
through is ever NULL. One file per family of objects, as the provider's
own ffi files go; a table of no family stops the script (place it in
FAMILIES). Run by scripts/ofi-bindings.sh after bindgen:

    scripts/ofi/nosys.py SYS_RS OUT_DIR"""
import os, re, sys

# file -> (what it holds, the tables' short names)
FAMILIES = {
    'fabric': ('the fabric and every object', ['fid', 'fabric', 'wait', 'poll']),
    'queues': ('event queues, completion queues and counters', ['eq', 'cq', 'cntr']),
    'domain': ('domains, address vectors and memory regions', ['domain', 'av', 'mr']),
    'endpoint': ('endpoints, their messages and connection management', ['ep', 'msg', 'cm']),
    'data': ('RMA and tagged messages', ['rma', 'tagged']),
    'atomic': ('atomics', ['atomic']),
}

src, out = sys.argv[1], sys.argv[2]
s = open(src).read()
tables = []
for m in re.finditer(r'pub struct (fi_ops\w*) \{(.*?)\n\}', s, re.S):
    name, body = m.group(1), m.group(2)
    fields = re.findall(r'pub (\w+):\s*(.*?),\n(?=    pub |$)', body + '\n    pub ', re.S)
    if not fields:
        # An opaque table (fi_ops_collective): no entries to fill.
        continue
    tables.append((name, fields))

family_of = {t: f for f, (_, ts) in FAMILIES.items() for t in ts}
files = {f: [] for f in FAMILIES}
for name, fields in tables:
    short = name[len('fi_ops'):].lstrip('_') or 'fid'
    if short not in family_of:
        raise SystemExit(f"{name}: no family in FAMILIES of scripts/ofi/nosys.py")
    lines = files[family_of[short]]
    const = short.upper() + '_NOSYS'
    entries = []
    for f, t in fields:
        t = re.sub(r'\s+', ' ', t).strip()
        if f == 'size':
            entries.append(f"    size: std::mem::size_of::<{name}>(),")
            continue
        m = re.match(r'::std::option::Option< ?unsafe extern "C" fn ?\((.*)\)( -> (.*?))?,? ?>$', t)
        if not m:
            raise SystemExit(f"cannot read {name}.{f}: {t}")
        args, ret = m.group(1).strip().rstrip(','), (m.group(3) or '').strip()
        args = args.replace('::std::os::raw::', '')
        ret = ret.replace('::std::os::raw::', '')
        fn = f"{short}_{f}"
        if ret == 'c_int':
            body = "-(FI_ENOSYS as c_int)"
        elif ret == 'isize':
            body = "-(FI_ENOSYS as isize)"
        elif ret.startswith('*const'):
            body = "std::ptr::null()"
        elif ret in ('u64', 'usize'):
            body = "0"
        elif ret == '':
            body = ""
        else:
            raise SystemExit(f"unknown return {ret} in {name}.{f}")
        rets = f" -> {ret}" if ret else ""
        lines.append(f"extern \"C\" fn {fn}({args}){rets} {{ {body} }}")
        entries.append(f"    {f}: Some({fn}),")
    lines.append(f"/// `{name}` answering `-FI_ENOSYS` everywhere.")
    lines.append(f"pub const {const}: {name} = {name} {{")
    lines.extend(entries)
    lines.append("};")
    lines.append("")

os.makedirs(out, exist_ok=True)
for f, (what, _) in FAMILIES.items():
    body = files[f]
    uses = sorted({t for t in ('c_char', 'c_int', 'c_void') if re.search(rf'\b{t}\b', "\n".join(body))})
    head = [
        "//! Ops tables answering `-FI_ENOSYS` in every entry, for",
        f"//! {what}.",
        "//! Made by `scripts/ofi/nosys.py` from `sys.rs`; do not edit.",
        "",
        "#![allow(clippy::too_many_arguments, unused_variables, dead_code)]",
        "",
        "use super::super::sys::*;",
    ]
    if uses:
        head.append(f"use std::os::raw::{{{', '.join(uses)}}};")
    head.append("")
    open(os.path.join(out, f + '.rs'), 'w').write("\n".join(head + body))
mod = [
    "//! Ops tables whose every entry answers `-FI_ENOSYS`: the provider's",
    "//! own tables start from these, so no entry is NULL. Made by",
    "//! `scripts/ofi/nosys.py` from `sys.rs`, one file per family of",
    "//! objects; do not edit.",
    "",
]
mod += [f"mod {f};" for f in FAMILIES] + [""]
mod += [f"pub use {f}::*;" for f in FAMILIES] + [""]
open(os.path.join(out, 'mod.rs'), 'w').write("\n".join(mod))
