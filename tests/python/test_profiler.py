"""The profiler inside the real TensorFlow: every way a user takes a profile
writes an ``.xplane.pb`` holding the WASM device's plane, and TensorBoard's
own converter (xprof) shows its events.

Each test runs TensorFlow in a fresh process (a profiling session is
process-wide) that reports what the trace holds as JSON; the assertions
are made here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tfwasm_support import GUEST_BUILD_DIR, make_policy, reference_guest_path, subprocess_env

HOSTILE_PROFILER = GUEST_BUILD_DIR / "tfwasm_hostile_profiler.wasm"

# Shared by the child scripts: find the trace, read the device's plane.
SUMMARY = r"""
import glob, json, os, collections
from tensorflow.tsl.profiler.protobuf import xplane_pb2


def xplane_files(logdir):
    return sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))


def summary(path):
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    planes = [p.name for p in space.planes]
    ours = [p for p in space.planes if p.name == "/device:CUSTOM:0"]
    if not ours:
        return {"planes": planes}
    plane = ours[0]
    stat_names = {k: v.name for k, v in plane.stat_metadata.items()}

    def stats(items):
        return {stat_names[s.metadata_id]: (s.str_value if s.HasField("str_value") else s.uint64_value) for s in items}

    lines = {}
    op_types = collections.Counter()
    names = collections.Counter()
    for line in plane.lines:
        lines[line.name] = collections.Counter(plane.event_metadata[e.metadata_id].name for e in line.events)
        if line.name.startswith("Kernels"):
            for e in line.events:
                s = stats(e.stats)
                op_types[s["op_type"]] += 1
                names[plane.event_metadata[e.metadata_id].name] += 1
    return {
        "planes": planes,
        "plane_stats": stats(plane.stats),
        "lines": {k: dict(v) for k, v in lines.items()},
        "op_types": dict(op_types),
        "names": dict(names),
    }
"""

MLP = r"""
import keras
x = np.random.default_rng(0).standard_normal((256, 20)).astype("float32")
y = np.random.default_rng(1).integers(0, 10, 256)
model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
"""


def kernel_lines(summary: dict) -> dict:
    return {name: events for name, events in summary["lines"].items() if name.startswith("Kernels")}


def assert_device_plane(summary: dict) -> None:
    assert "/device:CUSTOM:0" in summary["planes"], f"no WASM plane among {summary['planes']}"
    assert "/host:CPU" in summary["planes"], "TensorFlow's own host plane survives"
    assert summary["plane_stats"]["device"] == "/device:WASM:0"
    assert kernel_lines(summary), f"no kernel line: {list(summary['lines'])}"
    memory = summary["lines"].get("Memory", {})
    assert memory.get("Allocate", 0) > 0 and memory.get("Free", 0) > 0, memory
    copies = [line for name, line in summary["lines"].items() if name.startswith("Stream ")]
    assert any("MemcpyH2D" in line for line in copies), f"no host-to-device copy: {copies}"


def test_start_and_stop_around_a_keras_fit(run_tf, tmp_path):
    logdir = tmp_path / "logs"
    done = run_tf(
        SUMMARY
        + MLP
        + f"""
model.fit(x, y, epochs=1, batch_size=32, verbose=0)  # compile outside the profile
tf.profiler.experimental.start({str(logdir)!r})
model.fit(x, y, epochs=1, batch_size=32, verbose=0)
tf.profiler.experimental.stop()
files = xplane_files({str(logdir)!r})
result("files", len(files))
result("summary", json.dumps(summary(files[0])))
"""
    )
    assert done.returncode == 0, done.describe()
    summary = json.loads(done.results()["summary"])
    assert_device_plane(summary)
    # 8 steps, each with 5 matrix products: two forward, the second layer's
    # input and weight gradients, the first layer's weight gradient (its
    # input needs none). The default policy's contraction pass fuses the
    # forward ones with their bias (and activation) into _FusedMatMul.
    products = summary["op_types"].get("MatMul", 0) + summary["op_types"].get("_FusedMatMul", 0)
    assert products == 8 * 5, summary["op_types"]
    assert summary["plane_stats"]["dropped_events"] == 0
    # The default policy's profiler guest shaped the plane: its own busy
    # spans and op summary beside the recorded events.
    status = summary["plane_stats"]["profiler_guest"]
    assert "reference-profiler" in status and "shaped the trace" in status, status
    assert summary["lines"].get("Device busy", {}).get("busy", 0) >= 1, list(summary["lines"])
    assert summary["plane_stats"]["kernel_executions"] == sum(summary["op_types"].values())
    assert summary["plane_stats"]["kernel_time_by_op"].split(" ")[0] in summary["op_types"]


def test_the_profile_context_manager_has_one_event_per_kernel_execution(run_tf, tmp_path):
    logdir = tmp_path / "logs"
    done = run_tf(
        SUMMARY
        + f"""
@tf.function
def step(a, b):
    return tf.nn.relu(tf.matmul(a, b, name="profiled_matmul"))

a = tf.random.normal((64, 32))
b = tf.random.normal((32, 16))
step(a, b)  # traced and warm outside the profile
with tf.profiler.experimental.Profile({str(logdir)!r}):
    for _ in range(7):
        out = step(a, b)
    result("device", out.device)
result("summary", json.dumps(summary(xplane_files({str(logdir)!r})[0])))
"""
    )
    assert done.returncode == 0, done.describe()
    assert done.results()["device"].endswith("WASM:0"), done.results()
    summary = json.loads(done.results()["summary"])
    assert "/device:CUSTOM:0" in summary["planes"], summary["planes"]
    matmuls = {name: n for name, n in summary["names"].items() if name.endswith("profiled_matmul")}
    assert list(matmuls.values()) == [7], f"7 executions, one event each: {summary['names']}"
    assert summary["op_types"].get("Relu") == 7, summary["op_types"]


def test_the_keras_tensorboard_callback_profiles_the_device(run_tf, tmp_path):
    # Keras' TensorBoard callback needs the tensorboard package, which
    # tensorflow-cpu does not pull in; host/scripts/setup.sh installs it.
    logdir = tmp_path / "tb"
    done = run_tf(
        SUMMARY
        + MLP
        + f"""
callback = keras.callbacks.TensorBoard(log_dir={str(logdir)!r}, profile_batch=(2, 4))
model.fit(x, y, epochs=1, batch_size=32, verbose=0, callbacks=[callback])
files = xplane_files({str(logdir)!r})
result("files", len(files))
result("summary", json.dumps(summary(files[0])))
"""
    )
    assert done.returncode == 0, done.describe()
    assert done.results()["files"] == "1"
    summary = json.loads(done.results()["summary"])
    assert "/device:CUSTOM:0" in summary["planes"], summary["planes"]
    assert summary["op_types"].get("MatMul", 0) >= 3 * 2, summary["op_types"]


def test_xprof_converts_the_trace_and_shows_the_devices_events(run_tf, tmp_path):
    # xprof (TensorBoard's profile plugin) is installed by host/scripts/setup.sh.
    logdir = tmp_path / "logs"
    done = run_tf(
        SUMMARY
        + MLP
        + f"""
model.fit(x, y, epochs=1, batch_size=32, verbose=0)
with tf.profiler.experimental.Profile({str(logdir)!r}):
    model.fit(x, y, epochs=1, batch_size=32, verbose=0)
result("file", xplane_files({str(logdir)!r})[0])
"""
    )
    assert done.returncode == 0, done.describe()
    # xprof needs no TensorFlow: convert in a process of its own, as TensorBoard does.
    convert = r"""
import json, sys
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data([sys.argv[1]], "trace_viewer", {"use_saved_result": False})
trace = json.loads(data)
events = trace["traceEvents"]
processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
ours = [e for e in events if e.get("ph") == "X" and processes.get(e["pid"]) == "/device:CUSTOM:0"]
print(json.dumps({
    "processes": sorted(processes.values()),
    "threads": sorted({threads.get((e["pid"], e["tid"]), "?") for e in ours}),
    "names": sorted({e["name"] for e in ours}),
    "tf_ops": sorted({e.get("args", {}).get("tf_op", "") for e in ours}),
}))
"""
    converted = subprocess.run(
        [sys.executable, "-c", convert, done.results()["file"]],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert converted.returncode == 0, converted.stderr[-4000:]
    trace = json.loads(converted.stdout.strip().splitlines()[-1])
    assert "/device:CUSTOM:0" in trace["processes"], trace["processes"]
    assert any(t.startswith("Kernels") for t in trace["threads"]), trace["threads"]
    assert "Memory" in trace["threads"] and any(t.startswith("Stream ") for t in trace["threads"]), trace["threads"]
    assert any(name.endswith("MatMul") for name in trace["names"]), trace["names"][:20]
    assert any(op.endswith(":MatMul") for op in trace["tf_ops"]), trace["tf_ops"][:20]
    assert {"Allocate", "Free", "MemcpyH2D"} <= set(trace["names"])


def test_a_thousand_sessions_keep_memory_flat(run_tf):
    done = run_tf(
        r"""
import resource
from tensorflow.python.profiler.internal import _pywrap_profiler

x = tf.random.normal((32, 32))


def cycles(n):
    for _ in range(n):
        session = _pywrap_profiler.ProfilerSession()
        session.start("", {})
        tf.matmul(x, x)
        data = session.stop()
        assert b"/device:CUSTOM:0" in data, "a session without the device's plane"


def rss_kib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() // 1024


cycles(100)
before = rss_kib()
cycles(1000)
result("growth_kib", rss_kib() - before)
"""
    )
    assert done.returncode == 0, done.describe()
    growth = int(done.results()["growth_kib"])
    assert growth < 8 * 1024, f"resident memory grew by {growth} KiB over 1000 profiling sessions"


def test_a_guest_fault_during_a_profile_is_in_the_trace(run_tf, tmp_path, hostile_guest):
    logdir = tmp_path / "logs"
    policy = make_policy(hostile_guest, "hostile-device", config={"mode": "trap-on-allocate", "after": "40"})
    done = run_tf(
        SUMMARY
        + f"""
with tf.profiler.experimental.Profile({str(logdir)!r}):
    for i in range(60):
        try:
            with tf.device("/device:WASM:0"):
                tf.random.normal((100 + i, 10)) * 2.0
        except tf.errors.OpError:
            pass
result("summary", json.dumps(summary(xplane_files({str(logdir)!r})[0])))
""",
        policy=policy,
    )
    assert done.returncode == 0, done.describe()
    summary = json.loads(done.results()["summary"])
    assert summary["lines"].get("Guest faults", {}).get("Guest fault", 0) >= 1, summary["lines"].keys()
    assert summary["plane_stats"]["guest_replacements"] >= 1


def test_a_hostile_profiler_guest_leaves_the_hosts_lines_and_says_why(run_tf, tmp_path):
    assert HOSTILE_PROFILER.is_file(), f"{HOSTILE_PROFILER} is not built (host/scripts/setup.sh builds it)"
    logdir = tmp_path / "logs"
    policy = make_policy(reference_guest_path())
    policy["profiler"] = {
        "guest": {
            "name": "hostile-profiler",
            "path": str(HOSTILE_PROFILER),
            "config": {"mode": "trap"},
            "limits": {"memory-bytes": 64 << 20, "call-deadline-ms": 1000},
        }
    }
    done = run_tf(
        SUMMARY
        + f"""
x = tf.random.normal((64, 64))
with tf.profiler.experimental.Profile({str(logdir)!r}):
    for _ in range(3):
        y = tf.matmul(x, x)
    y.numpy()
result("summary", json.dumps(summary(xplane_files({str(logdir)!r})[0])))
""",
        policy=policy,
    )
    assert done.returncode == 0, done.describe()
    summary = json.loads(done.results()["summary"])
    status = summary["plane_stats"]["profiler_guest"]
    assert "hostile-profiler" in status and "panicked" in status and "host's own lines" in status, status
    assert summary["op_types"].get("MatMul") == 3, summary["op_types"]
    assert "/host:CPU" in summary["planes"], "TensorFlow's own planes are untouched"


def test_the_device_guests_annotations_are_in_the_trace(run_tf, tmp_path):
    # make_policy keeps no freed blocks on the host (recycle-bytes = 0): every
    # allocation and free reaches the guest, which samples its allocator's
    # state every 64th into the trace.
    logdir = tmp_path / "logs"
    done = run_tf(
        SUMMARY
        + f"""
x = tf.random.normal((64, 64))
with tf.profiler.experimental.Profile({str(logdir)!r}):
    for _ in range(100):
        x = tf.nn.relu(tf.matmul(x, x) * 0.01)
    x.numpy()
result("summary", json.dumps(summary(xplane_files({str(logdir)!r})[0])))
""",
        policy=make_policy(reference_guest_path()),
    )
    assert done.returncode == 0, done.describe()
    summary = json.loads(done.results()["summary"])
    assert summary["lines"].get("Annotations", {}).get("allocator", 0) >= 2, summary["lines"].keys()


# The program the coverage tool runs: a tf.function of its own op types,
# called CALLS times, then eager ops of other types on odd shapes (0-size,
# 1×1, primes, broadcasting), all inside one profiling session that covers
# everything the program runs. It writes the kernel events per op type.
COUNTED_PROGRAM = r"""
import collections, glob, json, os, sys
import numpy as np
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

logdir, out, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(0)


@tf.function
def step(a, b, bias, empty):
    h = tf.tanh(tf.nn.bias_add(tf.matmul(a, b), bias))
    return tf.reduce_sum(h * bias, axis=1), tf.sigmoid(empty)


tf.profiler.experimental.start(logdir)
with tf.device("/device:WASM:0"):
    a = tf.identity(tf.constant(rng.standard_normal((7, 13)).astype("float32")))
    b = tf.identity(tf.constant(rng.standard_normal((13, 5)).astype("float32")))
    c = tf.identity(tf.constant(rng.standard_normal((1, 5)).astype("float32")))
    bias = tf.identity(tf.constant(rng.standard_normal((5,)).astype("float32")))
    empty = tf.zeros((0, 5))
    for _ in range(calls):
        s, r = step(a, b, bias, empty)
    x = tf.nn.relu(a[:, :5] - c)
    y = tf.exp(empty) + c
    z = tf.reduce_max(tf.square(a[:1, :1]))
    w = tf.concat([x, y], axis=0)
    m = tf.reduce_mean(w, axis=0)
    for v in (s, r, x, y, z, w, m):
        v.numpy()
tf.profiler.experimental.stop()

space = xplane_pb2.XSpace()
with open(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)[0], "rb") as f:
    space.ParseFromString(f.read())
plane = next(p for p in space.planes if p.name == "/device:CUSTOM:0")
op_type = next(k for k, v in plane.stat_metadata.items() if v.name == "op_type")
events = collections.Counter(
    s.str_value for line in plane.lines if line.name.startswith("Kernels") for e in line.events for s in e.stats if s.metadata_id == op_type
)
with open(out, "w") as f:
    json.dump({"events": events, "dropped": next(s.uint64_value for s in plane.stats if plane.stat_metadata[s.metadata_id].name == "dropped_events")}, f)
"""
COUNTED_FUNCTION_OPS = {"MatMul", "BiasAdd", "Tanh", "Mul", "Sum", "Sigmoid"}


def test_kernel_events_match_the_coverage_tools_op_count(tmp_path):
    """One kernel event per kernel execution, counted against what
    ``python -m tfwasm coverage`` sees: an op type the program runs eagerly
    has an event per eager run; one it runs only in the tf.function has an
    event per node per call. The passes are off, so the kernels that run are
    the nodes TensorFlow placed (TensorFlow's own grappler leaves this
    function as it is; the passes would fuse its elementwise tail)."""
    from tfwasm_support import REPO_ROOT

    calls = 3
    program = tmp_path / "counted.py"
    program.write_text(COUNTED_PROGRAM, encoding="utf-8")
    env = subprocess_env({"TFWASM_PASSES": "0", "TF_CPP_MIN_LOG_LEVEL": "2"})
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "host" / "python"), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, "-m", "tfwasm", "coverage", "--json", str(tmp_path / "coverage.json"), "--",
         str(program), str(tmp_path / "logs"), str(tmp_path / "events.json"), str(calls)],
        env=env, cwd=tmp_path, capture_output=True, text=True, errors="replace", timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    coverage = json.loads((tmp_path / "coverage.json").read_text())
    recorded = json.loads((tmp_path / "events.json").read_text())
    assert recorded["dropped"] == 0
    assert coverage["fallbacks"] == [], coverage["fallbacks"]

    from tfwasm.coverage import is_not_compute

    def on_device(rows):
        return {r["op"]: r["count"] for r in rows if r["device"] == "WASM:0" and not is_not_compute(r["op"])}

    nodes, eager = on_device(coverage["nodes"]), on_device(coverage["eager"])
    assert COUNTED_FUNCTION_OPS <= set(nodes), f"the function's ops are not all placed on WASM: {nodes}"
    assert not COUNTED_FUNCTION_OPS & set(eager), f"the program runs a function op eagerly too: {eager}"
    expected = {op: eager[op] if op in eager else calls * n for op, n in nodes.items()}
    assert len(expected) >= 14, expected
    assert recorded["events"] == expected, (
        f"kernel events per op type {recorded['events']} against the coverage tool's count {expected}"
    )
