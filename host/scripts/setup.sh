#!/usr/bin/env bash
# Build everything and install the plugin into .venv/ at the repository root.
#
#   bash host/scripts/setup.sh
#   TFWASM_TF=nightly bash host/scripts/setup.sh   # the same into .venv-nightly/ with tf-nightly-cpu
#   TFWASM_TEST_GUESTS=1 bash host/scripts/setup.sh # also the test guests (tests/run.sh sets it)
#
# Safe to re-run: cargo rebuilds only what changed, the venv is reused, and
# TensorFlow is installed only when the pinned version is missing.
# PYTHON=python3.12 picks the interpreter for a new venv.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

# The wheel puts the plugin in site-packages/tensorflow-plugins/, which
# TensorFlow loads on import. A second copy named by this variable would only
# log an error and stay inert, so nothing started from here may see it.
unset TF_PLUGGABLE_DEVICE_LIBRARY_PATH

# The TensorFlow to test against: the release the plugin is built for, or
# the next one (tf-nightly-cpu; see README, "Supported TensorFlow").
case "${TFWASM_TF:-stable}" in
    stable) TF_PIN="tensorflow-cpu==2.21.0" VENV=.venv ;;
    nightly) TF_PIN="tf-nightly-cpu" VENV=.venv-nightly ;;
    # Below the supported range: the plugin must stay out of the way.
    unsupported) TF_PIN="tensorflow-cpu==2.20.0" VENV=.venv-unsupported ;;
    *)
        echo "error: TFWASM_TF=${TFWASM_TF} (expected stable, nightly or unsupported)" >&2
        exit 2
        ;;
esac
# tensorboard: Keras' TensorBoard callback (tensorflow-cpu does not pull it
# in); xprof: TensorBoard's profile plugin, whose converter the profiler
# tests run.
PY_DEPS=("$TF_PIN" numpy pytest tensorboard xprof)
WASM_TARGET=wasm32-wasip2

step() { printf '\n==> %s\n' "$*"; }

step "Rust target $WASM_TARGET"
if rustup target list --installed | grep -qx "$WASM_TARGET"; then
    echo "already installed"
else
    rustup target add "$WASM_TARGET"
fi

# What the wheel ships: the reference device, the two reference passes and
# the reference profiler. The test guests (hostile ones, the C guest, the WAT
# guests) come with TFWASM_TEST_GUESTS=1, which tests/run.sh sets: the C
# guest's tools (clang, wasm-tools, wit-bindgen-cli) take minutes to install
# on a fresh machine, and the demo runs none of them.
guests=(-p tfwasm-reference-device -p tfwasm-fuse-pass -p tfwasm-contraction-pass -p tfwasm-reference-profiler)
if [[ "${TFWASM_TEST_GUESTS:-}" == 1 ]]; then
    guests+=(-p tfwasm-hostile-device -p tfwasm-hostile-pass -p tfwasm-hostile-profiler)
fi
step "Build guests (wasm32-wasip2, profile guest)"
cargo build --target "$WASM_TARGET" --profile guest "${guests[@]}"

if [[ "${TFWASM_TEST_GUESTS:-}" == 1 ]]; then
    step "Build the C guest (guest/c-device: clang, wit-bindgen c, wasm-tools)"
    bash guest/c-device/build.sh

    step "Build the WAT hostile guests (guest/hostile-wat)"
    bash guest/hostile-wat/build.sh
fi

step "Build host and the tfwasm command (release)"
cargo build --release -p tfwasm -p tfwasm-cli

step "Python environment $VENV"
if [[ ! -x "$VENV/bin/python" ]]; then
    "${PYTHON:-python3}" -m venv "$VENV" || {
        echo "error: could not create $VENV (on Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 1
    }
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check)
# Exit 0 only when every pinned requirement is already installed.
have_deps() {
    "$VENV/bin/python" - "${PY_DEPS[@]}" <<'PY'
import sys
from importlib import metadata
for req in sys.argv[1:]:
    name, _, pinned = req.partition("==")
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        sys.exit(1)
    if pinned and version != pinned:
        sys.exit(1)
PY
}
if have_deps; then
    echo "${PY_DEPS[*]} already installed"
else
    "${pip[@]}" install --quiet "${PY_DEPS[@]}" || {
        echo "error: pip could not install ${PY_DEPS[*]} into $VENV with $("$VENV/bin/python" -V)." >&2
        echo "       If there is no $TF_PIN wheel for this Python, remove $VENV and rerun with PYTHON=python3.12." >&2
        exit 1
    }
fi

step "Build wheel"
wheel=$("$VENV/bin/python" host/packaging/build_wheel.py)
echo "$wheel"

step "Install wheel"
"${pip[@]}" install --quiet --force-reinstall --no-deps "$wheel"
echo "installed into $("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/tensorflow-plugins/"
