#!/usr/bin/env python3
"""Writes crates/relink-ofi/src/ffi/nosys.rs from ffi/sys.rs: for every
libfabric ops table (`fi_ops*`), a const of it whose every entry answers
-FI_ENOSYS (NULL for the string ones). The provider's tables start from
these (`..DOMAIN_NOSYS`), so no entry libfabric's inline calls jump
through is ever NULL. Run by scripts/ofi-bindings.sh."""
import re, sys

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

lines = [
    "//! Ops tables whose every entry answers `-FI_ENOSYS`: the provider's",
    "//! own tables start from these, so no entry is NULL. Made by",
    "//! `scripts/ofi/nosys.py` from `sys.rs`; do not edit.",
    "",
    "#![allow(clippy::too_many_arguments, unused_variables, dead_code)]",
    "",
    "use super::sys::*;",
    "use std::os::raw::{c_char, c_int, c_void};",
    "",
]
for name, fields in tables:
    short = name[len('fi_ops'):].lstrip('_') or 'fid'
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
open(out, 'w').write("\n".join(lines))
