#!/usr/bin/env bash
# Builds the release artifacts, linked for glibc 2.17 and later (RHEL 8,
# Ubuntu 20.04, Debian 11, Amazon Linux 2 and newer), into dist/:
#
#   scripts/release.sh [--out DIR] [--no-aarch64] [--no-publish-check]
#   (default dist/)
#
# for x86_64 and aarch64 (<arch> below):
#
#   flowctrl-<version>-<arch>-linux-gnu.tar.gz
#       flowctrl-<version>-<arch>-linux-gnu/, the layout scripts/install.sh
#       installs (scripts/layout.sh writes both): include/flowctrl.h and
#       flowctrl.hpp; lib/libflowctrl.so.<version> (stripped) with the links
#       libflowctrl.so.0 (its SONAME) and libflowctrl.so; lib/libflowctrl.a
#       (its debug info stripped); lib/pkgconfig/flowctrl.pc, relocatable
#       (prefix=${pcfiledir}/../..); lib/cmake/flowctrl/ (find_package).
#   flowctrl-<version>-<arch>-linux-gnu-debug.tar.gz
#       the same directory's lib/.debug/libflowctrl.so.<version>.debug: the
#       shared library's debug info (objcopy --only-keep-debug), which the
#       stripped library names by its .gnu_debuglink (name and CRC). Unpack
#       it over the first and gdb, perf and eu-stack find it.
#   flowctrl-<version>-cp39-abi3-manylinux2014_<arch>.manylinux_2_17_<arch>.whl
#       the Python module, stripped, for CPython 3.9 and later.
#   SHA256SUMS
#
# Then `cargo publish --dry-run` (a clean checkout: it refuses uncommitted
# changes) packs the crate and builds it from its package, as crates.io
# will: a minute when target/ is warm. --no-publish-check leaves it out
# (scripts/test.sh and test_release.py do: the suite does not build the
# crate a second time).
#
# zig links both for glibc 2.17 (cargo-zigbuild for the library, maturin
# --zig for the wheel): the symbols this machine's glibc 2.36 would bind
# (2.34's pthread and dlsym, 2.33's stat64) are bound at their 2.17
# versions. The script fails when a file needs a later one.
#
# aarch64 is cross-built the same way (zig links for aarch64-linux-gnu.2.17)
# and stripped with binutils-aarch64-linux-gnu's objcopy. It needs the
# target's Rust standard library: when it is missing the script runs
# `rustup target add aarch64-unknown-linux-gnu`, and when that fails it
# builds x86_64 alone and says so. --no-aarch64 leaves aarch64 out
# (scripts/test.sh does: the suite checks x86_64, the full run both).
# musl (x86_64/aarch64-unknown-linux-musl) has no recipe yet; the script
# says what it did not build at its start and end.
#
# Needs the venv of scripts/setup.sh (maturin, ziglang, cargo-zigbuild),
# binutils, and for aarch64 binutils-aarch64-linux-gnu. The library builds
# in <target>/zig/lib, the module in <target>/zig/python: linked by
# different zig wrappers, in one directory each build would recompile the
# other's dependencies, and in target/ the host's build scripts and
# proc-macros of target/release. Both arches from nothing: about 9 minutes
# on 2 cores; x86_64 alone about 2.5; seconds when fresh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/dist
aarch64=1
publish_check=1
while (($#)); do
    case $1 in
    --out) out=$(realpath -m "${2:?--out needs a directory}"); shift 2 ;;
    --no-aarch64) aarch64=0; shift ;;
    --no-publish-check) publish_check=0; shift ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
glibc_floor=2.17
venv=$root/.venv
# cargo-zigbuild and maturin find zig as `python3 -m ziglang`: the venv's.
export PATH="$venv/bin:$PATH"
for tool in maturin cargo-zigbuild; do
    [[ -x $venv/bin/$tool ]] || { echo "$venv/bin/$tool not found: run scripts/setup.sh" >&2; exit 1; }
done
"$venv/bin/python" -m ziglang version >/dev/null 2>&1 || {
    echo "zig not found in $venv (the ziglang package): run scripts/setup.sh" >&2
    exit 1
}
for tool in objcopy readelf; do
    command -v $tool >/dev/null || { echo "$tool not found: install binutils" >&2; exit 1; }
done
cd "$root"
source "$root/scripts/layout.sh"
crate_metadata
python_version=$(cargo metadata --format-version 1 --no-deps --manifest-path bindings/python/Cargo.toml |
    sed -n 's/.*"workspace_members":\["[^"]*[#@]\([^"]*\)".*/\1/p')
[[ $python_version == "$version" ]] || {
    echo "the library is $version but the Python module $python_version: bindings/python/Cargo.toml" >&2
    exit 1
}
# Packing the same build again gives the same tarballs: the files' times
# are the commit's (or SOURCE_DATE_EPOCH's).
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
build_dir=$target_dir/zig
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$out"
rm -f "$out"/flowctrl-"$version"-* "$out/SHA256SUMS"

# What is not built here, said first and again at the end.
skipped=()
# A target's standard library is in the sysroot once rustup added it.
sysroot=$(rustc --print sysroot)
arches=(x86_64)
aarch64_std() { [[ -d $sysroot/lib/rustlib/aarch64-unknown-linux-gnu/lib ]]; }
if ((!aarch64)); then
    skipped+=("aarch64-unknown-linux-gnu: left out by --no-aarch64 (scripts/release.sh alone builds it)")
else
    if ! aarch64_std && command -v rustup >/dev/null; then
        echo "== the aarch64 Rust standard library is not installed: rustup target add aarch64-unknown-linux-gnu" >&2
        rustup target add aarch64-unknown-linux-gnu >&2 || echo "== rustup target add aarch64-unknown-linux-gnu failed" >&2
    fi
    if aarch64_std; then
        arches+=(aarch64)
    else
        skipped+=("aarch64-unknown-linux-gnu: its Rust standard library is not installed here (rustup target add aarch64-unknown-linux-gnu; with it, this script builds aarch64 too)")
    fi
fi
# This machine's binutils read and strip its own arch; another's needs that
# arch's (binutils-aarch64-linux-gnu: aarch64-linux-gnu-objcopy).
host_arch=$(uname -m)
objcopy_for() { # <arch>
    if [[ $1 == "$host_arch" ]]; then echo objcopy; else echo "$1-linux-gnu-objcopy"; fi
}
for arch in "${arches[@]}"; do
    command -v "$(objcopy_for "$arch")" >/dev/null || {
        echo "$(objcopy_for "$arch") not found: install binutils-$arch-linux-gnu (scripts/setup.sh does)" >&2
        exit 1
    }
done
skipped+=("x86_64-unknown-linux-musl, aarch64-unknown-linux-musl: no recipe yet (rustup target add <target>; a musllinux_1_2 wheel; the cdylib needs -C target-feature=-crt-static)")
for why in "${skipped[@]}"; do echo "== not built: $why" >&2; done

# The highest GLIBC_x.y version FILE's dynamic symbols need (readelf reads
# any arch's ELF).
glibc_needed() {
    readelf --dyn-syms -W "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1
}
check_floor() {
    local needs
    needs=$(glibc_needed "$1")
    if [[ $(printf '%s\n%s\n' "$needs" "$glibc_floor" | sort -V | tail -n 1) != "$glibc_floor" ]]; then
        echo "$1 needs glibc $needs, above $glibc_floor" >&2
        return 1
    fi
    echo "$(basename "$1"): glibc $needs at most"
}
tarball() { # <dir under $stage/<kind>> <file>
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$(dirname "$1")" -cf - "$(basename "$1")" | gzip -9n >"$2"
}

release() { # <arch>
    local arch=$1 triple=$1-unknown-linux-gnu name log native built dest debug real module objcopy
    name=flowctrl-$version-$arch-linux-gnu

    # The library: one build gives the .so, the .a and the system libraries
    # the archive needs. Without the default features (the command's, and
    # the header's generation): the C ABI is the same, with less to build.
    echo "== the library for $triple, glibc $glibc_floor"
    log=$stage/cargo-$arch.log
    CARGO_TARGET_DIR=$build_dir/lib cargo-zigbuild rustc --locked --release --lib \
        --no-default-features --target "$triple.$glibc_floor" --color never \
        -- --print native-static-libs 2>&1 | tee "$log" >&2
    native=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
    [[ -n $native ]] || { echo "rustc printed no native-static-libs: see the build output above" >&2; return 1; }
    built=$build_dir/lib/$triple/release
    check_floor "$built/libflowctrl.so"

    dest=$stage/lib/$name
    debug=$stage/debug/$name/lib/.debug
    real=libflowctrl.so.$version
    install_layout "$built/libflowctrl.so" "$built/libflowctrl.a" "$dest" '${pcfiledir}/../..' "$native"
    # The debug info apart; the library keeps its name and CRC
    # (.gnu_debuglink), found beside it in .debug/ (not in lib/ itself:
    # ldconfig would take lib*.so.* there for a library).
    mkdir -p "$debug"
    objcopy=$(objcopy_for "$arch")
    $objcopy --only-keep-debug "$dest/lib/$real" "$debug/$real.debug"
    chmod 644 "$debug/$real.debug"
    $objcopy --strip-all --add-gnu-debuglink="$debug/$real.debug" "$dest/lib/$real"
    # The archive keeps the symbols a link needs, not the debug info
    # (about 100 MB of it).
    $objcopy --strip-debug "$dest/lib/libflowctrl.a"
    tarball "$dest" "$out/$name.tar.gz"
    tarball "$stage/debug/$name" "$out/$name-debug.tar.gz"

    # The Python module: maturin checks it against manylinux2014 and tags
    # the wheel so. Without debug info (stripped anyway): less to build.
    # Its zip entries are dated SOURCE_DATE_EPOCH only when the caller set
    # it: cc-rs recompiles ring's C code whenever that variable changes, so
    # the commit's time would rebuild the module at every commit (a minute).
    echo "== the Python module for $triple, manylinux2014 (glibc $glibc_floor)"
    CARGO_PROFILE_RELEASE_DEBUG=false maturin build --locked --release --strip \
        --zig --compatibility manylinux2014 --target "$triple" \
        --manifest-path bindings/python/Cargo.toml \
        --target-dir "$build_dir/python" --out "$out" --color never >&2
    module=$stage/module-$arch.so
    "$venv/bin/python" - "$out"/flowctrl-"$version"-*"_$arch.whl" "$module" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(wheel.open("flowctrl/_flowctrl.abi3.so"), out)
EOF
    check_floor "$module"
}

for arch in "${arches[@]}"; do release "$arch"; done
(cd "$out" && sha256sum flowctrl-"$version"-* >SHA256SUMS)

if ((publish_check)); then
    echo "== cargo publish --dry-run (the crate built from its package)"
    cargo publish --dry-run --locked --color never >&2
fi

echo "== in $out"
(cd "$out" && ls -l flowctrl-"$version"-* SHA256SUMS | awk '{printf "%10d  %s\n", $5, $9}')
for why in "${skipped[@]}"; do echo "not built: $why"; done
