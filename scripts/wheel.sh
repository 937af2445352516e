#!/usr/bin/env bash
# Builds the Python module's wheel for PyPI, in release: maturin checks it
# against the manylinux policy below (its own auditwheel) and fails the
# build when the module needs newer glibc symbols or a library outside the
# policy.
#
#   scripts/wheel.sh [--out DIR]   (default target/wheels)
#
# The policy is manylinux_2_34, the lowest a build on this distribution
# (Debian 12, glibc 2.36) passes: Rust's std binds the pthread and dlsym
# symbols glibc 2.34 moved into libc, and stat64 & co. at 2.33. The wheel
# installs on glibc 2.34 and later (Debian 12, Ubuntu 22.04, RHEL 9) with
# pip 20.3 or later. The wheel for older systems (manylinux2014, glibc 2.17,
# linked by zig) is scripts/release.sh's.
#
# It reuses the cargo build of `pip install ./bindings/python` (the source
# install, which tags its wheel for this machine alone) when that is fresh.
# Needs maturin: scripts/setup.sh puts it in .venv.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
policy=manylinux_2_34
out=$root/target/wheels
while (($#)); do
    case $1 in
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
maturin=${MATURIN:-$root/.venv/bin/maturin}
[[ -x $maturin ]] || maturin=$(command -v maturin) || {
    echo "maturin not found: run scripts/setup.sh, or set MATURIN" >&2
    exit 1
}
"$maturin" build --release --compatibility "$policy" \
    --manifest-path "$root/bindings/python/Cargo.toml" --out "$out"
