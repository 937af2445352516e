#!/usr/bin/env bash
# Runs every test: style checks; Rust unit and integration tests (multi-process
# tests, a kill storm of 150 SIGKILLs, regression tests, fuzzed table files,
# and the C/C++ programs compiled against include/flowctrl.h (the C++
# header's test with clang++ too), linked shared
# and static and once under ASan+UBSan; the install script, with CMake and
# pkg-config programs built against what it installed); the loom model of
# the concurrency ledger and of the wait queue; the global-quota simulation's budgets at 1,000
# hosts (sim/, built optimized); and the x86_64 release artifacts for glibc
# 2.17 (scripts/release.sh --no-aarch64 --no-musl; its full run adds
# aarch64 and musl, which bindings/python/tests/test_release.py checks when
# run after it), whose wheel the Python module's pytest suite runs on from
# a venv made afresh for it, with mypy's stubtest, the wheel's manylinux
# check, the size budgets, the tarball used from C and C++ with pkg-config
# and CMake, and the
# wheel in a fresh venv. The deployment
# recipes run in both: C++ pre-fork and thread-pool servers in
# tests/recipes.rs, gunicorn and uvicorn in bindings/python/tests/test_recipes.py.
# The documentation is checked with the Rust tests (tests/docs.rs): every
# relative link and anchor of README.md, ARCHITECTURE.md, CHANGELOG.md,
# docs/ and benches/ resolves, and the README stays under 200 lines. What
# each script and longer run does: docs/guide/install.md.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"

# Each stage says how long it took (where a CI run's time goes).
stage() {
    echo "== (${SECONDS} s so far) $1"
}
stage "style"
cargo fmt --all -- --check
(cd bindings/python && cargo fmt -- --check)
# The library and the command as users build them (default features), then
# every target once with the optional faces and the simulator: the
# workspace's features unify, so the library is checked with async, tower
# and sim, and the tests, benchmarks and examples are checked there alone
# (the suite builds them with those features only).
cargo clippy -q --lib --bins -- -D warnings
cargo clippy -q --workspace --all-targets --features async,tower -- -D warnings
(cd bindings/python && cargo clippy -q --all-targets -- -D warnings)

stage "Rust, C and C++ (kill storm, regressions, fuzz cases, C/C++ programs also under ASan+UBSan)"
# With the optional faces' features, so the library is built once for
# every test (the async and tower tests and the middleware guide's doc
# test need them). Under cargo-nextest: each test a process of its own,
# several at a time, the timed ones apart (.config/nextest.toml). The doc
# tests, which nextest does not run, after.
# The library as scripts/install.sh builds it (release, no default
# features) first: the install tests then find it built rather than build
# it beside the others, whose store timeouts a release build outlasts.
if ! cargo rustc -q --release --lib --no-default-features -- --print native-static-libs \
    >"$ROOT/target/install-build.log" 2>&1; then
    cat "$ROOT/target/install-build.log"
    exit 1
fi
cargo nextest run --features async,tower
cargo test -q --doc --features async,tower

stage "the loom models beside the global-quota simulation (1,000 hosts), then the release build"
# The loom models run one at a time on one core; the simulation's budgets
# (its scenarios in parallel processes) take the other meanwhile, and the
# release build (its own target directories) once they are done. The loom
# models and the simulation are deterministic: neither's figures depend on
# the other's load. Both built first, one after the other, then run
# together.
cargo test -q --release --no-default-features --features loom --lib --no-run
cargo test -q --release -p flowctrl-sim --no-run
loom_log="$ROOT/target/loom.log"
# Each in a process group of its own (setsid; -w keeps its exit status),
# stopped whole if the run ends first: a job's cargo and compilers with it.
setsid -w ./scripts/loom.sh >"$loom_log" 2>&1 &
loom=$!
release=
trap 'kill -- ${loom:+-"$loom"} ${release:+-"$release"} 2>/dev/null || true' EXIT
if ! cargo test -q --release -p flowctrl-sim; then
    exit 1
fi
# The Python stage's release artifacts (below), built meanwhile.
dist="$ROOT/target/release-dist"
setsid -w ./scripts/release.sh --out "$dist" --no-aarch64 --no-musl --no-publish-check >"$dist.log" 2>&1 &
release=$!
if ! wait "$loom"; then
    cat "$loom_log"
    echo "the loom models failed" >&2
    exit 1
fi
loom=
cat "$loom_log"

stage "Python (on the release wheel, built for glibc 2.17 by scripts/release.sh, in a fresh venv)"
# The tests run on the wheel users install, in a venv made afresh from it
# and the tests' requirements alone: one release build of the module, not a
# second one from source, and nothing of .venv importable. The requirements'
# wheels are downloaded once per version of their file, into target/: the
# venv then costs 8 to 15 seconds, offline (reinstalling the wheel into .venv
# took half a second). x86_64 on glibc alone: the aarch64 and musl
# artifacts (minutes more from nothing) are built by scripts/release.sh and
# checked by bindings/python/tests/test_release.py when each is run alone.
if ! wait "$release"; then
    cat "$dist.log"
    exit 1
fi
release=
requirements=bindings/python/tests/requirements.txt
wheelhouse="$ROOT/target/python-test-wheels/$(sha256sum "$requirements" | cut -c1-16)"
fresh="$ROOT/target/wheel-venv"
rm -rf "$fresh"
# Without pip of its own (ensurepip alone takes 5 s): .venv's pip installs
# into it, running as its interpreter.
python3 -m venv --without-pip "$fresh"
fresh_pip=("$VENV/bin/python" -m pip --python "$fresh/bin/python" -q --disable-pip-version-check)
if [ ! -d "$wheelhouse" ]; then
    rm -rf "$wheelhouse.part"
    "${fresh_pip[@]}" download -d "$wheelhouse.part" -r "$requirements"
    mv "$wheelhouse.part" "$wheelhouse"
fi
# The glibc wheel: the musl one is for musl's CPython.
"${fresh_pip[@]}" install --no-index --find-links "$wheelhouse" -r "$requirements" "$dist"/flowctrl-*-manylinux*.whl
FLOWCTRL_RELEASE_DIR="$dist" FLOWCTRL_RELEASE_LOG="$dist.log" FLOWCTRL_FRESH_VENV="$fresh" \
    "$fresh/bin/python" -m pytest -q bindings/python/tests
echo "all tests passed in ${SECONDS} s"
