#!/usr/bin/env bash
# Runs tfwasm's benchmarks: the host→guest call cost on the allocation path
# (cargo bench, no TensorFlow), then tiny-op latency and MatMul throughput
# against TensorFlow's CPU device (bench_tf.py, in the repo's .venv).
#
# Usage: tests/bench/run.sh [bench_tf.py options]
#   PYTHON=...           interpreter with TensorFlow and the tfwasm wheel (default: .venv/bin/python)
#   TFWASM_TEST_LIBRARY  a libtfwasm.so to load instead of an installed wheel
#   SKIP_CARGO_BENCH=1   only run bench_tf.py
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"

if [[ "${SKIP_CARGO_BENCH:-0}" != 1 ]]; then
    echo "== cargo bench -p tfwasm --bench slice"
    cargo bench -p tfwasm --bench slice
    echo
fi

python="${PYTHON:-$root/.venv/bin/python}"
if [[ ! -x "$python" ]]; then
    echo "run.sh: no Python at $python; create the venv (host/scripts/setup.sh) or set PYTHON" >&2
    exit 1
fi
echo "== bench_tf.py"
exec "$python" "$root/tests/bench/bench_tf.py" "$@"
