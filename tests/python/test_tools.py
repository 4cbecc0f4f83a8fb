"""The user-facing commands: ``python -m tfwasm sweep`` and ``python -m tfwasm coverage``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from tfwasm_support import REPO_ROOT, subprocess_env

PACKAGE = REPO_ROOT / "host" / "python"
sys.path.insert(0, str(PACKAGE))

from tfwasm import coverage, sweep  # noqa: E402


def tool_env() -> dict:
    env = subprocess_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def run_tool(args, tmp_path, timeout=1200):
    return subprocess.run(
        [sys.executable, "-m", "tfwasm", *args], env=tool_env(), cwd=tmp_path,
        capture_output=True, text=True, errors="replace", timeout=timeout,
    )


# ---------------------------------------------------------------- sweep


def test_compare_accepts_results_within_tolerance():
    e = [np.array([1.0, -2.0, np.nan, np.inf], np.float32)]
    g = [np.array([1.0 + 1e-6, -2.0, np.nan, np.inf], np.float32)]
    worst, ok, notes = sweep.compare(e, g, g, (1e-5, 1e-6), [0])
    assert ok, notes
    assert worst < 2e-6


@pytest.mark.parametrize(
    "got,reason",
    [
        (np.array([1.001, -2.0, np.nan, np.inf], np.float32), "beyond"),
        (np.array([1.0, -2.0, 0.0, np.inf], np.float32), "beyond"),  # NaN lost
        (np.array([1.0, -2.0, np.nan, -np.inf], np.float32), "beyond"),  # wrong infinity
        (np.array([1.0, -2.0, np.nan], np.float32), "CPU gives"),  # shape
        (np.array([1.0, -2.0, np.nan, np.inf], np.float64), "CPU gives"),  # dtype
    ],
)
def test_compare_rejects_wrong_results(got, reason):
    e = [np.array([1.0, -2.0, np.nan, np.inf], np.float32)]
    _, ok, notes = sweep.compare(e, [got], [got], (1e-5, 1e-6), [0])
    assert not ok
    assert reason in " ".join(notes)


def test_compare_requires_exact_integers_and_determinism():
    e = [np.array([1, 2, 3], np.int64)]
    _, ok, notes = sweep.compare(e, [np.array([1, 2, 4], np.int64)], [np.array([1, 2, 4], np.int64)], sweep.EXACT, [0])
    assert not ok and "1 elements differ" in notes[0]
    f = [np.array([0.5], np.float32)]
    _, ok, notes = sweep.compare(f, f, [np.array([0.5000001], np.float32)], (1e-3, 1e-3), [0])
    assert not ok and "differs between two runs" in notes[0]


def test_every_registered_op_passes_the_sweep(tmp_path):
    done = run_tool(["sweep"], tmp_path)
    table = done.stdout
    assert "cases over" in table, done.stderr[-4000:]
    failing = [line for line in table.splitlines() if "FAIL" in line]
    assert done.returncode == 0 and not failing, "\n".join(failing[:40]) + "\n" + table.splitlines()[-1]
    ops = {line.split()[0] for line in table.splitlines()[2:] if line and not line.startswith(("-", " ")) and "cases over" not in line}
    # The registry read back from TensorFlow, not a list of ours: every kernel is swept.
    for op in ("AddV2", "MatMul"):
        assert op in ops


def test_sweep_reports_an_unknown_op_as_failing(tmp_path):
    done = run_tool(["sweep", "--ops", "NoSuchOpAnywhere"], tmp_path, timeout=300)
    assert done.returncode == 1
    assert "not registered for WASM" in done.stdout


# ---------------------------------------------------------------- coverage


def test_coverage_parses_placement_and_execution_lines():
    c = coverage.Coverage()
    lines = [
        "MatMul: (MatMul): /job:localhost/replica:0/task:0/device:WASM:0",  # stdout copy: not counted twice
        "I0000 00:00:1.1  9015 placer.cc:162] MatMul: (MatMul): /job:localhost/replica:0/task:0/device:WASM:0",
        "I0000 00:00:1.1  9015 placer.cc:162] Sum: (Sum): /job:localhost/replica:0/task:0/device:CPU:0",
        "I0000 00:00:1.1  9015 placer.cc:162] x: (_Arg): /job:localhost/replica:0/task:0/device:CPU:0",
        "I0000 00:00:1.2  9015 execute.cc:1775] Executing op Relu in device /job:localhost/replica:0/task:0/device:CPU:0",
        "I0000 00:00:1.2  9015 execute.cc:1775] Executing op __inference_f_12 in device /job:localhost/replica:0/task:0/device:WASM:0",
    ]
    assert all(c.feed(line) for line in lines)
    assert not c.feed("Epoch 1/3")
    assert c.nodes == {("MatMul", "WASM:0"): 1, ("Sum", "CPU:0"): 1, ("_Arg", "CPU:0"): 1}
    assert c.eager == {("Relu", "CPU:0"): 1}
    assert c.compute_nodes("WASM") == (1, 2)
    assert c.fallbacks("WASM") == ["Relu", "Sum"]
    report = c.report("WASM")
    assert "compute nodes on WASM: 1 of 2 (50.0%)" in report
    assert "_Arg" not in report


def test_coverage_of_a_program(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(textwrap.dedent(
        """
        import sys
        import numpy as np
        import tensorflow as tf
        @tf.function
        def f(a, b):
            return tf.matmul(a, b) + 1.0
        x = np.ones((3, 3), np.float32)
        print("program output", float(tf.reduce_sum(f(x, x))), sys.argv[1:])
        """
    ))
    json_path = tmp_path / "cov.json"
    done = run_tool(["coverage", "--json", str(json_path), "--", str(script), "--flag"], tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "program output 36.0 ['--flag']" in done.stdout
    assert "placer.cc" not in done.stdout + done.stderr, "placement lines must not reach the user"
    import json

    data = json.loads(json_path.read_text())
    placed = {(e["op"], e["device"]) for e in data["nodes"]}
    assert ("MatMul", "WASM:0") in placed
    assert ("AddV2", "WASM:0") in placed
    assert "compute nodes on WASM" in done.stdout


def test_coverage_passes_the_exit_status_through(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('before')\nsys.exit(3)\n")
    done = run_tool(["coverage", "--", str(script)], tmp_path, timeout=300)
    assert done.returncode == 3
    assert "before" in done.stdout
