//! Names the shared library by its SONAME, puts a link of that name beside
//! it in the build tree, and generates the C header into OUT_DIR.
//! `include/flowctrl.h` is the committed copy; tests/header.rs fails when it
//! differs from this generation.

/// What a program linked with libflowctrl.so records, and so which file it
/// loads: `scripts/install.sh` installs `libflowctrl.so.<version>` under this
/// name. Its number is the C ABI's, not the crate's minor: sized structs let
/// a program built against an older 0.x header run on a newer library
/// (tests/c/compat_*.c), so it changes only when the ABI breaks.
const SONAME: &str = "libflowctrl.so.0";

fn main() {
    // An ELF linker's flag; the library is Linux-only. Not
    // `rustc-cdylib-link-arg`: cargo passes that to the cdylibs of
    // dependents too (cargo#9562), which would name the Python module
    // libflowctrl.so.0. This one stays in this package, whose test and bench
    // executables get the (unused) entry as well.
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-arg=-Wl,-soname,{SONAME}");
        soname_link();
    }
    // Without it (the header feature off, as for the Python module) cargo
    // would run this again, and rebuild the crate, whenever any file of the
    // package changed.
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "header")]
    generate_header();
}

/// `target/<profile>/libflowctrl.so.0 -> libflowctrl.so`: cargo leaves only
/// `libflowctrl.so`, and a program linked with `-lflowctrl` loads the file
/// its SONAME names, which `LD_LIBRARY_PATH=target/release` must find. The one file written outside OUT_DIR, in the
/// directory cargo puts the library in (three levels above OUT_DIR, for
/// any profile and target); relative, so it dangles only until the library
/// is linked, and follows the tree when it is moved.
fn soname_link() {
    let Some(out) = std::env::var_os("OUT_DIR") else {
        return;
    };
    let Some(profile) = std::path::Path::new(&out).ancestors().nth(3) else {
        return;
    };
    let link = profile.join(SONAME);
    if std::fs::read_link(&link).is_ok_and(|to| to == std::path::Path::new("libflowctrl.so")) {
        return;
    }
    let _ = std::fs::remove_file(&link);
    if let Err(e) = std::os::unix::fs::symlink("libflowctrl.so", &link) {
        println!("cargo:warning=cannot make {}: {e}", link.display());
    }
}

#[cfg(feature = "header")]
fn generate_header() {
    use std::path::PathBuf;

    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("flowctrl.h");
    // cbindgen reads only the C face, src/ffi and its submodules: the core's
    // public constants and types are not C's business, and a core change
    // cannot leak into the header.
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml"))
        .expect("cbindgen.toml is readable");
    let generated = cbindgen::Builder::new()
        .with_config(config)
        .with_src(crate_dir.join("src/ffi/mod.rs"))
        .generate();
    match generated {
        Ok(bindings) => {
            let mut text = Vec::new();
            bindings.write(&mut text);
            let text = String::from_utf8(text).expect("cbindgen writes UTF-8");
            let text = parenthesize_negative_defines(&untypedef_stats(&text));
            std::fs::write(&out, text).expect("OUT_DIR is writable");
        }
        // A syntax error in the crate is reported by rustc, better than here.
        Err(e) => println!("cargo:warning=cbindgen could not generate the header: {e}"),
    }
}

/// The function `fc_task_stats` fills a `struct fc_task_stats` (and `fc_pick`
/// a `struct fc_pick`): C lets a function and a struct tag share a name, but
/// not a function and a typedef, so those structs are declared by their tag
/// alone.
#[cfg(feature = "header")]
fn untypedef_stats(header: &str) -> String {
    let fixed = header
        .replace("typedef struct fc_task_stats {", "struct fc_task_stats {")
        .replace("} fc_task_stats;", "};")
        .replace("typedef struct fc_pick {", "struct fc_pick {")
        .replace("} fc_pick;", "};");
    assert_ne!(
        fixed, header,
        "cbindgen output changed: revisit untypedef_stats"
    );
    fixed
}

/// cbindgen writes `#define FC_RATE_UNSET -1.0`, which `x-FC_RATE_UNSET`
/// turns into `x--1.0`: a negative value gets the parentheses it needs.
#[cfg(feature = "header")]
fn parenthesize_negative_defines(header: &str) -> String {
    let mut out = String::with_capacity(header.len() + 16);
    for line in header.lines() {
        match line
            .strip_prefix("#define ")
            .and_then(|rest| rest.split_once(" -"))
        {
            Some((name, value)) if !value.contains(' ') => {
                out.push_str(&format!("#define {name} (-{value})"));
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}
