#!/usr/bin/env bash
# Every test: check formatting (cargo fmt, .rustfmt.toml), build and install
# (host/scripts/setup.sh), then
#   1. cargo test --release -p tfwasm -p tfwasm-runtime -p tfwasm-kernels -p tfwasm-xla -p tfwasm-cli -p tfwasm-fuse-pass
#                                                host unit tests + tests/rust (integration,
#                                                incl. the C-layout check against the wheel's headers)
#                                                + tests/cli (the `tfwasm check` suite on real guests)
#   2. cargo test -p tfwasm-reference-device …   the guests' own unit tests (the contraction pass's too), natively
#      bash guest/c-device/build.sh test          the C guest's unit tests, natively (ASan, UBSan)
#   3. cargo check -p tfwasm-runtime -p tfwasm-cli --target …
#                                                the runtime and the command build for Windows and macOS
#   4. pytest tests/python                       the plugin inside the real TensorFlow
#                                                (and, under stable, the plugin built with
#                                                --features pjrt: test_xla_pjrt.py)
# Stops at the first failure. Non-interactive, so the same under CI=true.
#
#   bash tests/run.sh               against tensorflow-cpu 2.21 in .venv/ (what CI runs)
#   bash tests/run.sh --tf nightly  against tf-nightly-cpu in .venv-nightly/: the next
#                                   TensorFlow, its headers for the C-layout check included;
#                                   then test_versions.py under tensorflow-cpu 2.20 (below
#                                   the supported range) in .venv-unsupported/
set -Eeuo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export TFWASM_TF=stable
while [[ $# -gt 0 ]]; do
    case "$1" in
        --tf)
            TFWASM_TF="${2:?--tf needs stable or nightly}"
            shift 2
            ;;
        *)
            echo "usage: bash tests/run.sh [--tf stable|nightly]" >&2
            exit 2
            ;;
    esac
done
venv=.venv
[[ "$TFWASM_TF" == nightly ]] && venv=.venv-nightly
unset TF_PLUGGABLE_DEVICE_LIBRARY_PATH # the installed wheel loads the plugin; a second copy stays inert

if [[ "${CI:-}" == "true" ]]; then
    export CARGO_TERM_COLOR=never CARGO_TERM_PROGRESS_WHEN=never
fi

log_dir=$(mktemp -d -t tfwasm-tests.XXXXXX)
trap 'rm -rf "$log_dir"' EXIT
current=setup
trap 'echo "FAILED: $current" >&2' ERR

# Runs "$@" as step $1, keeping its output to quote its summary at the end.
run() {
    current=$1
    shift
    printf '\n==> %s\n' "$current"
    "$@" 2>&1 | tee "$log_dir/$current.log"
}

# Formatting first: it takes a second, and a diff is the cheapest failure to fix.
if ! cargo fmt --version >/dev/null 2>&1; then
    rustup component add rustfmt
fi
run "format" cargo fmt --all -- --check

# The test guests too (hostile, C, WAT): the demo's setup leaves them out.
export TFWASM_TEST_GUESTS=1
bash host/scripts/setup.sh

# The layout test compiles the headers of the TensorFlow under test.
TFWASM_TF_INCLUDE=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/tensorflow/include
export TFWASM_TF_INCLUDE

# Same profile, features and target dir as setup.sh's `cargo build --release`,
# so the dependencies (wasmtime above all) are reused, not rebuilt.
# The reference pass's tests compare it with the plugin's native rewrites: release, with the host's.
run "host tests" cargo test --release -p tfwasm -p tfwasm-runtime -p tfwasm-kernels -p tfwasm-xla -p tfwasm-cli -p tfwasm-fuse-pass
run "guest unit tests" cargo test -p tfwasm-reference-device -p tfwasm-hostile-device -p tfwasm-fuzz-device -p tfwasm-pass-sdk -p tfwasm-contraction-pass -p tfwasm-hostile-pass \
    -p tfwasm-reference-profiler -p tfwasm-hostile-profiler
run "C guest unit tests" bash guest/c-device/build.sh test

# The plugin without the profiler (cargo feature `profiler` off: no
# TF_InitProfiler, every recording site compiled away), what
# tests/bench/bench_profiler.py --without-profiler measures against: built
# here so that it keeps building. The same release profile, so only the host
# crates rebuild; then setup.sh's build again, which the venv's wheel matches.
run "plugin without the profiler" cargo build --release -q -p tfwasm --no-default-features
if nm -D --defined-only target/release/libtfwasm.so | grep -qw TF_InitProfiler; then
    echo "tests/run.sh: the plugin built without the profiler still exports TF_InitProfiler" >&2
    exit 1
fi
# The plugin with XLA through PJRT (cargo feature `pjrt`, off by default;
# issue 45 stage 1): built against this TensorFlow's headers
# (TFWASM_TF_INCLUDE), kept aside, and loaded by tests/python/test_xla_pjrt.py
# in the python tests below (TFWASM_PJRT_LIBRARY). Stable only: its C++ shim
# installs itself only in the one TensorFlow build it was compiled for.
if [[ "$TFWASM_TF" == stable ]]; then
    run "plugin with pjrt" cargo build --release -q -p tfwasm --features pjrt
    cp target/release/libtfwasm.so "$log_dir/libtfwasm-pjrt.so"
    export TFWASM_PJRT_LIBRARY="$log_dir/libtfwasm-pjrt.so"
fi
run "plugin with the profiler" cargo build --release -q -p tfwasm -p tfwasm-cli

# The runtime (sandbox, policy, device) is what a guest author runs on any OS.
# `cargo check` proves it builds for Windows and macOS without linking.
# wasmtime's build scripts compile small C helpers for the target, whose
# system headers this machine lacks: .ci/cc-check-only compiles each as an
# empty unit with clang (and llvm-lib archives for MSVC), which is all a
# check needs.
current="portability tools"
cross_targets=(x86_64-pc-windows-msvc aarch64-apple-darwin)
for target in "${cross_targets[@]}"; do
    rustup target list --installed | grep -qx "$target" || rustup target add "$target"
done
if ! command -v clang >/dev/null || ! command -v llvm-lib >/dev/null; then
    sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    "${sudo[@]}" apt-get install -y -q clang llvm >/dev/null ||
        { "${sudo[@]}" apt-get update -q >/dev/null && "${sudo[@]}" apt-get install -y -q clang llvm >/dev/null; }
fi
for target in "${cross_targets[@]}"; do
    env_target=${target//-/_}
    export "CC_${env_target}=$PWD/.ci/cc-check-only" "AR_${env_target}=llvm-lib"
done
export AR_aarch64_apple_darwin=llvm-ar
for target in "${cross_targets[@]}"; do
    run "check $target" cargo check -q -p tfwasm-runtime -p tfwasm-cli --target "$target"
done
run "python tests" "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python
if [[ "$TFWASM_TF" == nightly ]]; then
    TFWASM_TF=unsupported bash host/scripts/setup.sh
    run "unsupported tensorflow" .venv-unsupported/bin/python -m pytest -q -p no:cacheprovider tests/python/test_versions.py
fi

printf '\n==> Summary\n'
for target in "${cross_targets[@]}"; do
    echo "cargo check -p tfwasm-runtime -p tfwasm-cli --target $target: ok"
done
for step in "host tests" "guest unit tests"; do
    grep -h '^test result:' "$log_dir/$step.log" | sed "s/^/$step: /"
done
tail -n 1 "$log_dir/python tests.log" | sed 's/^/python tests: /'
if [[ "$TFWASM_TF" == nightly ]]; then
    tail -n 1 "$log_dir/unsupported tensorflow.log" | sed 's/^/under tensorflow-cpu 2.20: /'
fi
