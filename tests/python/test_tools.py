"""The user-facing commands: ``python -m tfwasm sweep`` and ``python -m tfwasm coverage``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tfwasm_support import INSTALLED_PLUGIN, REPO_ROOT, reference_guest_path, subprocess_env

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


def test_coverage_takes_a_second_placement_over_the_first():
    """TensorFlow places a function again, without the placement log, when
    it lowers the function's loops after the graph passes: the placer's own
    line for a node, with no placement-log line just before it on that
    thread, replaces the node's first record."""
    c = coverage.Coverage()
    wasm, cpu = "/job:localhost/replica:0/task:0/device:WASM:0", "/job:localhost/replica:0/task:0/device:CPU:0"
    lines = [
        # first placement, logged (each log line has the placer's twin after it)
        f"I0000 00:00:1.1  9015 placer.cc:162] loop: (While): {wasm}",
        f"I0000 00:00:1.1  9015 placer.cc:172] loop(While) placed on: {wasm}",
        f"I0000 00:00:1.1  9015 placer.cc:162] acc: (AddN): {wasm}",
        f"I0000 00:00:1.1  9015 placer.cc:172] acc(AddN) placed on: {wasm}",
        # another thread's logged placement in between
        f"I0000 00:00:1.1  7001 placer.cc:162] acc: (AddN): {wasm}",
        f"I0000 00:00:1.1  7001 placer.cc:172] acc(AddN) placed on: {wasm}",
        # the second placement on thread 9015: the loop's body appears, acc moves
        f"I0000 00:00:1.2  9015 placer.cc:172] acc(AddN) placed on: {cpu}",
        f"I0000 00:00:1.2  9015 placer.cc:172] loop/body/_1/mul(Mul) placed on: {wasm}",
        f"I0000 00:00:1.2  9015 placer.cc:172] loop/body/_1/sum(Cumsum) placed on: {cpu}",
    ]
    assert all(c.feed(line) for line in lines)
    assert c.nodes == {
        ("While", "WASM:0"): 1,
        ("AddN", "WASM:0"): 1,  # thread 7001's
        ("AddN", "CPU:0"): 1,
        ("Mul", "WASM:0"): 1,
        ("Cumsum", "CPU:0"): 1,
    }
    assert c.compute_nodes("WASM") == (2, 4)
    assert c.fallbacks("WASM") == ["AddN", "Cumsum"]


def test_coverage_counts_the_ops_of_lowered_jit_loops(tmp_path):
    """A jit function run without XLA on WASM: its loop is lowered after the
    graph passes. The report counts the ops inside the loop, the one without
    a WASM kernel (Lgamma) on the CPU."""
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(
        """
        import numpy as np
        import tensorflow as tf
        @tf.function(jit_compile=True)
        def inner(x):
            return tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, tf.math.lgamma(a + 2.0) * 0.5), (0, x))[1]
        @tf.function
        def outer(x):
            return inner(x)
        with tf.device("/device:WASM:0"):
            print("program output", outer(tf.constant([1.0, 2.0, 4.0])).numpy().tolist())
        with tf.device("/CPU:0"):
            print("cpu output", inner.python_function(tf.constant([1.0, 2.0, 4.0])).numpy().tolist())
        """
    ))
    json_path = tmp_path / "cov.json"
    done = run_tool(["coverage", "--json", str(json_path), "--", str(script)], tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    outputs = [line.split(" output ", 1)[1] for line in done.stdout.splitlines() if " output [" in line]
    assert len(outputs) == 2 and outputs[0] == outputs[1], done.stdout[-2000:]
    assert "placer.cc" not in done.stdout + done.stderr, "placement lines must not reach the user"
    import json

    data = json.loads(json_path.read_text())
    placed = {(e["op"], e["device"]): e["count"] for e in data["nodes"]}
    # One in the loop on WASM, one in the CPU reference run.
    assert placed.get(("Lgamma", "CPU:0")) == 2, placed
    assert placed.get(("Mul", "WASM:0")) == 1, placed
    assert "Lgamma" in data["fallbacks"]


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


# ---------------------------------------------------------------- packaging


def test_the_wheel_ships_the_licenses_of_what_it_links():
    """The installed wheel carries a notices file naming every crate Cargo
    links into the plugin and the guest, with the license texts, BLIS's
    BSD text among them (blis-src builds BLIS, whose license its own
    declared one does not cover)."""
    import re
    import shutil
    from importlib import metadata

    try:
        notices = metadata.distribution("tfwasm").read_text("licenses/THIRD_PARTY_LICENSES.txt")
    except metadata.PackageNotFoundError:
        pytest.skip("the tfwasm wheel is not installed in this interpreter")
    assert notices, "the installed wheel has no licenses/THIRD_PARTY_LICENSES.txt"
    if shutil.which("cargo") is None:
        pytest.skip("cargo is not on PATH")

    entries = dict(re.findall(r"^(\S+ \d\S*)\n    license: .*\n    in: .*\n    texts: (.*)$", notices, re.M))
    numbered = {int(n) for n in re.findall(r"^\[(\d+)\] from ", notices, re.M)}
    assert numbered == set(range(1, len(numbered) + 1)), "license texts are not numbered 1..n"
    for package, texts in entries.items():
        for n in re.findall(r"\[(\d+)\]", texts):
            assert int(n) in numbered, f"{package} refers to license text [{n}], which is missing"

    # Cross-check with another Cargo command than the one the build uses.
    for root, target in (("tfwasm", "x86_64-unknown-linux-gnu"), ("tfwasm-reference-device", "wasm32-wasip2")):
        tree = subprocess.run(
            ["cargo", "tree", "-p", root, "-e", "normal", "--target", target, "--prefix", "none", "--locked"],
            cwd=REPO_ROOT, capture_output=True, text=True, check=True,
        ).stdout
        linked = {
            f"{m.group(1)} {m.group(2)}"
            for m in re.finditer(r"^(\S+) v(\S+)(?: \(proc-macro\))?( \(/[^)]*\))?", tree, re.M)
            if not m.group(3)  # workspace packages are tfwasm's own
        }
        assert linked, f"cargo tree listed nothing for {root}"
        missing = sorted(linked - entries.keys())
        assert not missing, f"{root} links {missing}, which the notices do not list"
    for package in ("wasmtime", "rayon", "gemm", "blis-src", "wit-bindgen"):
        assert any(entry.split()[0] == package for entry in entries), package
    assert "Redistribution and use in source and binary forms" in notices  # BLIS's BSD-3-Clause text


# ---------------------------------------------------------------- the tfwasm command


def installed_command() -> Path:
    """The ``tfwasm`` command the wheel put beside this interpreter."""
    path = Path(sysconfig.get_path("scripts")) / "tfwasm"
    if INSTALLED_PLUGIN is None:
        pytest.skip("the wheel is not installed in this interpreter (TFWASM_TEST_LIBRARY run)")
    assert path.is_file(), f"the wheel installs the tfwasm command into {path.parent}; it is not there"
    return path


def test_the_wheel_installs_the_command_and_its_guest_passes_the_suite():
    command = installed_command()
    run = subprocess.run([command, "check", "--json", reference_guest_path()], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    checks = json.loads(run.stdout)
    assert len(checks) >= 8 and all(check["passed"] for check in checks), checks


def test_precompile_fills_the_cache_the_plugin_reads(tmp_path):
    command = installed_command()
    cache = tmp_path / "cache"
    guest = reference_guest_path()
    run = subprocess.run([command, "precompile", "--json", "--cache-dir", cache, guest], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    (entry,) = json.loads(run.stdout)
    assert not entry["cached"] and Path(entry["entry"]).is_file(), entry
    program = "import tensorflow as tf; print(len(tf.config.list_physical_devices('WASM')))"
    env = subprocess_env({"TFWASM_CACHE_DIR": cache, "TFWASM_LOG": "info"})
    tf_run = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
    assert tf_run.returncode == 0 and tf_run.stdout.strip() == "1", tf_run.stdout + tf_run.stderr
    assert "loaded from the compile cache" in tf_run.stderr, tf_run.stderr
    assert sorted(p.name for p in cache.iterdir()) == [Path(entry["entry"]).name], "the plugin found the entry, wrote no other"
