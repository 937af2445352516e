//! Generates the C header into OUT_DIR (cargo's rule: build scripts write
//! nowhere else). `include/flowctrl.h` is the committed copy; tests/header.rs
//! fails when it differs from this generation.

fn main() {
    #[cfg(feature = "header")]
    generate_header();
}

#[cfg(feature = "header")]
fn generate_header() {
    use std::path::PathBuf;

    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("flowctrl.h");
    // cbindgen reads the whole crate (a public constant anywhere is exported).
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable");
    match cbindgen::generate_with_config(&crate_dir, config) {
        Ok(bindings) => {
            let mut text = Vec::new();
            bindings.write(&mut text);
            let text = String::from_utf8(text).expect("cbindgen writes UTF-8");
            std::fs::write(&out, untypedef_stats(&text)).expect("OUT_DIR is writable");
        }
        // A syntax error in the crate is reported by rustc, better than here.
        Err(e) => println!("cargo:warning=cbindgen could not generate the header: {e}"),
    }
}

/// The function `fc_task_stats` fills a `struct fc_task_stats`: C lets a
/// function and a struct tag share a name, but not a function and a typedef,
/// so that one struct is declared by its tag alone.
#[cfg(feature = "header")]
fn untypedef_stats(header: &str) -> String {
    let fixed = header
        .replace("typedef struct fc_task_stats {", "struct fc_task_stats {")
        .replace("} fc_task_stats;", "};");
    assert_ne!(
        fixed, header,
        "cbindgen output changed: revisit untypedef_stats"
    );
    fixed
}
