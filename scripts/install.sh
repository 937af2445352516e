#!/usr/bin/env bash
# Builds the C library (cargo, release) and installs it for C and C++
# programs, as cargo-c would (without needing it: it takes many minutes to
# build):
#
#   scripts/install.sh [--prefix DIR] [--destdir DIR]
#
#   --prefix DIR   where it goes (default /usr/local):
#                    DIR/include/flowctrl.h, and flowctrl.hpp (C++17, header-only)
#                    DIR/lib/libflowctrl.so.X.Y.Z, with the links
#                      libflowctrl.so.0 (its SONAME) and libflowctrl.so
#                    DIR/lib/libflowctrl.a
#                    DIR/lib/pkgconfig/flowctrl.pc
#                    DIR/lib/cmake/flowctrl/flowctrlConfig.cmake and
#                      flowctrlConfigVersion.cmake (find_package(flowctrl))
#   --destdir DIR  stage the files under DIR/<prefix> (for a package); the
#                  files still name <prefix>. $DESTDIR does the same.
#
# Needs cargo, and readelf (binutils) to read the SONAME the library was
# linked with (build.rs sets it). After installing into a directory the
# loader searches, run `ldconfig`.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
destdir=${DESTDIR:-}
while (($#)); do
    case $1 in
    --prefix) prefix=${2:?--prefix needs a directory}; shift 2 ;;
    --destdir) destdir=${2:?--destdir needs a directory}; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
# The pkg-config and CMake files name the prefix: it must not depend on
# where they are read from.
[[ $prefix == /* ]] || { echo "--prefix must be an absolute path, not $prefix" >&2; exit 2; }
prefix=${prefix%/}
command -v readelf >/dev/null || { echo "readelf not found: install binutils" >&2; exit 1; }
cargo=${CARGO:-cargo}
cd "$root"
# What is installed and how: scripts/layout.sh (scripts/release.sh's too).
source "$root/scripts/layout.sh"
crate_metadata

# One build gives the shared library, the archive, and the system libraries
# the archive needs (rustc prints them; cargo replays the note when the
# build is fresh). Without the default features, as scripts/release.sh
# builds it: the C ABI is the same, and the command, the header's
# generation (the committed header is installed) and the Prometheus text
# are not built. Its extra argument makes it another build of the crate
# than `cargo build --release`'s: alternating the two recompiles the crate
# alone, a few seconds.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== cargo rustc --release --lib"
"$cargo" rustc --release --lib --no-default-features --color never -- --print native-static-libs 2>&1 | tee "$log" >&2
native=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
[[ -n $native ]] || { echo "rustc printed no native-static-libs: see the build output above" >&2; exit 1; }

built=$target_dir/release
dest=$destdir$prefix
echo "== installing flowctrl $version into $dest"
install_layout "$built/libflowctrl.so" "$built/libflowctrl.a" "$dest" "$prefix" "$native"
echo "installed flowctrl $version into $dest: pkg-config flowctrl, find_package(flowctrl)"
