# The installed layout of the C library, sourced by scripts/install.sh (a
# prefix on this machine) and scripts/release.sh (a tarball unpacked
# anywhere): one place writes the files, the links and the pkg-config and
# CMake files, so the two cannot drift apart.
#
#   crate_metadata
#       sets version (x.y.z, from Cargo.toml), major, and target_dir (cargo's
#       target directory), from one `cargo metadata --no-deps` in the current
#       directory (no resolution: nothing to fetch before the build).
#
#   install_layout SO ARCHIVE DEST PC_PREFIX NATIVE
#       DEST/include/flowctrl.h, flowctrl.hpp
#       DEST/lib/libflowctrl.so.<version> (a copy of SO), the links
#         libflowctrl.so.<major> (its SONAME, read from SO) and libflowctrl.so
#       DEST/lib/libflowctrl.a (a copy of ARCHIVE)
#       DEST/lib/pkgconfig/flowctrl.pc, its prefix= line PC_PREFIX (a path,
#         or '${pcfiledir}/../..' for a tree that may move)
#       DEST/lib/cmake/flowctrl/flowctrlConfig.cmake and
#         flowctrlConfigVersion.cmake (paths found from the file's own place)
#       NATIVE: the system libraries the archive needs, as rustc's
#       `--print native-static-libs` names them (-lgcc_s -lutil ...).
#       Needs $version and $major (crate_metadata), readelf, and the
#       headers in include/ of the current directory.

crate_metadata() {
    local meta id
    meta=$("${CARGO:-cargo}" metadata --format-version 1 --no-deps)
    target_dir=$(sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p' <<<"$meta")
    # path+file:///src/flowctrl#0.3.0, or ...#flowctrl@0.3.0
    id=$(sed -n 's/.*"workspace_members":\["\([^"]*\)".*/\1/p' <<<"$meta")
    version=${id##*[#@]}
    [[ $version =~ ^([0-9]+)\.[0-9]+\.[0-9]+$ ]] || {
        echo "cannot install version '$version' (from '$id'): expected x.y.z" >&2
        return 1
    }
    major=${BASH_REMATCH[1]}
}

install_layout() {
    local so=$1 archive=$2 dest=$3 pc_prefix=$4 native=$5
    local soname real file
    for file in "$so" "$archive"; do
        [[ -f $file ]] || { echo "the build left no $file" >&2; return 1; }
    done
    [[ -n $native ]] || { echo "no native-static-libs for $archive" >&2; return 1; }
    command -v readelf >/dev/null || { echo "readelf not found: install binutils" >&2; return 1; }
    soname=$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
    real=libflowctrl.so.$version
    # The file a SONAME link points to carries the same number first.
    [[ -n $soname && $real == "$soname".* ]] || {
        echo "$so has SONAME '$soname', which does not name $real: see SONAME in build.rs" >&2
        return 1
    }

    install -d "$dest/include" "$dest/lib/pkgconfig" "$dest/lib/cmake/flowctrl"
    install -m 644 include/flowctrl.h "$dest/include/flowctrl.h"
    install -m 644 include/flowctrl.hpp "$dest/include/flowctrl.hpp"
    install -m 755 "$so" "$dest/lib/$real"
    ln -sfn "$real" "$dest/lib/$soname"
    ln -sfn "$soname" "$dest/lib/libflowctrl.so"
    install -m 644 "$archive" "$dest/lib/libflowctrl.a"

    cat >"$dest/lib/pkgconfig/flowctrl.pc" <<EOF
prefix=$pc_prefix
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

    # The targets' paths are found from the file's own place, so a staged
    # tree (--destdir) or an unpacked tarball works wherever it is.
    cat >"$dest/lib/cmake/flowctrl/flowctrlConfig.cmake" <<EOF
# flowctrl $version, written by scripts/layout.sh. Imported targets:
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
# flowctrl $version, written by scripts/layout.sh.
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
}
