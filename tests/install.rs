//! The C install as a C or C++ user meets it: runs `scripts/install.sh`
//! into a scratch prefix (`target/<profile>/install-test/<pid>/prefix`), checks
//! the files, the SONAME, and the version pkg-config and CMake report
//! against Cargo.toml's; then builds `tests/install/consumer.c` (and its C++
//! twin `consumer.cpp`, on `flowctrl.hpp`) against that prefix alone, with
//! CMake (`find_package(flowctrl)`, the shared and the static target) and
//! with make (`pkg-config --static`, the archive), and runs them.
//!
//! The script builds the release library: a minute or so the first time,
//! nothing when the build is fresh. cmake, pkg-config, make, readelf and a C
//! compiler must be on PATH (scripts/setup.sh installs them): a missing one
//! fails the tests, they are never skipped.

mod common;

use common::elf;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const MAJOR: &str = env!("CARGO_PKG_VERSION_MAJOR");
const MINOR: &str = env!("CARGO_PKG_VERSION_MINOR");

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `target/<profile>/install-test/<pid>`: this test process's files, left
/// for inspection. One directory per process: a runner that starts a
/// process per test (nextest) runs them side by side.
fn work_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/install-<hash>
    let profile = exe.ancestors().nth(2).expect("target/<profile>");
    profile
        .join("install-test")
        .join(std::process::id().to_string())
}

/// Runs `command`; fails with everything it printed unless it succeeds.
fn run(command: &mut Command) -> Output {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {command:?} ({e}): scripts/setup.sh installs it"));
    assert!(
        output.status.success(),
        "{command:?} failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// `scripts/install.sh` with `args`, one run at a time: each one runs cargo
/// and copies the libraries out of target/release.
fn install_script(args: &[&str], destdir_env: Option<&Path>) -> Output {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let mut command = Command::new("bash");
    command
        .arg(manifest().join("scripts/install.sh"))
        .args(args)
        .env_remove("DESTDIR");
    // What cargo sets for this test, some build scripts watch (ring's:
    // CARGO_PKG_NAME, CARGO_MANIFEST_DIR): left in, the script's cargo
    // would rebuild them instead of finding a build from a shell fresh.
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_BIN_",
            "CARGO_CRATE_",
        ]
        .iter()
        .any(|p| name.starts_with(p))
            || ["CARGO_PRIMARY_PACKAGE", "CARGO_TARGET_TMPDIR", "OUT_DIR"].contains(&&*name)
        {
            command.env_remove(&*name);
        }
    }
    if let Some(destdir) = destdir_env {
        command.env("DESTDIR", destdir);
    }
    run(&mut command)
}

/// The prefix `scripts/install.sh --prefix` filled, installed once for all
/// the tests here (a failure is reported to each).
fn installed() -> PathBuf {
    static PREFIX: Mutex<Option<Result<PathBuf, String>>> = Mutex::new(None);
    let mut prefix = PREFIX.lock().unwrap_or_else(PoisonError::into_inner);
    let result = prefix.get_or_insert_with(|| {
        let work = work_dir();
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("create the test's directory");
        let dir = work.join("prefix");
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(|| {
            install_script(&["--prefix", dir.to_str().expect("a UTF-8 path")], None)
        });
        match outcome {
            Ok(_) => {
                println!("installed in {:.1?}", started.elapsed());
                Ok(dir)
            }
            Err(panic) => Err(panic
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "scripts/install.sh failed".into())),
        }
    });
    match result {
        Ok(dir) => dir.clone(),
        Err(why) => panic!("the install failed:\n{why}"),
    }
}

/// Runs a consumer program on a scratch directory of its own; fails unless
/// it exits 0 having used a library of this crate's version.
fn run_consumer(binary: &Path) {
    let scratch = common::Scratch::new("install-consumer");
    // cargo's LD_LIBRARY_PATH names build trees: the program must find the
    // installed library by itself.
    let output = run(Command::new(binary)
        .arg(scratch.dir())
        .env_remove("LD_LIBRARY_PATH"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("version {VERSION}\n")) && stdout.contains("decisions ok"),
        "{} printed:\n{stdout}",
        binary.display()
    );
}

fn needed(binary: &Path) -> Vec<String> {
    elf::dynamic(binary, "NEEDED")
}

#[test]
fn installs_the_header_the_libraries_and_their_links() {
    let lib = installed().join("lib");
    for name in ["flowctrl.h", "flowctrl.hpp"] {
        let header = std::fs::read(installed().join("include").join(name)).expect("the header");
        assert!(
            header == std::fs::read(manifest().join("include").join(name)).unwrap(),
            "the installed header differs from include/{name}"
        );
    }

    let real = format!("libflowctrl.so.{VERSION}");
    let soname = format!("libflowctrl.so.{MAJOR}");
    let meta = std::fs::symlink_metadata(lib.join(&real)).expect("the shared library");
    assert!(meta.file_type().is_file(), "{real} is not a regular file");
    assert_eq!(elf::soname(&lib.join(&real)), soname, "the SONAME");
    for (link, target) in [
        (soname.as_str(), real.as_str()),
        ("libflowctrl.so", &soname),
    ] {
        let points_to = std::fs::read_link(lib.join(link))
            .unwrap_or_else(|e| panic!("{link} is not a link: {e}"));
        assert_eq!(points_to, Path::new(target), "{link}");
    }
    let archive = std::fs::read(lib.join("libflowctrl.a")).expect("the archive");
    assert!(
        archive.starts_with(b"!<arch>\n"),
        "libflowctrl.a is not an archive"
    );
}

#[test]
fn pkg_config_gives_the_crate_version_and_the_static_libraries() {
    let pc_dir = installed().join("lib/pkgconfig");
    // PKG_CONFIG_LIBDIR replaces the system's directories: nothing installed
    // elsewhere can answer.
    let pkg_config = |args: &[&str]| {
        let output = run(Command::new("pkg-config")
            .args(args)
            .arg("flowctrl")
            .env("PKG_CONFIG_LIBDIR", &pc_dir)
            .env_remove("PKG_CONFIG_PATH"));
        String::from_utf8(output.stdout).unwrap().trim().to_string()
    };
    assert_eq!(pkg_config(&["--modversion"]), VERSION);
    let lib = installed().join("lib");
    assert_eq!(
        pkg_config(&["--libs"]),
        format!("-L{} -lflowctrl", lib.display())
    );
    let flags = pkg_config(&["--libs", "--static"]);
    assert!(
        flags.contains("-lflowctrl ") && flags.contains("-lpthread"),
        "Libs.private missing: {flags}"
    );
}

#[test]
fn a_cmake_project_finds_it_and_links_either_library() {
    let prefix = installed();
    let build = work_dir().join("cmake");
    let configure = |build: &Path, want: &str| {
        let mut command = Command::new("cmake");
        command
            .arg("-S")
            .arg(manifest().join("tests/install/cmake"))
            .arg("-B")
            .arg(build)
            .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
            .arg(format!("-DFLOWCTRL_WANT={want}"))
            .env_remove("CMAKE_PREFIX_PATH");
        command
    };
    run(&mut configure(&build, &format!("{MAJOR}.{MINOR}")));
    let cache = std::fs::read_to_string(build.join("CMakeCache.txt")).unwrap();
    let found = format!(
        "flowctrl_DIR:PATH={}",
        prefix.join("lib/cmake/flowctrl").display()
    );
    assert!(
        cache.contains(&found),
        "find_package found another flowctrl"
    );
    let version = std::fs::read_to_string(build.join("flowctrl-version.txt")).unwrap();
    assert_eq!(version, VERSION, "flowctrl_VERSION");
    run(Command::new("cmake").arg("--build").arg(&build));

    let shared = build.join("consumer");
    assert!(needed(&shared).contains(&format!("libflowctrl.so.{MAJOR}")));
    // The loader takes the installed file, by the rpath CMake gave.
    let ldd = run(Command::new("ldd")
        .arg(&shared)
        .env_remove("LD_LIBRARY_PATH"));
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    let expected = format!(
        "libflowctrl.so.{MAJOR} => {}",
        prefix.join(format!("lib/libflowctrl.so.{MAJOR}")).display()
    );
    assert!(ldd.contains(&expected), "ldd {}:\n{ldd}", shared.display());
    run_consumer(&shared);

    let archived = build.join("consumer_static");
    let libs = needed(&archived);
    assert!(!libs.iter().any(|l| l.contains("flowctrl")), "{libs:?}");
    run_consumer(&archived);

    // The same from C++, on flowctrl.hpp.
    let shared = build.join("consumer_cpp");
    assert!(needed(&shared).contains(&format!("libflowctrl.so.{MAJOR}")));
    run_consumer(&shared);
    let archived = build.join("consumer_cpp_static");
    let libs = needed(&archived);
    assert!(!libs.iter().any(|l| l.contains("flowctrl")), "{libs:?}");
    run_consumer(&archived);

    // The version file refuses a newer minor: find_package must not pass
    // whatever is installed.
    let newer = format!("{MAJOR}.{}", MINOR.parse::<u32>().unwrap() + 1);
    let refused = configure(&work_dir().join("cmake-newer"), &newer)
        .output()
        .expect("run cmake");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains(&format!("version: {VERSION}")),
        "find_package(flowctrl {newer}) accepted {VERSION}:\n{stderr}"
    );
}

#[test]
fn a_makefile_links_the_archive_with_pkg_config() {
    let prefix = installed();
    let build = work_dir().join("make");
    std::fs::create_dir_all(&build).unwrap();
    run(Command::new("make")
        .arg("-f")
        .arg(manifest().join("tests/install/make/Makefile"))
        .arg(format!("O={}", build.display()))
        .env("PKG_CONFIG_LIBDIR", prefix.join("lib/pkgconfig"))
        .env_remove("PKG_CONFIG_PATH"));
    let binary = build.join("consumer");
    let libs = needed(&binary);
    assert!(!libs.iter().any(|l| l.contains("flowctrl")), "{libs:?}");
    run_consumer(&binary);
}

#[test]
fn destdir_stages_the_files_naming_the_prefix() {
    installed();
    let prefix = "/opt/flowctrl-install-test";
    let by_option = work_dir().join("stage-option");
    let by_env = work_dir().join("stage-env");
    install_script(
        &["--prefix", prefix, "--destdir", by_option.to_str().unwrap()],
        None,
    );
    install_script(&["--prefix", prefix], Some(&by_env));
    assert!(!Path::new(prefix).exists(), "{prefix} was written");
    for stage in [&by_option, &by_env] {
        let root = stage.join(prefix.trim_start_matches('/'));
        let pc = std::fs::read_to_string(root.join("lib/pkgconfig/flowctrl.pc"))
            .unwrap_or_else(|e| panic!("no flowctrl.pc under {}: {e}", stage.display()));
        assert!(pc.starts_with(&format!("prefix={prefix}\n")), "{pc}");
        for file in [
            "lib/pkgconfig/flowctrl.pc",
            "lib/cmake/flowctrl/flowctrlConfig.cmake",
            "lib/cmake/flowctrl/flowctrlConfigVersion.cmake",
        ] {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            assert!(
                !text.contains(stage.to_str().unwrap()),
                "{file} names the staging directory"
            );
        }
        let soname = format!("libflowctrl.so.{MAJOR}");
        assert!(root.join("lib").join(&soname).exists(), "{soname} missing");
        assert!(root.join("include/flowctrl.h").is_file());
    }
}

/// A program linked with `-lflowctrl` against the build tree runs with
/// `LD_LIBRARY_PATH=target/release`: build.rs leaves the link the SONAME
/// names (`libflowctrl.so.0 -> libflowctrl.so`) beside the library.
#[test]
fn a_program_linked_against_the_build_tree_runs_with_ld_library_path() {
    installed(); // the release build
    let exe = std::env::current_exe().expect("the test executable's path");
    let release = exe.ancestors().nth(3).expect("target").join("release");
    let library = release.join("libflowctrl.so");
    let link = release.join(elf::soname(&library));
    assert_eq!(
        std::fs::canonicalize(&link).ok(),
        std::fs::canonicalize(&library).ok(),
        "{} does not lead to {}",
        link.display(),
        library.display()
    );
    let dir = work_dir().join("build-tree");
    std::fs::create_dir_all(&dir).unwrap();
    let binary = dir.join("consumer");
    run(Command::new(std::env::var("CC").unwrap_or("cc".into()))
        .arg(manifest().join("tests/install/consumer.c"))
        .arg("-I")
        .arg(manifest().join("include"))
        .arg("-L")
        .arg(&release)
        .arg("-lflowctrl")
        .arg("-o")
        .arg(&binary));
    let scratch = common::Scratch::new("build-tree-consumer");
    let output = run(Command::new(&binary)
        .arg(scratch.dir())
        .env("LD_LIBRARY_PATH", &release));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("decisions ok"), "{stdout}");
}
