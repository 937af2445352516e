"""The release artifacts (scripts/release.sh) as a user meets them on an
older Linux or on musl: built once for this module into a scratch
directory, then checked, for each arch and C library built (x86_64 and
aarch64, glibc and musl), for what a glibc 2.17 system needs (no
symbol version above GLIBC_2.17, auditwheel's verdict) or a musl 1.2 one
(musl's libc alone, resolved by Debian's musl loader; the musllinux_1_2
verdict), their stripping, size budgets and the debug file's link; and
used: a C program and a C++ one (on flowctrl.hpp) built against the
unpacked x86_64 tarball alone (pkg-config, shared and static; CMake), the
C one by musl-gcc against the musl tarball (shared, and static on the
archive), the x86_64 wheel installed into a fresh venv, and, under
qemu-user, a C program against the aarch64 tarball (and a static one on
the aarch64 musl archive) and the aarch64 wheel's module imported and used
by an aarch64 CPython (scripts/arm64-python.sh). The musl wheels are not
imported: there is no musl CPython here. Run by scripts/test.sh, this suite itself runs from a
venv made afresh from the wheel, which a test here checks.

The script's builds live in target/zig/ and are kept: minutes from nothing
on this 2-core machine, seconds when fresh. scripts/test.sh builds x86_64
alone (--no-aarch64): there the aarch64 cases are skipped, as the log says
it did not build it; run alone, this module builds and checks both.
binutils (and binutils-aarch64-linux-gnu), a C and a C++ compiler,
musl-gcc (musl-tools), pkg-config, cmake and the venv's auditwheel must be
there (scripts/setup.sh installs them): a missing one fails. The aarch64
runs under qemu need qemu-user-static (scripts/setup.sh does not install
it) and an aarch64 glibc: libc6-arm64-cross's, else the sysroot that
scripts/arm64-python.sh makes from Debian's arm64 packages (kept in
target/: its first run fetches them), which the wheel's run needs for its
CPython; each is skipped, saying why, without qemu or where the script
cannot make it (its exit 77).
"""

import base64
import csv
import hashlib
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VERSION = re.search(
    r'^version = "([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M
).group(1)
HOST = platform.machine()
ARCHES = ("x86_64", "aarch64")
# glibc's artifacts and musl's, and the wheel's policy for each.
POLICY = {"gnu": "manylinux", "musl": "musllinux"}
TARGETS = [(arch, libc) for libc in POLICY for arch in ARCHES]
FLOOR = (2, 17)
# The size budgets, in bytes: the stripped shared library and the wheel.
# Measured sizes: benches/ARTIFACTS.md (scripts/artifact-sizes.sh).
BUDGET = {"library": 5_000_000, "wheel": 5_000_000}

# The build runs in the fixture: a test's timeout counts its setup.
pytestmark = pytest.mark.timeout(1800)


def run(args, **kwargs):
    """Runs args; fails with everything it printed unless it succeeds."""
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, **kwargs
    )
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}:\n{result.stdout}{result.stderr}"
    )
    return result.stdout


def binutil(arch, tool):
    """This machine's binutils for its own arch, <arch>-linux-gnu-<tool>
    for another (readelf reads any)."""
    return tool if arch == HOST or tool == "readelf" else f"{arch}-linux-gnu-{tool}"


class Artifacts:
    """One arch's tarballs for one C library, unpacked (the debug one over
    the other), and wheel."""

    def __init__(self, arch, libc, out, unpacked):
        self.arch = arch
        self.libc = libc
        self.name = f"flowctrl-{VERSION}-{arch}-linux-{libc}"
        self.tarballs = [out / f"{self.name}{suffix}.tar.gz" for suffix in ("", "-debug")]
        for tarball in self.tarballs:
            run(["tar", "-xzf", tarball, "-C", unpacked])
        self.prefix = unpacked / self.name
        self.library = self.prefix / "lib" / f"libflowctrl.so.{VERSION}"
        self.debug = self.prefix / "lib" / ".debug" / f"libflowctrl.so.{VERSION}.debug"
        wheels = sorted(out.glob(f"flowctrl-{VERSION}-*-{POLICY[libc]}*_{arch}.whl"))
        assert len(wheels) == 1, wheels
        self.wheel = wheels[0]
        self.module = unpacked / f"{arch}-{libc}-module" / "_flowctrl.abi3.so"
        self.module.parent.mkdir()
        with zipfile.ZipFile(self.wheel) as wheel:
            self.module.write_bytes(wheel.read("flowctrl/_flowctrl.abi3.so"))


class Release:
    def __init__(self, out, log, unpacked):
        self.out = out
        self.log = log
        # Each (arch, libc) whose tarball is there; x86_64's glibc one always.
        self.built = {
            (arch, libc): Artifacts(arch, libc, out, unpacked)
            for arch, libc in TARGETS
            if (out / f"flowctrl-{VERSION}-{arch}-linux-{libc}.tar.gz").exists()
        }
        assert ("x86_64", "gnu") in self.built, sorted(p.name for p in out.iterdir())
        # What runs here: C programs and the venv use this machine's arch.
        self.host = self.built[(HOST, "gnu")]


def build(tmp_path_factory):
    """The artifacts and the script's output: those scripts/test.sh built
    (FLOWCTRL_RELEASE_DIR and _LOG; it installs that wheel for the other
    tests), or built here."""
    if os.environ.get("FLOWCTRL_RELEASE_DIR"):
        out = Path(os.environ["FLOWCTRL_RELEASE_DIR"])
        return out, Path(os.environ["FLOWCTRL_RELEASE_LOG"]).read_text()
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/release.sh"), "--out", str(out), "--no-publish-check"],
        capture_output=True, text=True, timeout=1700,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    print(f"scripts/release.sh took {time.monotonic() - started:.0f} s")
    return out, log


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    for tool in ("objdump", "objcopy", "readelf", "nm", "cc", "c++", "pkg-config", "cmake", "tar"):
        assert shutil.which(tool), f"{tool} missing: scripts/setup.sh installs it"
    out, log = build(tmp_path_factory)
    # Unpacked away from the tree it was built in, the debug tarball over
    # the library's, as a user does.
    return Release(out, log, tmp_path_factory.mktemp("unpacked"))


def built(release, arch, libc):
    """The artifacts of arch on libc; those the script did not build are
    skipped, and the script must have said why."""
    if (arch, libc) not in release.built:
        triple = f"{arch}-unknown-linux-{libc}"
        said = re.search(rf"not built: {triple}: (.*)", release.log)
        assert said, f"{triple} was not built and the script did not say why:\n{release.log}"
        pytest.skip(f"{triple} not built: {said.group(1)}")
    return release.built[(arch, libc)]


@pytest.fixture(params=TARGETS, ids="-".join)
def artifacts(release, request):
    """Each arch's artifacts, on glibc and on musl."""
    return built(release, *request.param)


@pytest.fixture(params=ARCHES)
def gnu(release, request):
    """Each arch's glibc artifacts."""
    return built(release, request.param, "gnu")


@pytest.fixture(params=ARCHES)
def musl(release, request):
    """Each arch's musl artifacts."""
    return built(release, request.param, "musl")


def glibc_versions(binary):
    """The GLIBC_x.y versions binary's dynamic symbols name."""
    text = run(["readelf", "--dyn-syms", "-W", binary])
    return sorted(
        {tuple(int(p) for p in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", text)}
    )


def sections(binary):
    return re.findall(r"\]\s+(\.\S+)", run(["readelf", "-S", "-W", binary]))


def test_it_says_which_targets_it_did_not_build(release):
    sysroot = run(["rustc", "--print", "sysroot"]).strip()
    for arch, libc in TARGETS:
        # Each target is built or named as not built, never both.
        triple = f"{arch}-unknown-linux-{libc}"
        said = re.search(rf"not built: {triple}: (.*)", release.log)
        assert bool(said) != ((arch, libc) in release.built), (triple, release.log)
        if not said:
            continue
        why = said.group(1)
        if "left out by --no-aarch64" in why:
            # On request (scripts/test.sh's).
            assert arch == "aarch64", why
        elif "left out by --no-musl" in why:
            assert libc == "musl", why
        else:
            # Otherwise only when its standard library is missing.
            assert not Path(sysroot, "lib/rustlib", triple).is_dir(), why
            assert f"rustup target add {triple}" in why, why


def test_the_files_and_their_checksums(release):
    # Files alone: dist/ keeps the repository's systemd/ units beside them.
    names = sorted(p.name for p in release.out.iterdir() if p.is_file())
    expected = ["SHA256SUMS"]
    for built in release.built.values():
        expected += [t.name for t in built.tarballs] + [built.wheel.name]
    assert names == sorted(expected), names
    run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=release.out)
    for built in release.built.values():
        lib = built.prefix / "lib"
        assert os.readlink(lib / "libflowctrl.so") == f"libflowctrl.so.{VERSION.split('.')[0]}"
        assert os.readlink(lib / f"libflowctrl.so.{VERSION.split('.')[0]}") == built.library.name
        for header in ("flowctrl.h", "flowctrl.hpp"):
            assert (built.prefix / "include" / header).read_bytes() == (
                ROOT / "include" / header
            ).read_bytes()


def test_each_file_is_for_its_arch(artifacts):
    machine = {"x86_64": "Advanced Micro Devices X86-64", "aarch64": "AArch64"}[artifacts.arch]
    for binary in (artifacts.library, artifacts.module, artifacts.prefix / "lib/libflowctrl.a"):
        assert f"Machine:                           {machine}" in run(
            ["readelf", "-h", binary]
        ), binary


@pytest.mark.parametrize("which", ["library", "module"])
def test_no_symbol_needs_a_glibc_above_2_17(gnu, which):
    binary = getattr(gnu, which)
    versions = glibc_versions(binary)
    assert versions, f"{binary} names no GLIBC_ version: not linked against glibc?"
    above = [v for v in versions if v > FLOOR]
    assert not above, f"{binary.name} needs {above}"
    print(f"{binary.name}: GLIBC_{'.'.join(map(str, versions[-1]))} at most")


def test_the_wheel_is_manylinux2014_and_abi3(gnu):
    # flowctrl-0.3.0-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl
    arch = gnu.arch
    python, abi, tags = gnu.wheel.stem.split("-")[2:]
    assert (python, abi) == ("cp39", "abi3"), gnu.wheel.name
    assert set(tags.split(".")) == {
        f"manylinux2014_{arch}", f"manylinux_2_17_{arch}",
    }, gnu.wheel.name
    show = run([sys.executable, "-m", "auditwheel", "show", gnu.wheel])
    assert re.search(rf'"manylinux_2_17_{arch}"', show), show
    # The module's SONAME must not be the C library's: cargo hands a
    # dependency's cdylib link arguments to dependents (see build.rs).
    assert "(SONAME)" not in run(["readelf", "-d", gnu.module])


def test_the_musl_wheel_is_musllinux_1_2_and_abi3(musl):
    # flowctrl-0.3.0-cp39-abi3-musllinux_1_2_x86_64.whl
    arch = musl.arch
    tags = musl.wheel.stem.split("-")[2:]
    assert tags == ["cp39", "abi3", f"musllinux_1_2_{arch}"], musl.wheel.name
    # auditwheel allows musl's libc by Alpine's name alone, which the
    # script gave the module (zig links it as libc.so).
    show = run([sys.executable, "-m", "auditwheel", "show", musl.wheel])
    assert re.search(rf'"musllinux_1_2_{arch}"', show), show
    assert "(SONAME)" not in run(["readelf", "-d", musl.module])
    # The script wrote the wheel again around the renamed module: its
    # RECORD gives each file's hash and size, which pip checks.
    with zipfile.ZipFile(musl.wheel) as wheel:
        names = wheel.namelist()
        (record,) = [n for n in names if n.endswith(".dist-info/RECORD")]
        rows = list(csv.reader(wheel.read(record).decode().splitlines()))
        assert sorted(row[0] for row in rows) == sorted(names)
        for name, digest, size in rows:
            if name == record:
                assert (digest, size) == ("", ""), (digest, size)
                continue
            data = wheel.read(name)
            hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, int(size)) == (f"sha256={hashed.decode()}", len(data)), name


@pytest.mark.parametrize("which", ["library", "module"])
def test_the_musl_files_need_musls_libc_alone(musl, which):
    """The library needs musl's libc by zig's name for it (libc.so), the
    module by Alpine's (libc.musl-<arch>.so.1): every musl loader takes
    either for itself. No glibc version, nor libgcc_s (zig links its
    libunwind in). On this machine's arch Debian's musl loader (1.2.3, of
    musl-tools) resolves what they need: all of the library's, and all of
    the module's but CPython's API (there is no musl CPython here to import
    it: the module's own Python symbols alone go unresolved)."""
    binary = getattr(musl, which)
    libc = {"library": "libc.so", "module": f"libc.musl-{musl.arch}.so.1"}[which]
    assert needed(binary) == [libc]
    assert not glibc_versions(binary)
    if musl.arch != HOST:
        return
    loader = Path(f"/lib/ld-musl-{HOST}.so.1")
    assert loader.exists(), f"{loader} missing: scripts/setup.sh installs musl-tools"
    listed = subprocess.run([loader, "--list", binary], capture_output=True, text=True)
    assert f"{libc} => {loader} " in listed.stdout, listed
    missing = set(re.findall(r"Error relocating .*: (\S+): symbol not found", listed.stderr))
    if which == "library":
        assert listed.returncode == 0 and not missing, listed
    else:
        python_api = {
            fields[7] for fields in map(str.split, run(["readelf", "--dyn-syms", "-W", binary]).splitlines())
            if len(fields) == 8 and fields[6] == "UND" and re.match(r"_?Py", fields[7])
        }
        assert python_api and missing == python_api, sorted(missing ^ python_api)
        print(f"{binary.name}: all {len(python_api)} unresolved symbols are CPython's")


@pytest.mark.parametrize("which", ["library", "module"])
def test_stripped(artifacts, which):
    binary = getattr(artifacts, which)
    names = sections(binary)
    assert ".dynsym" in names, names
    assert ".symtab" not in names, names
    assert not [s for s in names if s.startswith(".debug")], names


def test_the_archive_keeps_its_symbols_not_its_debug_info(artifacts):
    archive = artifacts.prefix / "lib" / "libflowctrl.a"
    text = run(["readelf", "-S", "-W", archive])
    assert ".symtab" in text
    assert ".debug_" not in text
    defined = run([binutil(artifacts.arch, "nm"), "--defined-only", archive])
    assert "fc_acquire" in defined
    if artifacts.libc == "musl":
        # Its unwinder, which a static program cannot take from libgcc_s.
        assert re.search(r" T _Unwind_RaiseException$", defined, re.M), "no unwinder in it"


@pytest.mark.parametrize("which", ["library", "wheel"])
def test_within_its_size_budget(artifacts, which):
    path = getattr(artifacts, which)
    size = path.stat().st_size
    print(f"{path.name}: {size:,} bytes (budget {BUDGET[which]:,})")
    assert size <= BUDGET[which], f"{artifacts.arch} {which}: {size:,} bytes, over {BUDGET[which]:,}"


def test_the_debug_file_is_the_one_the_library_names(artifacts, tmp_path):
    # .gnu_debuglink: the file's name, NUL, padding to 4 bytes, its CRC-32.
    link = tmp_path / "debuglink"
    run([binutil(artifacts.arch, "objcopy"), f"--dump-section=.gnu_debuglink={link}",
         artifacts.library, tmp_path / "copy"])
    data = link.read_bytes()
    name = data.split(b"\0")[0]
    assert name.decode() == artifacts.debug.name
    crc = int.from_bytes(data[(len(name) + 4) // 4 * 4:][:4], "little")
    assert crc == zlib.crc32(artifacts.debug.read_bytes()), "the debug file's CRC differs"
    debug_sections = sections(artifacts.debug)
    assert ".debug_info" in debug_sections and ".debug_line" in debug_sections


def consumer_runs(binary, tmp_path, *, c=True, runner=(), **env):
    """Runs tests/install/consumer.c's program (c) or its C++ twin's (which
    takes no rate decision), by runner (qemu) if given, on a table of its
    own: the rated task's permits, once spent, are gone for seconds for
    every program on it."""
    scratch = tmp_path / f"scratch-{binary.name}"
    scratch.mkdir()
    environ = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    out = run([*runner, binary, scratch], env={**environ, **env})
    assert f"version {VERSION}\n" in out and "decisions ok" in out, out
    assert c == ("rate: 2 admitted, then refused\n" in out), out


def needed(binary):
    return re.findall(r"\(NEEDED\).*\[(.*)\]", run(["readelf", "-d", binary]))


# C, and C++17 on flowctrl.hpp: the compiler, the source, its flags.
LANGUAGES = {
    "c": ("cc", "consumer.c", ["-std=c99", "-Wall", "-Wextra", "-Werror"]),
    "c++": ("c++", "consumer.cpp", ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-pedantic"]),
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_program_builds_against_the_tarball_with_pkg_config(release, tmp_path, language):
    compiler, name, cflags = LANGUAGES[language]
    prefix = release.host.prefix
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib/pkgconfig")}
    assert run(["pkg-config", "--modversion", "flowctrl"], env=env).strip() == VERSION
    libdir = run(["pkg-config", "--variable=libdir", "flowctrl"], env=env).strip()
    assert Path(libdir).resolve() == (prefix / "lib").resolve()
    source = ROOT / "tests/install" / name

    shared = tmp_path / "consumer"
    flags = run(["pkg-config", "--cflags", "--libs", "flowctrl"], env=env).split()
    run([compiler, *cflags, source, "-o", shared, *flags], env=env)
    assert f"libflowctrl.so.{VERSION.split('.')[0]}" in needed(shared)
    consumer_runs(shared, tmp_path, c=language == "c", LD_LIBRARY_PATH=libdir)

    # The archive by its name (-lflowctrl would take the .so beside it),
    # with the system libraries Libs.private adds.
    static = tmp_path / "consumer_static"
    flags = run(["pkg-config", "--cflags", "--libs", "--static", "flowctrl"], env=env).split()
    flags = ["-l:libflowctrl.a" if f == "-lflowctrl" else f for f in flags]
    run([compiler, *cflags, source, "-o", static, *flags], env=env)
    assert not [lib for lib in needed(static) if "flowctrl" in lib]
    consumer_runs(static, tmp_path, c=language == "c")


def test_c_and_cpp_programs_build_against_the_tarball_with_cmake(release, tmp_path):
    # tests/install/cmake/ builds ../consumer.c and ../consumer.cpp: a copy
    # of the three, side by side.
    project = tmp_path / "project"
    shutil.copytree(ROOT / "tests/install/cmake", project / "cmake")
    for name in ("consumer.c", "consumer.cpp"):
        shutil.copy(ROOT / "tests/install" / name, project / name)
    build = tmp_path / "build"
    run(["cmake", "-S", project / "cmake", "-B", build, f"-DCMAKE_PREFIX_PATH={release.host.prefix}"])
    run(["cmake", "--build", build])
    assert (build / "flowctrl-version.txt").read_text() == VERSION
    for program in ("consumer", "consumer_static", "consumer_cpp", "consumer_cpp_static"):
        consumer_runs(build / program, tmp_path, c="cpp" not in program)


def test_a_c_program_runs_on_the_musl_tarball(release, tmp_path):
    """tests/install/consumer.c built by musl-gcc (Debian's musl-tools)
    against the unpacked musl tarball alone, with pkg-config: on the shared
    library, run by musl's loader, and -static on the archive, which
    carries its unwinder and needs -lc alone (as on Alpine, where the
    archive is the main use); run: a table, a concurrency cap and a rate
    refusing past their limits."""
    prefix = built(release, HOST, "musl").prefix
    assert shutil.which("musl-gcc"), "musl-gcc missing: scripts/setup.sh installs musl-tools"
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib/pkgconfig")}
    source = ROOT / "tests/install/consumer.c"
    cflags = LANGUAGES["c"][2]

    shared = tmp_path / "consumer"
    flags = run(["pkg-config", "--cflags", "--libs", "flowctrl"], env=env).split()
    run(["musl-gcc", *cflags, source, "-o", shared, *flags])
    assert needed(shared) == [f"libflowctrl.so.{VERSION.split('.')[0]}", "libc.so"]
    assert f"interpreter: /lib/ld-musl-{HOST}.so.1]" in run(["readelf", "-l", shared])
    consumer_runs(shared, tmp_path, LD_LIBRARY_PATH=str(prefix / "lib"))

    static = tmp_path / "consumer_static"
    flags = run(["pkg-config", "--cflags", "--libs", "--static", "flowctrl"], env=env).split()
    assert flags[-2:] == ["-lflowctrl", "-lc"], flags
    flags = ["-l:libflowctrl.a" if f == "-lflowctrl" else f for f in flags]
    run(["musl-gcc", "-static", *cflags, source, "-o", static, *flags])
    assert not needed(static) and "INTERP" not in run(["readelf", "-l", static])
    consumer_runs(static, tmp_path)


def test_the_wheel_installs_into_a_fresh_venv(release, tmp_path):
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])
    python = venv / "bin" / "python"
    run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
         "--no-index", "--no-deps", release.host.wheel])
    # Away from bindings/python: the installed package, not the sources.
    out = run([python, "-c", (
        "import flowctrl, sys\n"
        "task = flowctrl.Table(sys.argv[1]).task('release', max_concurrency=1)\n"
        "with task.acquire():\n"
        "    assert task.try_acquire() is None\n"
        "print(flowctrl.__file__)\n"
    ), tmp_path / "table"], cwd=tmp_path)
    assert Path(out.strip()).is_relative_to(venv), out


@pytest.mark.skipif(
    not os.environ.get("FLOWCTRL_FRESH_VENV"),
    reason="run by scripts/test.sh, which makes the venv (FLOWCTRL_FRESH_VENV)",
)
def test_the_suite_runs_on_the_wheel_in_a_fresh_venv(release):
    # scripts/test.sh made this venv for this run from the release wheel
    # and bindings/python/tests/requirements.txt alone: flowctrl is the
    # wheel's, installed there, not the sources nor the project's .venv.
    import importlib.metadata
    import json

    import flowctrl

    venv = Path(os.environ["FLOWCTRL_FRESH_VENV"]).resolve()
    assert Path(sys.prefix).resolve() == venv, sys.prefix
    assert Path(flowctrl.__file__).resolve().is_relative_to(venv), flowctrl.__file__
    origin = json.loads(importlib.metadata.distribution("flowctrl").read_text("direct_url.json"))
    assert origin["url"] == release.host.wheel.resolve().as_uri(), origin


QEMU = "qemu-aarch64-static"
AARCH64_GLIBC = Path("/usr/aarch64-linux-gnu")


def arm64_python(*args):
    """scripts/arm64-python.sh's words (the command of an aarch64 CPython
    under qemu, or --sysroot's path); skips where qemu-aarch64-static is
    missing or the script cannot make the sysroot (its exit 77)."""
    if not shutil.which(QEMU):
        pytest.skip(f"needs {QEMU}: apt-get install qemu-user-static")
    made = subprocess.run(["bash", ROOT / "scripts/arm64-python.sh", *args],
                          capture_output=True, text=True)
    if made.returncode == 77:
        pytest.skip(f"no aarch64 sysroot here (scripts/arm64-python.sh): {made.stderr.strip()}")
    assert made.returncode == 0, made.stderr
    return shlex.split(made.stdout)


def test_a_c_program_runs_on_the_aarch64_tarball_under_qemu(release, tmp_path):
    """tests/install/consumer.c cross-built by zig against the unpacked
    aarch64 tarball (as an aarch64 user's build, for glibc 2.17), shared
    and static, and run by qemu-user on Debian's aarch64 glibc
    (libc6-arm64-cross's, else scripts/arm64-python.sh's sysroot)."""
    if ("aarch64", "gnu") not in release.built:
        pytest.skip("aarch64 not built (see test_it_says_which_targets_it_did_not_build)")
    if not shutil.which(QEMU):
        pytest.skip(f"needs {QEMU}: apt-get install qemu-user-static")
    glibc = AARCH64_GLIBC
    if not (glibc / "lib/ld-linux-aarch64.so.1").exists():
        # Without libc6-arm64-cross: the arm64 libc6 of the Python sysroot.
        glibc = Path(arm64_python("--sysroot")[0])
    prefix = release.built[("aarch64", "gnu")].prefix
    # zig from the project's venv (scripts/setup.sh), as scripts/release.sh
    # uses it: scripts/test.sh runs this suite from a venv without it.
    zig_cc = [ROOT / ".venv/bin/python", "-m", "ziglang", "cc", "-target", "aarch64-linux-gnu.2.17",
              "-std=c99", "-Wall", "-Wextra", "-Werror", ROOT / "tests/install/consumer.c",
              f"-I{prefix / 'include'}"]
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib/pkgconfig")}
    static_libs = run(["pkg-config", "--libs", "--static", "flowctrl"], env=env).split()

    shared = tmp_path / "consumer"
    run([*zig_cc, "-o", shared, f"-L{prefix / 'lib'}", "-lflowctrl"])
    static = tmp_path / "consumer_static"
    run([*zig_cc, "-o", static, f"-L{prefix / 'lib'}",
         *["-l:libflowctrl.a" if f == "-lflowctrl" else f for f in static_libs if f.startswith("-l")]])
    for binary in (shared, static):
        assert "Machine:                           AArch64" in run(["readelf", "-h", binary])
    assert f"libflowctrl.so.{VERSION.split('.')[0]}" in needed(shared)
    assert not [lib for lib in needed(static) if "flowctrl" in lib]

    qemu = [QEMU, "-L", glibc, "-E", f"LD_LIBRARY_PATH={prefix / 'lib'}"]
    for binary in (shared, static):
        consumer_runs(binary, tmp_path, runner=qemu)


def test_a_static_c_program_runs_on_the_aarch64_musl_tarball_under_qemu(release, tmp_path):
    """tests/install/consumer.c cross-built by zig for aarch64 musl,
    -static on the unpacked aarch64 musl tarball's archive with
    pkg-config's flags (-lc alone: the archive carries its unwinder), and
    run by qemu-user, which a static program needs nothing else for. The
    aarch64 musl shared library is checked by readelf alone (there is no
    aarch64 musl loader here to run a program on it)."""
    if ("aarch64", "musl") not in release.built:
        pytest.skip("aarch64 musl not built (see test_it_says_which_targets_it_did_not_build)")
    if not shutil.which(QEMU):
        pytest.skip(f"needs {QEMU}: apt-get install qemu-user-static")
    prefix = release.built[("aarch64", "musl")].prefix
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib/pkgconfig")}
    flags = run(["pkg-config", "--cflags", "--libs", "--static", "flowctrl"], env=env).split()
    assert flags[-2:] == ["-lflowctrl", "-lc"], flags
    static = tmp_path / "consumer_static"
    run([ROOT / ".venv/bin/python", "-m", "ziglang", "cc", "-target", "aarch64-linux-musl", "-static",
         *LANGUAGES["c"][2], ROOT / "tests/install/consumer.c", "-o", static,
         *["-l:libflowctrl.a" if f == "-lflowctrl" else f for f in flags]])
    assert "Machine:                           AArch64" in run(["readelf", "-h", static])
    assert not needed(static) and "INTERP" not in run(["readelf", "-l", static])
    consumer_runs(static, tmp_path, runner=[QEMU])


# Run by an aarch64 CPython with the unpacked wheel on PYTHONPATH: the
# module imported from there and used, a table in argv[1].
AARCH64_SMOKE = """
import os, platform, sys, threading
import flowctrl

assert platform.machine() == "aarch64", platform.machine()
here = os.path.dirname(flowctrl._flowctrl.__file__)
assert here == os.path.join(sys.argv[2], "flowctrl"), here
print("version", flowctrl.__version__)
with flowctrl.Table(sys.argv[1]) as table:
    capped = table.task("capped", max_concurrency=2)
    first, second = capped.acquire(), capped.try_acquire()
    assert second is not None
    assert capped.try_acquire() is None
    try:
        capped.acquire()
        raise AssertionError("a third permit past a cap of 2")
    except flowctrl.Limited as e:
        assert (e.reason, e.retry_after) == ("concurrency", None), e
    # A waiter woken by another thread's release (the wait queue's futex).
    threading.Timer(0.2, second.release, ("dropped",)).start()
    with capped.acquire(timeout=30):
        pass
    first.release()
    s = capped.stats()
    # The waiter's tries count as refusals too: 2 at least.
    assert (s["admitted"], s["in_flight"]) == (3, 0) and s["limited_concurrency"] >= 2, s
    assert (s["released_success"], s["released_dropped"]) == (2, 1), s
    assert capped.check()["drift"] == 0

    rated = table.task("rated", local_rate=0.5, burst=2)
    rated.acquire(2).release()
    try:
        rated.acquire()
        raise AssertionError("admitted past the burst of 2 at 0.5/s")
    except flowctrl.Limited as e:
        assert e.reason == "local" and 0 < e.retry_after <= 2.0, (e.reason, e.retry_after)
    s = rated.stats()
    assert (s["admitted"], s["limited_local"]) == (2, 1), s
print("decisions ok")
"""


def test_the_aarch64_wheel_runs_under_qemu(release, tmp_path):
    """The aarch64 wheel unzipped (abi3: one module for CPython 3.9 and
    later) and imported by Debian's aarch64 CPython 3.11 under qemu-user,
    from the sysroot scripts/arm64-python.sh makes, then used: a table, a
    concurrency cap and a local rate refusing past their limits, a waiter
    woken by another thread's release, the stats."""
    if ("aarch64", "gnu") not in release.built:
        pytest.skip("aarch64 not built (see test_it_says_which_targets_it_did_not_build)")
    python = arm64_python()
    site = tmp_path / "wheel"
    with zipfile.ZipFile(release.built[("aarch64", "gnu")].wheel) as wheel:
        wheel.extractall(site)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    out = run([*python, "-c", AARCH64_SMOKE, tmp_path / "table", site], cwd=tmp_path,
              env={**environ, "PYTHONPATH": str(site), "PYTHONNOUSERSITE": "1"}, timeout=300)
    assert f"version {VERSION}\n" in out and "decisions ok" in out, out
