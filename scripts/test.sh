#!/usr/bin/env bash
# Runs every test: Rust unit and integration tests (with multi-process tests
# and the C/C++ programs compiled against include/flowctrl.h, linked both
# shared and static), style checks, and the Python module's pytest suite.
set -euo pipefail
source "$(dirname "$0")/setup.sh"
cd "$ROOT"

echo "== style"
cargo fmt --all -- --check
(cd bindings/python && cargo fmt -- --check)
cargo clippy -q --all-targets -- -D warnings
(cd bindings/python && cargo clippy -q --all-targets -- -D warnings)

echo "== Rust, C and C++"
cargo test

echo "== Python"
install_python_module
"$VENV/bin/python" -m pytest -q bindings/python/tests
echo "all tests passed"
