#![cfg(feature = "header")]
//! The committed C header must be exactly what cbindgen generates from the
//! current source (build.rs writes a fresh one into OUT_DIR).
//! `FLOWCTRL_BLESS_HEADER=1 cargo test --test header` updates the committed copy.

use std::path::Path;

#[test]
fn committed_header_is_fresh() {
    let fresh = include_str!(concat!(env!("OUT_DIR"), "/flowctrl.h"));
    let committed_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/flowctrl.h");
    if std::env::var_os("FLOWCTRL_BLESS_HEADER").is_some() {
        std::fs::write(&committed_path, fresh).unwrap();
    }
    let committed = std::fs::read_to_string(&committed_path).unwrap_or_default();
    assert!(
        committed == fresh,
        "include/flowctrl.h is stale: run `FLOWCTRL_BLESS_HEADER=1 cargo test --test header` and commit it"
    );
}

#[test]
fn header_versions_match_the_crate() {
    // The generated header; committed_header_is_fresh ties the committed one to it.
    let committed = include_str!(concat!(env!("OUT_DIR"), "/flowctrl.h"));
    let define = |name: &str| {
        committed
            .lines()
            .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} missing"))
            .trim()
            .to_string()
    };
    let version = format!(
        "{}.{}.{}",
        define("FC_VERSION_MAJOR"),
        define("FC_VERSION_MINOR"),
        define("FC_VERSION_PATCH")
    );
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    assert_eq!(
        define("FC_LAYOUT_VERSION"),
        flowctrl::LAYOUT_VERSION.to_string()
    );
    assert_eq!(define("FC_NAME_MAX"), "63");
}

#[test]
fn header_exports_only_flowctrl_names() {
    // cbindgen exports every public constant of the crate; internal ones must
    // be excluded in cbindgen.toml, or they leak into C's namespace.
    let header = include_str!(concat!(env!("OUT_DIR"), "/flowctrl.h"));
    for line in header.lines() {
        if let Some(rest) = line.strip_prefix("#define ") {
            let name = rest.split_whitespace().next().unwrap_or_default();
            assert!(
                name.starts_with("FC_") || name == "FLOWCTRL_H",
                "leaked: {line}"
            );
        }
    }
}
