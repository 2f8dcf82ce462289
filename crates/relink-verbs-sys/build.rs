//! Generates bindings to the system's libibverbs and librdmacm.
//!
//! - The libraries and their include paths come from pkg-config
//!   (`libibverbs`, `librdmacm`; Debian: `libibverbs-dev librdmacm-dev`);
//!   they are linked dynamically.
//! - bindgen (libclang; Debian: `libclang-dev`) reads `wrapper.h` with an
//!   allow-list of exactly what relink uses.
//! - Many verbs are `static inline` in the headers (`ibv_post_send`,
//!   `ibv_poll_cq`, `ibv_alloc_mw`, ...): bindgen's `wrap_static_fns` writes
//!   a C file with one exported wrapper per inline function, compiled here
//!   with `cc` and linked statically. Note `ibv_query_port`: the exported
//!   symbol of that name is the old compatibility entry point; the header
//!   maps the name to the inline `___ibv_query_port`, which is the one bound.

use std::env;
use std::path::PathBuf;

/// Functions relink calls (regexes, anchored by bindgen).
const FUNCTIONS: &[&str] = &[
    // devices and contexts
    "ibv_get_device_list",
    "ibv_free_device_list",
    "ibv_get_device_name",
    "ibv_get_device_guid",
    "ibv_get_device_index",
    "ibv_open_device",
    "ibv_close_device",
    "ibv_query_device",
    "___ibv_query_port",
    "ibv_get_async_event",
    "ibv_ack_async_event",
    "ibv_event_type_str",
    "ibv_wc_status_str",
    // verbs objects
    "ibv_alloc_pd",
    "ibv_dealloc_pd",
    "ibv_create_comp_channel",
    "ibv_destroy_comp_channel",
    "ibv_create_cq",
    "ibv_destroy_cq",
    "ibv_get_cq_event",
    "ibv_ack_cq_events",
    "ibv_poll_cq",
    "ibv_req_notify_cq",
    "ibv_create_srq",
    "ibv_destroy_srq",
    "ibv_post_srq_recv",
    "ibv_reg_mr",
    "ibv_dereg_mr",
    "ibv_alloc_mw",
    "ibv_dealloc_mw",
    "ibv_bind_mw",
    "ibv_inc_rkey",
    "ibv_create_qp",
    "ibv_destroy_qp",
    "ibv_modify_qp",
    "ibv_query_qp",
    "ibv_post_send",
    "ibv_post_recv",
    // connection management
    "rdma_create_event_channel",
    "rdma_destroy_event_channel",
    "rdma_create_id",
    "rdma_destroy_id",
    "rdma_bind_addr",
    "rdma_listen",
    "rdma_resolve_addr",
    "rdma_resolve_route",
    "rdma_connect",
    "rdma_accept",
    "rdma_reject",
    "rdma_disconnect",
    "rdma_establish",
    "rdma_init_qp_attr",
    "rdma_get_cm_event",
    "rdma_ack_cm_event",
    "rdma_event_str",
    "rdma_get_devices",
    "rdma_free_devices",
    "rdma_get_src_port",
    "rdma_get_dst_port",
    "rdma_get_local_addr",
    "rdma_get_peer_addr",
];

/// Types (and the enums whose constants relink uses) not reached through a
/// function signature.
const TYPES: &[&str] = &[
    "ibv_wc_status",
    "ibv_wc_opcode",
    "ibv_wc_flags",
    "ibv_wr_opcode",
    "ibv_send_flags",
    "ibv_access_flags",
    "ibv_qp_state",
    "ibv_qp_attr_mask",
    "ibv_qp_type",
    "ibv_event_type",
    "ibv_mw_type",
    "ibv_port_state",
    "ibv_mtu",
    "rdma_cm_event_type",
    "rdma_port_space",
    "sockaddr_in",
    "sockaddr_in6",
    "sockaddr_storage",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=wrapper.h");
    let verbs = probe("libibverbs");
    let rdmacm = probe("librdmacm");
    let mut includes: Vec<PathBuf> = verbs.include_paths.clone();
    includes.extend(rdmacm.include_paths.iter().cloned());

    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let header = manifest.join("wrapper.h");
    // bindgen appends ".c".
    let wrappers = out.join("relink_verbs_inline");

    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_args(includes.iter().map(|p| format!("-I{}", p.display())))
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .derive_debug(false)
        .generate_comments(false)
        .layout_tests(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    for t in TYPES {
        builder = builder.allowlist_type(t);
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        panic!(
            "relink-verbs-sys: bindgen failed on {} ({e}); it needs libclang \
             (Debian: apt-get install libclang-dev clang)",
            header.display()
        )
    });
    bindings
        .write_to_file(out.join("bindings.rs"))
        .expect("write bindings.rs");

    let mut cc = cc::Build::new();
    cc.file(wrappers.with_extension("c"))
        .include(&manifest)
        .warnings(false);
    for p in &includes {
        cc.include(p);
    }
    cc.compile("relink_verbs_inline");
}

fn probe(name: &str) -> pkg_config::Library {
    pkg_config::Config::new()
        .cargo_metadata(true)
        .statik(false)
        .probe(name)
        .unwrap_or_else(|e| {
            panic!(
                "relink-verbs-sys: pkg-config cannot find {name} ({e}). Install rdma-core's \
                 development files (Debian/Ubuntu: apt-get install libibverbs-dev librdmacm-dev \
                 pkg-config), or build relink without the `rdma` feature."
            )
        })
}
