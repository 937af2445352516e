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

# Without the dependencies: nothing to fetch yet.
meta=$("$cargo" metadata --format-version 1 --no-deps)
target=$(sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p' <<<"$meta")
# path+file:///src/flowctrl#0.3.0, or ...#flowctrl@0.3.0
id=$(sed -n 's/.*"workspace_members":\["\([^"]*\)".*/\1/p' <<<"$meta")
version=${id##*[#@]}
[[ $version =~ ^([0-9]+)\.[0-9]+\.[0-9]+$ ]] || {
    echo "cannot install version '$version' (from '$id'): expected x.y.z" >&2
    exit 1
}
major=${BASH_REMATCH[1]}

# One build gives the shared library, the archive, and the system libraries
# the archive needs (rustc prints them; cargo replays the note when the
# build is fresh). Its extra argument makes it another build of the crate
# than `cargo build --release`'s: alternating the two recompiles the crate
# alone, a few seconds.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "== cargo rustc --release --lib"
"$cargo" rustc --release --lib --color never -- --print native-static-libs 2>&1 | tee "$log" >&2
native=$(sed -n 's/^note: native-static-libs: //p' "$log" | tail -n 1)
[[ -n $native ]] || { echo "rustc printed no native-static-libs: see the build output above" >&2; exit 1; }

built=$target/release
for file in libflowctrl.so libflowctrl.a; do
    [[ -f $built/$file ]] || { echo "the build left no $built/$file" >&2; exit 1; }
done
soname=$(readelf -d "$built/libflowctrl.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
real=libflowctrl.so.$version
# The file a SONAME link points to carries the same number first.
[[ -n $soname && $real == "$soname".* ]] || {
    echo "$built/libflowctrl.so has SONAME '$soname', which does not name $real: see SONAME in build.rs" >&2
    exit 1
}

dest=$destdir$prefix
echo "== installing flowctrl $version into $dest"
install -d "$dest/include" "$dest/lib/pkgconfig" "$dest/lib/cmake/flowctrl"
install -m 644 include/flowctrl.h "$dest/include/flowctrl.h"
install -m 644 include/flowctrl.hpp "$dest/include/flowctrl.hpp"
install -m 755 "$built/libflowctrl.so" "$dest/lib/$real"
ln -sfn "$real" "$dest/lib/$soname"
ln -sfn "$soname" "$dest/lib/libflowctrl.so"
install -m 644 "$built/libflowctrl.a" "$dest/lib/libflowctrl.a"

cat >"$dest/lib/pkgconfig/flowctrl.pc" <<EOF
prefix=$prefix
exec_prefix=\${prefix}
libdir=\${exec_prefix}/lib
includedir=\${prefix}/include

Name: flowctrl
Description: Host-wide flow control: rate and concurrency limits shared by every process on a host
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lflowctrl
Libs.private: $native
EOF

# The targets' paths are found from the file's own place, so a staged tree
# (--destdir) works wherever it is unpacked.
cat >"$dest/lib/cmake/flowctrl/flowctrlConfig.cmake" <<EOF
# flowctrl $version, written by scripts/install.sh. Imported targets:
#   flowctrl::flowctrl         the shared library ($soname)
#   flowctrl::flowctrl_static  the archive, with the system libraries it needs
get_filename_component(_flowctrl_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET flowctrl::flowctrl)
  add_library(flowctrl::flowctrl SHARED IMPORTED)
  set_target_properties(flowctrl::flowctrl PROPERTIES
    IMPORTED_LOCATION "\${_flowctrl_prefix}/lib/$real"
    IMPORTED_SONAME "$soname"
    INTERFACE_INCLUDE_DIRECTORIES "\${_flowctrl_prefix}/include")
endif()
if(NOT TARGET flowctrl::flowctrl_static)
  add_library(flowctrl::flowctrl_static STATIC IMPORTED)
  set_target_properties(flowctrl::flowctrl_static PROPERTIES
    IMPORTED_LOCATION "\${_flowctrl_prefix}/lib/libflowctrl.a"
    IMPORTED_LINK_INTERFACE_LANGUAGES "C"
    INTERFACE_INCLUDE_DIRECTORIES "\${_flowctrl_prefix}/include"
    INTERFACE_LINK_LIBRARIES "$(sed 's/^-l//; s/ -l/;/g' <<<"$native")")
endif()
unset(_flowctrl_prefix)
EOF

# Compatible: the same major version (the SONAME's) and at least the one
# asked for; the upper end of a range (find_package(flowctrl 0.3...0.5))
# holds too.
cat >"$dest/lib/cmake/flowctrl/flowctrlConfigVersion.cmake" <<EOF
# flowctrl $version, written by scripts/install.sh.
set(PACKAGE_VERSION "$version")
if(PACKAGE_FIND_VERSION_RANGE)
  set(_flowctrl_min "\${PACKAGE_FIND_VERSION_MIN}")
else()
  set(_flowctrl_min "\${PACKAGE_FIND_VERSION}")
endif()
string(REGEX MATCH "^[0-9]+" _flowctrl_min_major "\${_flowctrl_min}")
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(NOT _flowctrl_min_major STREQUAL "$major" OR PACKAGE_VERSION VERSION_LESS _flowctrl_min)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "INCLUDE"
    AND PACKAGE_VERSION VERSION_GREATER PACKAGE_FIND_VERSION_MAX)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "EXCLUDE"
    AND NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION_MAX)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_VERSION VERSION_EQUAL _flowctrl_min)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
unset(_flowctrl_min)
unset(_flowctrl_min_major)
# A 64-bit library: of no use to a 32-bit build.
if(NOT CMAKE_SIZEOF_VOID_P STREQUAL "8")
  set(PACKAGE_VERSION "$version (64-bit)")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
endif()
EOF

echo "installed flowctrl $version into $dest: pkg-config flowctrl, find_package(flowctrl)"
