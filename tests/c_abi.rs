//! The C ABI as C and C++ programs see it: compiles `tests/c/abi_test.c`
//! (C99) and `tests/c/abi_test.cpp` (C++11) against `include/flowctrl.h`,
//! `tests/c/hpp_test.cpp` (C++17) against the RAII layer `include/flowctrl.hpp`
//! (with `$CXX`, and again with clang++ when it is installed),
//! and
//! `tests/c/compat_v1.c` against the frozen `tests/c/compat_v1.h` (a program
//! built against the smallest version of the sized structs) and
//! `tests/c/compat_v0_3.c` against the frozen `tests/c/flowctrl-0.3.0.h` (the
//! header of release 0.3.0, verbatim), links each once
//! with `libflowctrl.so` and once with `libflowctrl.a` (cargo builds both
//! with the lib, into `target/<profile>/deps`), and runs them. Then runs them
//! all again under AddressSanitizer and UBSan (`scripts/c-sanitizers.sh`),
//! when the compiler can build sanitized programs. `tests/c/log_test.c`
//! checks the log callback, and is run again with `FLOWCTRL_LOG` set, its
//! stderr read.
//!
//! The compilers are `$CC` and `$CXX`, else `cc` and `c++`. A missing compiler
//! fails the tests: the C ABI is part of the product, it is never skipped.
//! The second compiler of the C++ header, clang++, is the exception: its
//! tests say so and pass when it is missing (`scripts/setup.sh` installs
//! it).
//! Binaries and their output (`*.log`) go to `target/<profile>/c-tests/`,
//! the SONAME link the shared ones load to `c-tests/lib/`.

mod common;

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Longest a test program may run before it is killed as hung.
const TIMEOUT: Duration = Duration::from_secs(120);
/// The header must compile cleanly under the strictest usual settings.
const WARNINGS: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-pedantic"];

#[derive(Clone, Copy, Debug)]
enum Language {
    C,
    Cxx,
}

/// A test program: its source in `tests/c/`, and the header directory it is
/// compiled against.
#[derive(Clone, Copy, Debug)]
enum Program {
    /// `abi_test.c` against `include/flowctrl.h`.
    C,
    /// `abi_test.cpp` against `include/flowctrl.h`.
    Cxx,
    /// `hpp_test.cpp` against `include/flowctrl.hpp` (C++17).
    Hpp,
    /// `hpp_test.cpp` again, compiled by clang++ whatever `$CXX` names.
    HppClang,
    /// `compat_v1.c` against the frozen `tests/c/compat_v1.h`.
    CompatV1,
    /// `compat_v0_3.c` against the frozen `tests/c/flowctrl-0.3.0.h`.
    CompatV0_3,
    /// `share_v0_3.c` against the frozen 0.3.0 header: a process of that
    /// release on a table this build shares.
    ShareV0_3,
    /// `quota_worker.c`: a worker of the global-quota tests.
    QuotaWorker,
    /// `adaptive_test.c` against `include/flowctrl.h`.
    Adaptive,
    /// `records_test.c`: a task's record in a real Redis.
    Records,
    /// `key_records_test.c`: a keyed task's record and hot keys in a real Redis.
    KeyRecords,
    /// `config_test.c`: limits from a config file, edited while it runs.
    Config,
    /// `log_test.c`: the log callback and `FLOWCTRL_LOG`.
    Log,
}

impl Program {
    fn source(self) -> &'static str {
        match self {
            Program::C => "abi_test.c",
            Program::Cxx => "abi_test.cpp",
            Program::Hpp | Program::HppClang => "hpp_test.cpp",
            Program::CompatV1 => "compat_v1.c",
            Program::CompatV0_3 => "compat_v0_3.c",
            Program::ShareV0_3 => "share_v0_3.c",
            Program::QuotaWorker => "quota_worker.c",
            Program::Adaptive => "adaptive_test.c",
            Program::Records => "records_test.c",
            Program::KeyRecords => "key_records_test.c",
            Program::Config => "config_test.c",
            Program::Log => "log_test.c",
        }
    }

    fn language(self) -> Language {
        match self {
            Program::Cxx | Program::Hpp | Program::HppClang => Language::Cxx,
            Program::C
            | Program::CompatV1
            | Program::CompatV0_3
            | Program::ShareV0_3
            | Program::QuotaWorker
            | Program::Adaptive
            | Program::Records
            | Program::KeyRecords
            | Program::Config
            | Program::Log => Language::C,
        }
    }

    /// The directory of the header it includes.
    fn include_dir(self) -> &'static str {
        match self {
            Program::C
            | Program::Cxx
            | Program::Hpp
            | Program::HppClang
            | Program::QuotaWorker
            | Program::Adaptive
            | Program::Records
            | Program::KeyRecords
            | Program::Config
            | Program::Log => "include",
            // Only tests/c: the frozen headers, never include/flowctrl.h.
            Program::CompatV1 | Program::CompatV0_3 | Program::ShareV0_3 => "tests/c",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Program::C => "abi_test_c",
            Program::Cxx => "abi_test_cpp",
            Program::Hpp => "hpp_test",
            Program::HppClang => "hpp_test_clang",
            Program::CompatV1 => "compat_v1",
            Program::CompatV0_3 => "compat_v0_3",
            Program::ShareV0_3 => "share_v0_3",
            Program::QuotaWorker => "quota_worker",
            Program::Adaptive => "adaptive_test",
            Program::Records => "records_test",
            Program::KeyRecords => "key_records_test",
            Program::Config => "config_test",
            Program::Log => "log_test",
        }
    }

    /// The language standard it is compiled as: its language's, but C++17
    /// for the header-only C++ layer.
    fn standard(self) -> &'static str {
        match self {
            Program::Hpp | Program::HppClang => "-std=c++17",
            _ => self.language().standard(),
        }
    }

    /// The compiler it is built with when not its language's: g++ and
    /// clang++ each warn of things the other lets pass.
    fn fixed_compiler(self) -> Option<&'static str> {
        match self {
            Program::HppClang => Some(CLANGXX),
            _ => None,
        }
    }
}

/// The second compiler of the C++ header's test.
const CLANGXX: &str = "clang++";

/// Whether `compiler` runs here; a test that needs it says so when not.
fn compiler_present(compiler: &str) -> bool {
    let present = Command::new(compiler)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        println!("SKIPPED: {compiler} is not installed (scripts/setup.sh installs it)");
    }
    present
}

impl Language {
    /// The environment variable naming the compiler, and the default.
    fn compiler_var(self) -> (&'static str, &'static str) {
        match self {
            Language::C => ("CC", "cc"),
            Language::Cxx => ("CXX", "c++"),
        }
    }

    fn standard(self) -> &'static str {
        match self {
            Language::C => "-std=c99",
            Language::Cxx => "-std=c++11",
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Linkage {
    Shared,
    Static,
}

impl Linkage {
    fn name(self) -> &'static str {
        match self {
            Linkage::Shared => "shared",
            Linkage::Static => "static",
        }
    }

    /// Linker arguments for a program using flowctrl from `lib_dir`.
    fn args(self, lib_dir: &Path) -> Vec<String> {
        match self {
            // The program records the library's SONAME, a name only the
            // link in its rpath's directory has.
            Linkage::Shared => vec![
                format!("-L{}", lib_dir.display()),
                "-lflowctrl".into(),
                format!("-Wl,-rpath,{}", soname_dir(lib_dir).display()),
            ],
            // `rustc --print native-static-libs` lists -lgcc_s -lutil -lrt
            // -lpthread -lm -ldl -lc. With glibc 2.34+ what the compiler
            // driver links by default is enough (libc has threads and dlopen,
            // libgcc_s comes as-needed); -lpthread -ldl -lm keep older glibc
            // working, where those live in libraries of their own.
            Linkage::Static => vec![
                lib_dir.join("libflowctrl.a").display().to_string(),
                "-lpthread".into(),
                "-ldl".into(),
                "-lm".into(),
            ],
        }
    }
}

/// `target/<profile>/deps`: where this test runs from (as `c_abi-<hash>`),
/// and where cargo put the libflowctrl.so and libflowctrl.a it built for this
/// run. (`cargo build` also copies them up to `target/<profile>`, but `cargo
/// test` does not, so the copies there may be missing or stale.)
fn deps_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let deps = exe.parent().expect("the test executable has a directory");
    assert!(
        deps.ends_with("deps"),
        "expected the test to run from target/<profile>/deps, not {}",
        exe.display()
    );
    deps.to_path_buf()
}

/// `target/<profile>/c-tests/lib`: the SONAME link to `lib_dir`'s
/// libflowctrl.so, where the shared programs find it at run time.
fn soname_dir(lib_dir: &Path) -> PathBuf {
    let dir = lib_dir
        .parent()
        .expect("deps has a parent")
        .join("c-tests/lib");
    common::elf::soname_link_dir(lib_dir, &dir)
}

/// Compiles one test program and returns its path.
fn compile(program: Program, linkage: Linkage, lib_dir: &Path) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    compile_in(manifest, program, linkage, lib_dir, "")
}

/// [`compile`] from the tree at `root` (its header and program), against
/// the library in `lib_dir`; `tag` tells its binary from this tree's.
fn compile_in(
    root: &Path,
    program: Program,
    linkage: Linkage,
    lib_dir: &Path,
    tag: &str,
) -> PathBuf {
    let language = program.language();
    for lib in ["libflowctrl.so", "libflowctrl.a"] {
        let path = lib_dir.join(lib);
        assert!(
            path.is_file(),
            "{} is missing: cargo builds it with the lib (crate-type cdylib and staticlib)",
            path.display()
        );
    }
    let build_dir = lib_dir.parent().expect("deps has a parent").join("c-tests");
    std::fs::create_dir_all(&build_dir).expect("create the build directory");
    let binary = build_dir.join(format!("{}{tag}_{}", program.name(), linkage.name()));
    // Built aside and renamed over: tests compiling the same program run
    // at once, and one may be running the file (ETXTBSY) while another
    // builds it again.
    static BUILDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let building = binary.with_extension(format!("building-{}-{n}", std::process::id()));

    // $CC may hold arguments too ("ccache gcc").
    let (var, default) = language.compiler_var();
    let compiler = match program.fixed_compiler() {
        Some(fixed) => fixed.to_string(),
        None => std::env::var(var).unwrap_or_else(|_| default.to_string()),
    };
    let mut words = compiler.split_whitespace();
    let mut command = Command::new(words.next().unwrap_or(default));
    command
        .args(words)
        .arg(program.standard())
        .args(WARNINGS)
        .arg("-pthread")
        .arg(format!("-I{}", root.join(program.include_dir()).display()))
        .arg(root.join("tests/c").join(program.source()))
        .arg("-o")
        .arg(&building)
        .args(linkage.args(lib_dir));
    let output = command.output().unwrap_or_else(|e| {
        panic!(
            "cannot run the compiler `{compiler}` for {} ({e}): install it, \
             or point ${var} at one",
            program.source()
        )
    });
    assert!(
        output.status.success(),
        "compiling {} failed ({}):\n{command:?}\n{}{}",
        program.source(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::rename(&building, &binary).expect("move the program into place");
    binary
}

/// A fresh directory under the system's temporary directory.
fn scratch_dir(tag: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "flowctrl-c-abi-{tag}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir(&dir).expect("create the scratch directory");
    // The permission check of abi_test.c runs a child as uid 65534, which
    // must be able to reach the files in here.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
        .expect("make the scratch directory searchable");
    dir
}

/// Runs a test program on a scratch directory of its own and fails with its
/// output unless it succeeds; one at a time (see [`one_at_a_time`]).
fn run(binary: &Path) {
    let _turn = one_at_a_time();
    run_with(binary, &[]);
}

/// [`run`] with `args` after the scratch directory, for a caller that holds
/// its turn already.
fn run_with(binary: &Path, args: &[&str]) {
    let name = binary.file_name().unwrap().to_string_lossy().into_owned();
    let scratch = scratch_dir(name.trim_start_matches("abi_test_"));
    let log_path = binary.with_extension("log");
    let log = File::create(&log_path).expect("create the log file");
    // cargo's LD_LIBRARY_PATH lists target/<profile> before deps: a stale
    // libflowctrl.so there would win over the rpath to the one just built.
    let mut child = Command::new(binary)
        .env_remove("LD_LIBRARY_PATH")
        .arg(&scratch)
        .args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone the log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", binary.display()));

    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the test program") {
            break Some(status);
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };

    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    match status {
        Some(status) if status.success() => {
            println!("{output}");
            let _ = std::fs::remove_dir_all(&scratch);
        }
        Some(status) => panic!(
            "{name} failed ({status}); its files are in {}\n\n{output}",
            scratch.display()
        ),
        None => panic!(
            "{name} did not finish within {TIMEOUT:?} and was killed; its files are in {}\n\n{output}",
            scratch.display()
        ),
    }
}

/// The test programs run one at a time: they measure time (a dead process's
/// permits must come back within 100 ms) and use several threads, so they
/// must not compete with each other for the CPUs.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner)
}

fn compile_and_run(program: Program, linkage: Linkage) {
    let binary = compile(program, linkage, &deps_dir());
    run(&binary);
}

/// A C service that names no limits in code gets them from its config file,
/// and an edit of the file while it runs (no restart, no rebuild).
#[test]
fn a_c_service_takes_its_limits_from_the_config_file_and_its_edits() {
    use std::io::{BufRead, BufReader};
    let binary = compile(Program::Config, Linkage::Shared, &deps_dir());
    let dir = scratch_dir("config");
    let file = dir.join("flowctrl.toml");
    let write = |cap: u32| {
        let text = format!(
            "[table]\npath = {:?}\n\n[tasks.api]\nlocal_rate = 100000\nburst = 100\n\
             max_concurrency = {cap}\n",
            dir.join("table")
        );
        // As an editor saves: a new file renamed over the old one.
        let tmp = dir.join("flowctrl.toml.new");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &file).unwrap();
    };
    write(4);
    let mut child = Command::new(&binary)
        .env_remove("LD_LIBRARY_PATH")
        .env("FLOWCTRL_CONFIG", &file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().map(|l| l.unwrap());
    if first.as_deref() != Some("ready") {
        let out = child.wait_with_output().unwrap();
        panic!("{first:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    write(8);
    let reloaded = lines.next().map(|l| l.unwrap()).unwrap_or_default();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{reloaded}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ms: f64 = reloaded.trim_start_matches("reloaded ").parse().unwrap();
    println!("the edit reached the C service in {ms} ms");
    assert!(ms <= 1500.0, "{ms} ms");
    assert!(dir.join("table").exists(), "the file's table path");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn c_with_shared_library() {
    compile_and_run(Program::C, Linkage::Shared);
}

#[test]
fn c_with_static_library() {
    compile_and_run(Program::C, Linkage::Static);
}

#[test]
fn cpp_with_shared_library() {
    compile_and_run(Program::Cxx, Linkage::Shared);
}

#[test]
fn cpp_with_static_library() {
    compile_and_run(Program::Cxx, Linkage::Static);
}

#[test]
fn hpp_with_shared_library() {
    compile_and_run(Program::Hpp, Linkage::Shared);
}

#[test]
fn hpp_with_static_library() {
    compile_and_run(Program::Hpp, Linkage::Static);
}

#[test]
fn hpp_with_clang_and_shared_library() {
    if compiler_present(CLANGXX) {
        compile_and_run(Program::HppClang, Linkage::Shared);
    }
}

#[test]
fn hpp_with_clang_and_static_library() {
    if compiler_present(CLANGXX) {
        compile_and_run(Program::HppClang, Linkage::Static);
    }
}

#[test]
fn compat_v1_with_shared_library() {
    compile_and_run(Program::CompatV1, Linkage::Shared);
}

#[test]
fn compat_v1_with_static_library() {
    compile_and_run(Program::CompatV1, Linkage::Static);
}

#[test]
fn compat_v0_3_with_shared_library() {
    compile_and_run(Program::CompatV0_3, Linkage::Shared);
}

#[test]
fn compat_v0_3_with_static_library() {
    compile_and_run(Program::CompatV0_3, Linkage::Static);
}

#[test]
fn adaptive_with_shared_library() {
    compile_and_run(Program::Adaptive, Linkage::Shared);
}

#[test]
fn adaptive_with_static_library() {
    compile_and_run(Program::Adaptive, Linkage::Static);
}

#[test]
fn log_callback_with_shared_library() {
    compile_and_run(Program::Log, Linkage::Shared);
}

#[test]
fn log_callback_with_static_library() {
    compile_and_run(Program::Log, Linkage::Static);
}

/// `log_test` in `mode` (`stderr`: no callback; `callback`: one set) with
/// the environment `env` (`FLOWCTRL_LOG` and `FLOWCTRL_LOG_FORMAT` unset
/// unless it sets them): its stdout and stderr.
fn run_log_mode(binary: &Path, mode: &str, env: &[(&str, &str)]) -> (String, String) {
    let scratch = scratch_dir("log-env");
    let mut command = Command::new(binary);
    command
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("FLOWCTRL_LOG")
        .env_remove("FLOWCTRL_LOG_FORMAT")
        .envs(env.iter().copied())
        .arg(&scratch)
        .arg(mode)
        .stdin(Stdio::null());
    let out = command.output().expect("run log_test");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        out.status.success(),
        "log_test {mode} with {env:?} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let _ = std::fs::remove_dir_all(&scratch);
    (stdout, stderr)
}

/// The store failure's line about task "api" on `stderr`, whatever its
/// format (every format holds the message as written).
fn store_failure_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.contains("the quota store failed") && l.contains("api"))
        .unwrap_or_else(|| panic!("no store failure on stderr:\n{stderr}"))
}

/// flowctrl's lines on stderr, in any format.
fn our_lines(stderr: &str) -> usize {
    stderr
        .lines()
        .filter(|l| l.starts_with("flowctrl[") || l.starts_with("time=") || l.starts_with('{'))
        .count()
}

/// A C program that sets nothing gets its warnings on stderr, with the
/// line's fields appended; `FLOWCTRL_LOG` sets the level (`off`: nothing);
/// a callback wins over it.
#[test]
fn warnings_reach_stderr_unless_a_callback_or_flowctrl_log_says_otherwise() {
    let _turn = one_at_a_time();
    let binary = compile(Program::Log, Linkage::Shared, &deps_dir());

    // Nothing set: the warning, as text, with its fields.
    let (_, stderr) = run_log_mode(&binary, "stderr", &[]);
    let line = store_failure_line(&stderr);
    assert!(
        line.starts_with("flowctrl[")
            && line.contains(" WARN flowctrl::store: task \"api\": the quota store failed"),
        "{line}"
    );
    assert!(
        line.contains(" task=api host=")
            && line.contains(" store=\"Redis at redis://127.0.0.1:1/0\""),
        "{line}"
    );

    let (_, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG", "warn")]);
    store_failure_line(&stderr);
    let (_, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG", "off")]);
    assert_eq!(our_lines(&stderr), 0, "off: nothing\n{stderr}");
    assert_eq!(stderr, "", "off: nothing at all");
    let (_, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG", "error")]);
    assert_eq!(our_lines(&stderr), 0, "a warning is below error\n{stderr}");
    // FC_LOG_OFF set by the program (as one built when the library was
    // silent by default silences it): nothing, FLOWCTRL_LOG or not.
    for env in [&[][..], &[("FLOWCTRL_LOG", "warn")]] {
        let (_, stderr) = run_log_mode(&binary, "off", env);
        assert_eq!(our_lines(&stderr), 0, "FC_LOG_OFF: nothing\n{stderr}");
    }

    // A callback: it gets the lines, stderr none.
    for env in [&[][..], &[("FLOWCTRL_LOG", "warn")]] {
        let (stdout, stderr) = run_log_mode(&binary, "callback", env);
        assert_eq!(our_lines(&stderr), 0, "the callback gets them\n{stderr}");
        let lines: u32 = stdout
            .lines()
            .find_map(|l| l.strip_prefix("callback lines "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{stdout}"));
        assert!(lines >= 1, "{stdout}");
    }

    let (_, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG", "loud")]);
    assert!(
        stderr.contains("FLOWCTRL_LOG=\"loud\" is not one of"),
        "a bad value is reported\n{stderr}"
    );
    store_failure_line(&stderr);
}

/// `FLOWCTRL_LOG_FORMAT=json`: every line of flowctrl's is a JSON object
/// with its time, level, target, message and the fields task, pid, host and
/// store (redacted); `logfmt`: the same as `key=value` pairs; another
/// value: one line saying so, and text.
#[test]
fn flowctrl_log_format_writes_json_or_logfmt_with_the_fields() {
    let _turn = one_at_a_time();
    let binary = compile(Program::Log, Linkage::Shared, &deps_dir());
    let pid_of = |stdout: &str| -> u64 {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("pid "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {stdout}"))
    };

    let (stdout, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG_FORMAT", "json")]);
    let docs: Vec<serde_json::Value> = stderr
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let doc = docs
        .iter()
        .find(|d| d["task"] == "api")
        .unwrap_or_else(|| panic!("no line about api:\n{stderr}"));
    assert_eq!(doc["level"], "warn", "{doc}");
    assert_eq!(doc["target"], "flowctrl::store", "{doc}");
    assert!(
        doc["message"]
            .as_str()
            .unwrap()
            .starts_with("task \"api\": the quota store failed"),
        "{doc}"
    );
    assert_eq!(doc["pid"], pid_of(&stdout), "{doc}");
    assert_eq!(doc["store"], "Redis at redis://127.0.0.1:1/0", "{doc}");
    assert_eq!(doc["host"].as_str().map(str::len), Some(16), "{doc}");
    let time = doc["time"].as_str().unwrap();
    assert!(time.len() == 24 && time.ends_with('Z'), "{doc}");

    let (stdout, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG_FORMAT", "logfmt")]);
    let line = store_failure_line(&stderr);
    assert!(line.starts_with("time="), "{line}");
    for field in [
        " level=warn target=flowctrl::store message=\"task \\\"api\\\": the quota store failed",
        " task=api ",
        &format!(" pid={} ", pid_of(&stdout)),
        " host=",
        " store=\"Redis at redis://127.0.0.1:1/0\"",
    ] {
        assert!(line.contains(field), "no {field:?} in {line}");
    }

    let (_, stderr) = run_log_mode(&binary, "stderr", &[("FLOWCTRL_LOG_FORMAT", "yaml")]);
    let said: Vec<_> = stderr
        .lines()
        .filter(|l| l.contains("FLOWCTRL_LOG_FORMAT=\"yaml\" is not one of text, logfmt, json"))
        .collect();
    assert_eq!(said.len(), 1, "said once\n{stderr}");
    assert!(
        store_failure_line(&stderr).starts_with("flowctrl["),
        "{stderr}"
    );
}

/// Exit status of `scripts/c-sanitizers.sh` when the compiler cannot build
/// or run sanitized programs (automake's "skipped").
const SKIPPED: i32 = 77;

/// The same programs built with `-fsanitize=address,undefined` against
/// `libflowctrl.so`, by `scripts/c-sanitizers.sh` (which runs standalone
/// too). Skipped, with the reason printed, when the compiler cannot build
/// and run a sanitized program here.
#[test]
fn programs_under_asan_and_ubsan() {
    let _turn = one_at_a_time();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let deps = deps_dir();
    let out = deps
        .parent()
        .expect("deps has a parent")
        .join("c-tests-sanitized");
    std::fs::create_dir_all(&out).expect("create the sanitizer build directory");
    let log_path = out.join("c-sanitizers.log");
    let log = File::create(&log_path).expect("create the log file");
    let mut child = Command::new("bash")
        .arg(manifest.join("scripts/c-sanitizers.sh"))
        .arg("--lib-dir")
        .arg(&deps)
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone the log file"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run scripts/c-sanitizers.sh with bash: {e}"));
    // The script bounds each program's run itself; this bounds the whole.
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the script") {
            break status;
        }
        if started.elapsed() > 4 * TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "scripts/c-sanitizers.sh did not finish within {:?}",
                4 * TIMEOUT
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(&log_path).unwrap_or_default();
    match status.code() {
        Some(0) => println!("{output}"),
        Some(SKIPPED) => println!("SKIPPED: not run under sanitizers:\n{output}"),
        _ => panic!(
            "scripts/c-sanitizers.sh failed ({status}); logs in {}\n\n{output}",
            out.display()
        ),
    }
}

/// The global-quota accuracy and failover tests through the C face: real
/// worker processes built from `tests/c/quota_worker.c`, a real Redis.
mod quota {
    use super::*;
    use crate::common::redis::RedisServer;
    use crate::common::wall_us;
    use std::collections::BTreeMap;

    struct Worker(std::process::Child);

    /// Starts a worker; it begins at `start` (wall µs).
    fn spawn(
        binary: &Path,
        table: &Path,
        url: &str,
        start: i64,
        secs: f64,
        fallback: f64,
    ) -> Worker {
        // Accuracy runs give the store 1 s (a late answer on a shared
        // machine would fail the store and admit by the fallback); failover
        // runs 100 ms.
        let timeout_ms = if fallback > 0.0 { "100" } else { "1000" };
        let child = Command::new(binary)
            .env_remove("LD_LIBRARY_PATH")
            .args([
                table.to_str().unwrap(),
                url,
                &start.to_string(),
                &secs.to_string(),
                &fallback.to_string(),
                timeout_ms,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start quota_worker");
        Worker(child)
    }

    /// Its per-slice counts and (errors, slowest µs, admitted).
    fn finish(w: Worker) -> (BTreeMap<i64, u64>, [u64; 3]) {
        let out = w.0.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "worker failed: {text}");
        let mut slices = BTreeMap::new();
        let mut done = [u64::MAX; 3];
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            match words[0] {
                "slice" => {
                    slices.insert(words[1].parse().unwrap(), words[2].parse().unwrap());
                }
                "done" => {
                    for i in 0..3 {
                        done[i] = words[i + 1].parse().unwrap();
                    }
                }
                _ => panic!("unexpected line {line:?}"),
            }
        }
        (slices, done)
    }

    #[test]
    fn c_workers_admit_the_global_rate_per_slice_and_survive_a_redis_outage() {
        let _turn = one_at_a_time();
        let binary = compile(Program::QuotaWorker, Linkage::Shared, &deps_dir());
        let mut redis = RedisServer::start();
        let scratch = scratch_dir("quota");

        // Accuracy: 2 hosts × 3 processes, saturating demand for 5 s.
        let start = wall_us() + 500_000;
        let workers: Vec<_> = (0..6)
            .map(|i| {
                spawn(
                    &binary,
                    &scratch.join(format!("host{}", i % 2)),
                    &redis.url(),
                    start,
                    5.0,
                    0.0,
                )
            })
            .collect();
        let mut total: BTreeMap<i64, u64> = BTreeMap::new();
        for w in workers {
            let (slices, done) = finish(w);
            assert_eq!(done[0], 0, "errors");
            for (s, n) in slices {
                *total.entry(s).or_default() += n;
            }
        }
        let slices: Vec<_> = total.iter().collect();
        assert!(slices.len() >= 4, "{total:?}");
        for (s, n) in &slices[1..slices.len() - 1] {
            assert!((1960..=2020).contains(*n), "slice {s}: {n}: {total:?}");
        }

        // Failover: Redis killed at 1.5 s, restarted at 3.5 s.
        let start = wall_us() + 300_000;
        let table = scratch.join("failover");
        let workers: Vec<_> = (0..2)
            .map(|_| spawn(&binary, &table, &redis.url(), start, 6.0, 400.0))
            .collect();
        let until = |at: i64| {
            while wall_us() < at {
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        until(start + 1_500_000);
        redis.kill();
        until(start + 3_500_000);
        redis.restart();
        for w in workers {
            let (_, [errors, slowest, admitted]) = finish(w);
            assert_eq!(errors, 0, "no caller may see an error");
            assert!(slowest < 180_000, "an acquire took {slowest} µs");
            assert!(admitted > 1000, "kept serving: {admitted}");
        }
        let opened = flowctrl::Table::open(&table, &flowctrl::TableOptions::default()).unwrap();
        let stats = opened
            .task("api", &flowctrl::TaskConfig::new())
            .unwrap()
            .quota_stats();
        assert!(
            stats.failed_pulls >= 1 && stats.failed_ms >= 1000,
            "{stats:?}"
        );
        assert_ne!(
            stats.state,
            Some(flowctrl::QuotaState::Failed),
            "recovered: {stats:?}"
        );
        let _ = std::fs::remove_dir_all(&scratch);
    }

    /// A task's record through the C face (`tests/c/records_test.c`):
    /// written, read back, adopted at the host's next `fc_pull_quota` (its
    /// `global_source`), refused on bad input, removed, and the host back to
    /// its own numbers.
    #[test]
    fn c_records_win_over_the_hosts_own_numbers_until_removed() {
        let _turn = one_at_a_time();
        let binary = compile(Program::Records, Linkage::Shared, &deps_dir());
        let redis = RedisServer::start();
        run_with(&binary, &[&redis.url()]);
        // The program removed what it wrote.
        let record: Vec<String> = redis.command(&["HGETALL", "flowctrl:cfg:{api}"]);
        assert!(record.is_empty(), "left behind: {record:?}");
    }

    /// A keyed task's record of its keys' global rates through the C face
    /// (`tests/c/key_records_test.c`): written, read back, adopted by a host
    /// with its own rate, hostile input refused, the hot key listed, removed.
    #[test]
    fn c_key_records_reach_a_host_and_hot_keys_are_listed() {
        let _turn = one_at_a_time();
        let binary = compile(Program::KeyRecords, Linkage::Shared, &deps_dir());
        let redis = RedisServer::start();
        run_with(&binary, &[&redis.url()]);
        let record: Vec<String> = redis.command(&["HGETALL", "flowctrl:{api}:k-cfg"]);
        assert!(record.is_empty(), "left behind: {record:?}");
    }

    /// The last commit of the `release` branch (version 0.3.0 in its
    /// Cargo.toml): the pull script and host logic before the quota room
    /// was rebuilt. A fleet upgraded host by host runs it beside this build
    /// on the same keys.
    const RELEASE_0_3: &str = "5a607084b711c04a3dae3392cda76ba073fcb476";

    /// That revision's tree with its C library built (debug, no default
    /// features, its own Cargo.lock) under `target/release-0_3/<commit>/`;
    /// None, with the reason, when this checkout cannot give the commit (no
    /// git, a shallow clone).
    fn release_0_3() -> Option<PathBuf> {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(manifest)
                .args(args)
                .output()
        };
        let skip = |why: String| {
            eprintln!("SKIPPED: the rolling-upgrade test needs {RELEASE_0_3}: {why}");
            None
        };
        let found = match git(&["cat-file", "-e", &format!("{RELEASE_0_3}^{{commit}}")]) {
            Err(e) => return skip(format!("git does not run ({e})")),
            Ok(out) => out,
        };
        if !found.status.success() {
            let shallow = git(&["rev-parse", "--is-shallow-repository"])
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "true");
            return skip(if shallow {
                "this checkout is a shallow clone".into()
            } else {
                String::from_utf8_lossy(&found.stderr).trim().to_string()
            });
        }
        let target = deps_dir().join("../../release-0_3").join(RELEASE_0_3);
        let root = target.join("src");
        if !root.is_dir() {
            // Unpacked aside and renamed into place: a run killed half-way
            // leaves no tree that looks whole.
            let part = target.join(format!("src.part-{}", std::process::id()));
            let tar = target.join(format!("src-{}.tar", std::process::id()));
            std::fs::create_dir_all(&part).unwrap();
            let out = git(&["archive", "-o", tar.to_str().unwrap(), RELEASE_0_3]).unwrap();
            assert!(out.status.success(), "git archive: {out:?}");
            let out = Command::new("tar")
                .arg("-xf")
                .arg(&tar)
                .arg("-C")
                .arg(&part)
                .output()
                .unwrap();
            assert!(out.status.success(), "tar: {out:?}");
            std::fs::remove_file(&tar).unwrap();
            std::fs::rename(&part, &root).unwrap();
        }
        // Its own build: none of this run's flags, target or profile.
        let mut build = Command::new(env!("CARGO"));
        for (var, _) in std::env::vars() {
            if var.starts_with("CARGO_PROFILE_")
                || var.starts_with("CARGO_BUILD_")
                || var.ends_with("RUSTFLAGS")
            {
                build.env_remove(var);
            }
        }
        let out = build
            .current_dir(&root)
            .env("CARGO_TARGET_DIR", target.join("target"))
            .env("CARGO_PROFILE_DEV_DEBUG", "false")
            .args(["build", "-q", "--locked", "--lib", "--no-default-features"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "building {RELEASE_0_3}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(root)
    }

    /// A process of release 0.3.0 shares a table this build made (with the
    /// lanes' own latency sketches after the bytes 0.3.0 reads), and this
    /// build a table 0.3.0 made (without them): one cap holds across both
    /// builds, and this build's releases fill the round-trip histogram on
    /// either table.
    #[test]
    fn a_process_of_release_0_3_shares_a_table_either_build_made() {
        use crate::common::{Options, options};
        use flowctrl::{Outcome, Table, TaskConfig, View};
        let _turn = one_at_a_time();
        let Some(old_root) = release_0_3() else {
            return;
        };
        let old = compile_in(
            Path::new(env!("CARGO_MANIFEST_DIR")),
            Program::ShareV0_3,
            Linkage::Shared,
            &old_root.join("../target/debug/deps"),
            "_release_0_3",
        );
        let run_old = |table: &Path| {
            // Its own library, by its run path: the test runner's library
            // path names this build's `libflowctrl.so.0` first.
            let out = Command::new(&old)
                .env_remove("LD_LIBRARY_PATH")
                .arg(table)
                .arg("3")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8(out.stdout).unwrap()
        };
        let scratch = scratch_dir("share-0_3");
        for made_by_old in [false, true] {
            let path = scratch.join(if made_by_old { "old" } else { "new" });
            if made_by_old {
                assert_eq!(run_old(&path), "got 3 in_flight 3\n");
            }
            let table = Table::open(&path, &options().capacity(4).processes(4)).unwrap();
            let task = table
                .task("shared", &TaskConfig::new().max_concurrency(3))
                .unwrap();
            let held = task.acquire(1).unwrap().permit().unwrap();
            assert_eq!(
                run_old(&path),
                "got 2 in_flight 3\n",
                "made by 0.3.0: {made_by_old}"
            );
            held.release_rtt(Outcome::Success, Duration::from_millis(3))
                .unwrap();
            let seen = View::open(&path).unwrap().task("shared").unwrap();
            let released = if made_by_old { 6 } else { 3 };
            assert_eq!(
                (seen.stats.in_flight, seen.stats.released_success),
                (0, released)
            );
            // 0.3.0 fills no bucket; this build's one release does.
            assert_eq!(seen.rtt.count(), 1, "{:?}", seen.rtt);
            // The header's lane sketch size: none in 0.3.0's table.
            let bytes = std::fs::read(&path).unwrap();
            let sketch = u32::from_le_bytes(bytes[92..96].try_into().unwrap());
            assert_eq!(sketch, if made_by_old { 0 } else { 160 });
            assert_eq!(bytes.len() as u64, table.size_bytes());
        }
        let _ = std::fs::remove_dir_all(&scratch);
    }

    /// A rolling upgrade: a host of release 0.3 and a host of this build,
    /// two processes each, saturate one task of 2,000/s on one Redis. The
    /// slices stay exact and neither host is starved: each within 0.4 of
    /// an equal share (measured: the 0.3 host up to 1.25, since it owes the
    /// others by time only).
    #[test]
    fn hosts_of_release_0_3_and_of_this_build_share_one_global_quota() {
        // The turn first: the old build's half minute on 2 cores would
        // otherwise fall on another test's timed run.
        let _turn = one_at_a_time();
        let Some(old_root) = release_0_3() else {
            return;
        };
        let new = compile(Program::QuotaWorker, Linkage::Shared, &deps_dir());
        let old_lib = old_root.join("../target/debug/deps");
        let old = compile_in(
            &old_root,
            Program::QuotaWorker,
            Linkage::Shared,
            &old_lib,
            "_release_0_3",
        );
        let redis = RedisServer::start();
        let scratch = scratch_dir("rolling");
        let start = wall_us() + 500_000;
        let workers: Vec<_> = [(&old, "old"), (&new, "new")]
            .into_iter()
            .cycle()
            .take(4)
            .map(|(binary, host)| {
                let table = scratch.join(host);
                (host, spawn(binary, &table, &redis.url(), start, 5.0, 0.0))
            })
            .collect();
        let mut per_host: BTreeMap<&str, BTreeMap<i64, u64>> = BTreeMap::new();
        for (host, w) in workers {
            let (slices, done) = finish(w);
            assert_eq!(done[0], 0, "errors");
            for (s, n) in slices {
                *per_host.entry(host).or_default().entry(s).or_default() += n;
            }
        }
        let mut total: BTreeMap<i64, u64> = BTreeMap::new();
        for slices in per_host.values() {
            for (s, n) in slices {
                *total.entry(*s).or_default() += n;
            }
        }
        eprintln!("per host: {per_host:?}");
        let slices: Vec<_> = total.iter().collect();
        assert!(slices.len() >= 4, "{total:?}");
        for (s, n) in &slices[1..slices.len() - 1] {
            assert!((1960..=2020).contains(*n), "slice {s}: {n}: {per_host:?}");
            for (host, of_host) in &per_host {
                let got = of_host.get(s).copied().unwrap_or(0);
                assert!(
                    (600..=1400).contains(&got),
                    "slice {s}: the {host} host admitted {got} of 2,000: {per_host:?}"
                );
            }
        }
        // Each host ran its own build: the 0.3 script writes a host's record
        // with 12 fields, this build's with 13.
        let keys: Vec<String> = redis.command(&["KEYS", "flowctrl:*"]);
        let mut widths = std::collections::BTreeSet::new();
        for key in keys.iter().filter(|k| {
            k.rsplit(':')
                .next()
                .is_some_and(|s| s.parse::<u32>().is_ok())
        }) {
            let fields: Vec<String> = redis.command(&["HGETALL", key]);
            for pair in fields.chunks(2) {
                if !["left", "quota", "demand", "fair", "back"].contains(&pair[0].as_str()) {
                    widths.insert(pair[1].split_whitespace().count());
                }
            }
        }
        assert_eq!(
            widths,
            [12, 13].into(),
            "a 0.3 host's records and this build's, in {keys:?}"
        );
        let _ = std::fs::remove_dir_all(&scratch);
    }
}
