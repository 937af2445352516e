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

/// The header without its comments (`/* */` and `//`), one line per line.
fn without_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("/*") {
        out.push_str(&rest[..start]);
        let end = rest[start..].find("*/").expect("comments are closed") + start + 2;
        // Keep the line structure.
        out.extend(rest[start..end].chars().filter(|c| *c == '\n'));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.lines()
        .map(|l| l.split("//").next().unwrap_or_default().trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The fields of each struct, by its name: `(name, ["uint32_t size;", ...])`.
fn structs(header: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in header.lines().map(str::trim) {
        if let Some((name, fields)) = current.as_mut() {
            if line.starts_with('}') {
                found.push((std::mem::take(name), std::mem::take(fields)));
                current = None;
            } else if !line.is_empty() {
                fields.push(line.to_string());
            }
        } else if let Some(rest) = line.strip_suffix(" {") {
            let name = rest
                .trim_start_matches("typedef ")
                .trim_start_matches("struct ");
            if rest.contains("struct ") {
                current = Some((name.to_string(), Vec::new()));
            }
        }
    }
    found
}

/// The function declarations, whitespace normalised.
fn declarations(header: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current = String::new();
    for line in header.lines().map(str::trim) {
        let starts = ["fc_status fc_", "void fc_", "const char *fc_"]
            .iter()
            .any(|p| line.starts_with(p));
        if starts || !current.is_empty() {
            current.push(' ');
            current.push_str(line);
            if line.ends_with(';') {
                found.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
                current.clear();
            }
        }
    }
    found
}

/// `tests/c/compat_v1.h` is the header a program built against the smallest
/// version of the sized structs saw (tests/c/compat_v1.c runs one). It is
/// frozen; the current header must stay compatible with it: the same
/// constants and statuses, each of its structs a prefix of the current one
/// (structs grow only at their end), and the same function declarations.
#[test]
fn header_keeps_the_v1_structs_as_prefixes() {
    let current = without_comments(include_str!(concat!(env!("OUT_DIR"), "/flowctrl.h")));
    let frozen_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/compat_v1.h");
    let frozen = without_comments(&std::fs::read_to_string(frozen_path).unwrap());
    let current_lines: Vec<&str> = current.lines().map(str::trim).collect();

    let mut defines = 0;
    for line in frozen.lines().map(str::trim) {
        let is_status = line.starts_with("FC_") && line.contains(" = ");
        if line.starts_with("#define FC_") || is_status {
            assert!(
                current_lines.contains(&line),
                "compat_v1.h has `{line}`, the header does not"
            );
            defines += 1;
        }
    }
    assert!(
        defines > 10,
        "compat_v1.h: constants and statuses not found"
    );

    let now = structs(&current);
    let then = structs(&frozen);
    assert_eq!(then.len(), 4, "compat_v1.h: structs not found");
    for (name, old_fields) in &then {
        let (_, new_fields) = now
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("struct {name} is gone from the header"));
        assert!(
            new_fields.starts_with(old_fields),
            "struct {name}: the v1 fields {old_fields:?} are not a prefix of {new_fields:?}"
        );
        if name == "fc_permit" {
            assert_eq!(old_fields, new_fields, "fc_permit never changes");
        }
    }

    let now = declarations(&current);
    let then = declarations(&frozen);
    assert!(then.len() > 10, "compat_v1.h: declarations not found");
    for declaration in &then {
        assert!(
            now.contains(declaration),
            "compat_v1.h declares `{declaration}`, the header does not"
        );
    }
}
