//! What a registry gets: the crate `cargo package` would upload and the
//! metadata crates.io and PyPI show. `cargo package --list` (no build, well
//! under a second) must hold what builds the library, the command and the C
//! header, the headers C and C++ users include, and the documents the
//! doctests read, and nothing of the repository's tests, benchmarks,
//! scripts, bindings or build output. The full check, which builds the
//! crate from the packaged sources, is `cargo publish --dry-run` (minutes):
//! docs/guide/install.md.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package's files, outside `src/`, that building it needs or a user
/// of it reads.
const TOP_FILES: [&str; 9] = [
    "build.rs",
    "LICENSE",
    "cbindgen.toml",
    "include/flowctrl.h",
    "include/flowctrl.hpp",
    "README.md",
    "CHANGELOG.md",
    "Cargo.toml",
    "Cargo.lock",
];

/// What cargo adds of its own: the manifest as written, and the commit
/// packaged (from a git checkout only).
const CARGO_ADDS: [&str; 2] = ["Cargo.toml.orig", ".cargo_vcs_info.json"];

/// An uncompressed package above this carries something it should not
/// (the sources are about 2 MB).
const MAX_BYTES: u64 = 4 << 20;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo package --list`: the package's files, relative to the root.
fn package_list() -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["package", "--list", "--allow-dirty", "--offline", "-p"])
        .arg("flowctrl")
        .current_dir(root())
        .output()
        .expect("run cargo package --list");
    assert!(
        output.status.success(),
        "cargo package --list failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .expect("paths are UTF-8")
        .lines()
        .map(str::to_string)
        .collect()
}

/// The files the crate's doctests include (`include_str!("../X")` in
/// src/lib.rs): the package needs them for `cargo test --doc`.
fn doctest_documents() -> Vec<String> {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    lib.lines()
        .filter_map(|l| l.split_once("include_str!(\"../"))
        .filter_map(|(_, rest)| rest.split_once('"'))
        .map(|(path, _)| path.to_string())
        .collect()
}

/// Every file under `dir`, relative to the root.
fn walk(dir: &Path, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            let rel = path.strip_prefix(root()).unwrap();
            out.push(rel.to_str().unwrap().to_string());
        }
    }
}

#[test]
fn the_package_holds_what_builds_and_nothing_else() {
    let listed = package_list();
    let set: BTreeSet<&str> = listed.iter().map(String::as_str).collect();

    let mut needed: Vec<String> = TOP_FILES.iter().map(|f| f.to_string()).collect();
    needed.extend(doctest_documents());
    walk(&root().join("src"), &mut needed);
    let missing: Vec<&String> = needed
        .iter()
        .filter(|f| !set.contains(f.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the package lacks {missing:?}: `include` in Cargo.toml"
    );

    let allowed: BTreeSet<&str> = needed
        .iter()
        .map(String::as_str)
        .chain(CARGO_ADDS)
        .collect();
    let extra: Vec<&str> = set.difference(&allowed).copied().collect();
    assert!(
        extra.is_empty(),
        "the package carries {extra:?}: `include` in Cargo.toml"
    );

    let bytes: u64 = listed
        .iter()
        .filter_map(|f| std::fs::metadata(root().join(f)).ok())
        .map(|m| m.len())
        .sum();
    assert!(
        bytes <= MAX_BYTES,
        "the package holds {bytes} bytes, more than {MAX_BYTES}"
    );
}

fn manifest(path: &str) -> toml::Table {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    text.parse().unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn string<'a>(table: &'a toml::Table, key: &str, file: &str) -> &'a str {
    table
        .get(key)
        .and_then(toml::Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| panic!("{file}: `{key}` is missing or empty"))
}

fn strings<'a>(table: &'a toml::Table, key: &str, file: &str) -> Vec<&'a str> {
    table
        .get(key)
        .and_then(toml::Value::as_array)
        .unwrap_or_else(|| panic!("{file}: `{key}` is missing"))
        .iter()
        .map(|v| v.as_str().expect("strings"))
        .collect()
}

/// `major.minor` of a version, for comparing.
fn minor(version: &str) -> (u32, u32) {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap_or(0))
}

#[test]
fn the_crate_says_what_crates_io_shows() {
    let file = "Cargo.toml";
    let manifest = manifest(file);
    let package = manifest["package"].as_table().unwrap();
    assert!(
        package.get("publish").is_none(),
        "{file}: publish is restricted"
    );
    assert!(string(package, "description", file).len() <= 200);
    assert_eq!(string(package, "license", file), "Apache-2.0");
    let readme = string(package, "readme", file);
    assert!(root().join(readme).is_file(), "{file}: no {readme}");

    // crates.io's rules: at most 5 keywords of at most 20 ASCII characters,
    // a letter first, then letters, digits, `-` or `_`.
    let keywords = strings(package, "keywords", file);
    assert!((1..=5).contains(&keywords.len()), "{keywords:?}");
    for k in keywords {
        let mut chars = k.chars();
        assert!(
            k.len() <= 20
                && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{file}: keyword {k:?}"
        );
    }
    let categories = strings(package, "categories", file);
    assert!((1..=5).contains(&categories.len()), "{categories:?}");

    // Edition 2024 needs Rust 1.85.
    let rust_version = string(package, "rust-version", file);
    assert_eq!(string(package, "edition", file), "2024");
    assert!(
        minor(rust_version) >= (1, 85),
        "rust-version {rust_version}"
    );
    assert!(
        package.get("include").is_some(),
        "{file}: no `include`: the package would take the whole repository"
    );
}

#[test]
fn the_python_package_says_what_pypi_shows() {
    let file = "bindings/python/pyproject.toml";
    let manifest = manifest(file);
    let project = manifest["project"].as_table().unwrap();
    assert_eq!(string(project, "name", file), "flowctrl");
    string(project, "description", file);
    let license = project["license"]
        .as_table()
        .and_then(|t| t.get("text"))
        .and_then(toml::Value::as_str);
    assert_eq!(license, Some("Apache-2.0"), "{file}: license");
    // The floor the abi3 wheel is built for (pyo3's abi3-py39).
    assert_eq!(string(project, "requires-python", file), ">=3.9");
    let readme = string(project, "readme", file);
    assert!(
        root().join("bindings/python").join(readme).is_file(),
        "{file}: no {readme}"
    );
    let classifiers = strings(project, "classifiers", file);
    for needed in [
        "License :: OSI Approved :: Apache Software License",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
    ] {
        assert!(classifiers.contains(&needed), "{file}: no {needed:?}");
    }
}
