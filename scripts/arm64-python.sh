#!/usr/bin/env bash
# An aarch64 CPython 3.11 for this x86_64 machine, run by qemu-user: Debian's
# arm64 packages of the interpreter and the libraries it loads, unpacked
# with `dpkg -x` into one directory (a sysroot; nothing is installed, the
# host's python is not touched). Prints the command that runs it, one line,
# shell-quoted:
#
#   scripts/arm64-python.sh [--sysroot]
#   $(scripts/arm64-python.sh) -c 'import platform; print(platform.machine())'
#
#   --sysroot  prints the sysroot's path instead.
#
# The sysroot is kept in <target>/arm64-python/<key>/, keyed by the package
# list below: the first run asks Debian's registry for the packages (as
# root it runs `dpkg --add-architecture arm64` and `apt-get update` when
# apt cannot see them yet, and installs qemu-user-static when
# qemu-aarch64-static is missing: under a minute); later runs are
# offline and take milliseconds. bindings/python/tests/test_release.py
# runs the aarch64 wheel's module with it.
#
# Exit status: 0 = printed; 77 = cannot be had here (not root, no apt-get,
# or no qemu: the reason is printed); anything else = a failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
what="command"
while (($#)); do
    case $1 in
    --sysroot) what=sysroot; shift ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
# The interpreter and its standard library, the C libraries they and the
# module (_flowctrl.abi3.so: libc, libm, libpthread, libdl) load, and those
# of the standard library's extension modules an import may reach (zlib,
# pyexpat, ctypes, ssl and hashlib).
packages=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
    libc6 libgcc-s1 zlib1g libexpat1 libffi8 libssl3)
qemu="qemu-aarch64-static"
skip() { echo "$*" >&2; exit 77; }

target=${CARGO_TARGET_DIR:-$root/target}
key=$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16)
sysroot=$target/arm64-python/$key
python=$sysroot/usr/bin/python3.11

as_root() {
    if [[ $(id -u) == 0 ]]; then "$@"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then sudo "$@"
    else skip "needs root (or sudo) for: $*"
    fi
}
if ! command -v $qemu >/dev/null; then
    command -v apt-get >/dev/null ||
        skip "$qemu not found (qemu-user-static) and no apt-get to install it"
    echo "== $qemu not found: apt-get install qemu-user-static" >&2
    as_root apt-get update -qq >&2
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static >/dev/null
fi

if [[ ! -x $python ]]; then
    if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then
        skip "no apt-get and dpkg: the sysroot is made of Debian's arm64 packages"
    fi
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        echo "== dpkg --add-architecture arm64" >&2
        as_root dpkg --add-architecture arm64
    fi
    if ! apt-cache show python3.11-minimal:arm64 >/dev/null 2>&1; then
        echo "== apt-get update (arm64's package lists)" >&2
        as_root apt-get update -qq >&2
    fi
    part=$sysroot.part
    rm -rf "$part"
    mkdir -p "$part/debs" "$part/root"
    echo "== the arm64 packages: ${packages[*]}" >&2
    (cd "$part/debs" && apt-get download -qq "${packages[@]/%/:arm64}" >&2)
    for deb in "$part"/debs/*.deb; do dpkg -x "$deb" "$part/root"; done
    # The versions taken, for whoever wonders what this sysroot is.
    (cd "$part/debs" && ls) >"$part/root/PACKAGES"
    rm -rf "$part/debs" "$sysroot"
    mv "$part/root" "$sysroot"
    rmdir "$part"
fi

if [[ $what == sysroot ]]; then
    printf '%q\n' "$sysroot"
else
    printf '%q -L %q %q\n' "$(command -v $qemu)" "$sysroot" "$python"
fi
