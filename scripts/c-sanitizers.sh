#!/usr/bin/env bash
# Builds the C and C++ test programs of tests/c with AddressSanitizer and
# UndefinedBehaviorSanitizer against libflowctrl.so, and runs them.
#
#   scripts/c-sanitizers.sh [--lib-dir DIR] [--out DIR]
#
#   --lib-dir DIR  where libflowctrl.so is (tests/c_abi.rs passes
#                  target/<profile>/deps); without it, `cargo build --lib`
#                  builds it into target/debug first.
#   --out DIR      where binaries and logs go (default target/c-sanitizers).
#
# $CC and $CXX name the compilers (default cc and c++), as in tests/c_abi.rs.
#
# The sanitizer runtimes are linked into the test executables by the compiler
# driver (-fsanitize at link time), not LD_PRELOADed. The Rust library is not
# instrumented, but its mallocs and frees go through ASan's interceptors, so
# heap misuse across the boundary and leaks are still caught; UBSan checks
# the C and C++ code.
#
# Exit status: 0 = every program passed; 77 = skipped, the compiler cannot
# build or run a sanitized program here (the reason is printed); anything
# else = a failure.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
lib_dir=
out=
while (($#)); do
    case $1 in
    --lib-dir) lib_dir=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h | --help) sed -n '2,/^set -e/{/^set -e/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done
target=${CARGO_TARGET_DIR:-$root/target}
if [[ -z $lib_dir ]]; then
    (cd "$root" && cargo build --lib)
    lib_dir=$target/debug
fi
out=${out:-$target/c-sanitizers}
lib_dir=$(cd "$lib_dir" && pwd)
if [[ ! -f $lib_dir/libflowctrl.so ]]; then
    echo "no libflowctrl.so in $lib_dir" >&2
    exit 1
fi
mkdir -p "$out/lib"
out=$(cd "$out" && pwd)

read -r -a cc <<<"${CC:-cc}"
read -r -a cxx <<<"${CXX:-c++}"
sanitize=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1)
warnings=(-Wall -Wextra -Werror -pedantic)
# The programs record the library's SONAME (build.rs sets it); a build tree
# has only libflowctrl.so, so they find it through a link of that name.
soname=$(readelf -d "$lib_dir/libflowctrl.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[[ -n $soname ]] || { echo "no SONAME in $lib_dir/libflowctrl.so (readelf -d)" >&2; exit 1; }
ln -sfn "$lib_dir/libflowctrl.so" "$out/lib/$soname"
link=(-L"$lib_dir" -lflowctrl -Wl,-rpath,"$out/lib")
# The rpath names the library to test; an inherited LD_LIBRARY_PATH (cargo
# sets one) could put a stale copy first.
unset LD_LIBRARY_PATH
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# Can each compiler build and run a sanitized program here at all?
probe() {
    local what=$1 ext=$2
    shift 2
    local src=$out/probe-$what.$ext bin=$out/probe-$what why
    printf 'int main(void) { return 0; }\n' >"$src"
    if ! why=$("$@" "${sanitize[@]}" "$src" -o "$bin" 2>&1); then
        printf 'skip: %s cannot build with %s:\n%s\n' "$*" "${sanitize[*]}" "$why"
        exit 77
    fi
    if ! why=$("$bin" 2>&1); then
        printf 'skip: a sanitized program does not run here:\n%s\n' "$why"
        exit 77
    fi
}
probe c c "${cc[@]}"
probe cpp cpp "${cxx[@]}"

failed=()

# run_one NAME SOURCE INCLUDE-DIR COMPILER... -std=...
run_one() {
    local name=$1 source=$2 include=$3
    shift 3
    local binary=$out/$name log=$out/$name.log scratch rc=0
    echo "== $name: build"
    "$@" "${warnings[@]}" "${sanitize[@]}" -pthread -I"$root/$include" \
        "$root/tests/c/$source" -o "$binary" "${link[@]}"
    scratch=$(mktemp -d "${TMPDIR:-/tmp}/flowctrl-sanitized-$name.XXXXXX")
    # abi_test runs a child as uid 65534 when run as root: it must get in.
    chmod 711 "$scratch"
    echo "== $name: run under ASan+UBSan ($log)"
    timeout 300 "$binary" "$scratch" >"$log" 2>&1 || rc=$?
    if ((rc == 0)); then
        tail -n 1 "$log"
        rm -rf "$scratch"
    else
        echo "FAIL: $name exited with status $rc; its files are in $scratch; the end of its log:"
        tail -n 60 "$log"
        failed+=("$name")
    fi
}

run_one abi_test_c abi_test.c include "${cc[@]}" -std=c99
run_one abi_test_cpp abi_test.cpp include "${cxx[@]}" -std=c++11
run_one hpp_test hpp_test.cpp include "${cxx[@]}" -std=c++17
run_one compat_v1 compat_v1.c tests/c "${cc[@]}" -std=c99
run_one compat_v0_3 compat_v0_3.c tests/c "${cc[@]}" -std=c99
run_one adaptive_test adaptive_test.c include "${cc[@]}" -std=c99
run_one log_test log_test.c include "${cc[@]}" -std=c99

if ((${#failed[@]})); then
    echo "failed under sanitizers: ${failed[*]}"
    exit 1
fi
echo "all C and C++ test programs passed under ASan+UBSan"
