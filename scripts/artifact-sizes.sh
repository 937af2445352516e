#!/usr/bin/env bash
# The release artifacts' sizes against their budgets (the stripped shared
# library and the wheel: 5 MB each, asserted by
# bindings/python/tests/test_release.py). Builds them with
# scripts/release.sh into target/release-dist (seconds when fresh; without
# the publish check; x86_64 and, when the script builds it, aarch64, on
# glibc and on musl) and writes benches/ARTIFACTS.md.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
dist="$ROOT/target/release-dist"
./scripts/release.sh --out "$dist" --no-publish-check >"$dist.log" 2>&1 || { cat "$dist.log"; exit 1; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
builds=()
for libc in gnu musl; do
    for arch in x86_64 aarch64; do
        [[ -e $dist/flowctrl-$version-$arch-linux-$libc.tar.gz ]] && builds+=("$arch-$libc")
    done
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
budget=5000000
size() { stat -c %s "$1"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.2f MB", b / 1000000 }'; }
row() { # <what> <file> [budget]
    local bytes
    bytes=$(size "$2")
    if [[ -n ${3:-} ]]; then
        ((bytes <= $3)) || { echo "$1: $bytes bytes, over its budget of $3" >&2; exit 1; }
        echo "| $1 | $bytes | $(mb "$bytes") | $(mb "$3") |"
    else
        echo "| $1 | $bytes | $(mb "$bytes") | |"
    fi
}
rows() { # <arch>-<libc>: its table's rows
    local arch=${1%-*} libc=${1#*-} name wheel module policy=manylinux
    name=flowctrl-$version-$arch-linux-$libc
    [[ $libc == gnu ]] || policy=musllinux
    tar -xzf "$dist/$name.tar.gz" -C "$tmp"
    wheel=$(ls "$dist"/flowctrl-"$version"-*-"$policy"*_"$arch".whl)
    module=$tmp/module-$1.so
    "$ROOT/.venv/bin/python" - "$wheel" "$module" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, open(sys.argv[2], "wb") as out:
    shutil.copyfileobj(wheel.open("flowctrl/_flowctrl.abi3.so"), out)
PY
    row "$1: lib/libflowctrl.so.$version (stripped)" "$tmp/$name/lib/libflowctrl.so.$version" "$budget"
    row "\`$(basename "$wheel")\`" "$wheel" "$budget"
    row "$1: the wheel's \`flowctrl/_flowctrl.abi3.so\` (stripped)" "$module"
    row "$1: lib/libflowctrl.a (symbols kept, debug info stripped)" "$tmp/$name/lib/libflowctrl.a"
    row "\`$name.tar.gz\`" "$dist/$name.tar.gz"
    row "\`$name-debug.tar.gz\`" "$dist/$name-debug.tar.gz"
}
table=$(for build in "${builds[@]}"; do rows "$build"; done)
{
    echo "# Release artifacts"
    echo
    echo "Measured $(date -u +%F) on $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $(rustc --version | cut -d' ' -f1-2), commit $(git rev-parse --short HEAD), by \`./scripts/artifact-sizes.sh\` (the artifacts of \`scripts/release.sh\`: $(sed "s/ /, /g; s/-gnu/ glibc 2.17/g; s/-musl/ musl/g" <<<"${builds[*]}")). Sizes in bytes; MB = 10^6 bytes."
    echo
    echo "| file | bytes | size | budget |"
    echo "| --- | ---: | ---: | ---: |"
    echo "$table"
    echo
    echo "The budgets are asserted by \`bindings/python/tests/test_release.py\` (\`test_within_its_size_budget\`), for each arch and C library built: \`./scripts/test.sh\` runs it on x86_64 alone, the test run by itself on both arches. The tarball is mostly the static archive, which has no budget: a program linked against it keeps only what it calls (the musl one also carries its unwinder, LLVM's libunwind, about 0.2 MB)."
} >benches/ARTIFACTS.md
cat benches/ARTIFACTS.md
