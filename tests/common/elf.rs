//! The dynamic section of an ELF file, as `readelf -d` shows it: the
//! library's SONAME (build.rs sets it at link time), what a program needs
//! and where it looks. And the SONAME link a build tree lacks: cargo leaves
//! only `libflowctrl.so`, while a program linked with `-lflowctrl` loads the
//! file named by the SONAME.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The values of `tag` (`SONAME`, `NEEDED`, `RUNPATH`, ...) in `file`'s
/// dynamic section; panics when readelf cannot read it.
pub fn dynamic(file: &Path, tag: &str) -> Vec<String> {
    let output = Command::new("readelf")
        .arg("-d")
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run readelf ({e}): install binutils"));
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "readelf -d {} failed:\n{text}{}",
        file.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    // " 0x000000000000000e (SONAME)             Library soname: [libflowctrl.so.0]"
    let tag = format!("({tag})");
    text.lines()
        .filter(|line| line.split_whitespace().nth(1) == Some(tag.as_str()))
        .filter_map(|line| {
            let value = line.split_once('[')?.1;
            Some(value.strip_suffix(']')?.to_string())
        })
        .collect()
}

/// The SONAME of `library`; panics when it has none.
pub fn soname(library: &Path) -> String {
    let names = dynamic(library, "SONAME");
    assert_eq!(names.len(), 1, "{} has no SONAME", library.display());
    names[0].clone()
}

/// `dir`, made to hold a link named by the SONAME of
/// `lib_dir/libflowctrl.so` to that file: the run-time directory (rpath) of
/// programs linked against a build tree. Safe to call from parallel tests.
pub fn soname_link_dir(lib_dir: &Path, dir: &Path) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let library = lib_dir.join("libflowctrl.so");
    let link = dir.join(soname(&library));
    std::fs::create_dir_all(dir).expect("create the SONAME link's directory");
    // A fresh link renamed over the old one: another test may be using it.
    let fresh = dir.join(format!(
        ".link-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::os::unix::fs::symlink(&library, &fresh).expect("make the SONAME link");
    std::fs::rename(&fresh, &link).expect("put the SONAME link in place");
    dir.to_path_buf()
}
