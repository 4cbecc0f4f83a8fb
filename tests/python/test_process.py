"""Process-level behaviour: loading the plugin twice, and living beside
Python's own signal handling (faulthandler).

Each test runs a fresh interpreter: what is under test is how the whole
process behaves, and a failure here would otherwise take pytest down too.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tfwasm_support import installed_plugin


def wheel_plugin():
    """The installed plugin; CI always installs it, so there its absence fails."""
    installed = installed_plugin()
    if installed is None:
        message = "needs the wheel installed in this interpreter (bash host/scripts/setup.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return installed


def test_second_copy_of_the_plugin_stays_inert(run_tf, tmp_path):
    """The wheel's copy plus TF_PLUGGABLE_DEVICE_LIBRARY_PATH: TensorFlow would
    abort on a second registration of the device type; tfwasm's second copy
    registers an inert zero-device platform and says why."""
    installed = wheel_plugin()
    # A copy at another path is a separate load (its own statics), the case
    # users hit with a build tree plus the wheel.
    second = tmp_path / "other" / "libtfwasm.so"
    second.parent.mkdir()
    shutil.copy(installed, second)
    run = run_tf(
        """
        devices = tf.config.list_physical_devices("WASM")
        result("wasm", len(devices))
        with tf.device("/device:WASM:0"):
            x = tf.matmul(tf.ones([3, 4]), tf.ones([4, 2]))
        result("matmul", f"{float(x.numpy().sum())}@{x.device}")
        cpu_check()
        """,
        env={"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": str(second)},
    )
    assert run.returncode == 0, run.describe()
    results = run.results()
    assert results["wasm"] == "1", run.describe()
    assert results["matmul"].startswith("24.0@") and results["matmul"].endswith("WASM:0"), run.describe()
    assert results["cpu"].startswith("2.0@"), run.describe()
    assert "loaded twice" in run.stderr and "TF_PLUGGABLE_DEVICE_LIBRARY_PATH" in run.stderr, run.describe()


def test_same_file_named_again_stays_inert(run_tf):
    """The variable naming the very file the wheel installed: one dlopen
    handle, a second SE_InitPlugin, still no abort."""
    installed = wheel_plugin()
    run = run_tf(
        """
        result("wasm", len(tf.config.list_physical_devices("WASM")))
        cpu_check()
        """,
        env={"TF_PLUGGABLE_DEVICE_LIBRARY_PATH": str(installed)},
    )
    assert run.returncode == 0, run.describe()
    assert run.results()["wasm"] == "1", run.describe()


def test_faulthandler_and_guest_traps_coexist(run_tf, hostile_guest):
    """With faulthandler enabled after TensorFlow and the plugin load (the
    order that would break signal-based wasm traps), a trapping guest is still
    an ordinary TF error, and a real native crash still reaches faulthandler."""
    policy = {
        "guest": {"name": "hostile-device", "path": str(hostile_guest), "config": {"mode": "trap-on-allocate", "after": 8}},
        "limits": {"memory-bytes": 33554432, "call-deadline-ms": 250},
        "device": {"count": 1, "memory-bytes": 67108864},
    }
    run = run_tf(
        """
        import ctypes, faulthandler
        faulthandler.enable()
        result("wasm", len(tf.config.list_physical_devices("WASM")))
        failures = 0
        for i in range(40):
            try:
                with tf.device("/device:WASM:0"):
                    tf.matmul(tf.ones([8, 8]), tf.ones([8, 8])).numpy()
            except tf.errors.OpError:
                failures += 1
        result("failures", failures)
        cpu_check()
        sys.stdout.flush()
        ctypes.string_at(0)  # a genuine segfault: faulthandler must report it
        """,
        policy=policy,
    )
    results = run.results()
    assert results.get("wasm") == "1", run.describe()
    assert int(results["failures"]) >= 1, run.describe()
    assert results["cpu"].startswith("2.0@"), run.describe()
    assert "trapped" in run.stderr and "hostile-device" in run.stderr, run.describe()
    # The deliberate segfault ends the process through faulthandler.
    assert run.returncode != 0
    assert "Fatal Python error: Segmentation fault" in run.stderr, run.describe()


# The child multiplies a Keras-layer-sized product on WASM (which starts the
# compute pool), checks it against NumPy, then reports which CPUs each
# compute worker may run on, read from /proc like any operator would.
POOL_AFFINITY = """
    import json, os
    rng = np.random.default_rng(5)
    a = rng.standard_normal((131, 389)).astype(np.float32)
    b = rng.standard_normal((389, 257)).astype(np.float32)
    with tf.device("/device:WASM:0"):
        product = tf.matmul(a, b)
    assert product.device.endswith("WASM:0"), product.device
    error = float(np.max(np.abs(product.numpy() - a.astype(np.float64) @ b.astype(np.float64))))
    workers = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/comm") as comm:
            if comm.read().startswith("tfwasm-comput"):
                workers.append(sorted(os.sched_getaffinity(int(task))))
    result("cases", json.dumps({
        "error": error,
        "process": sorted(os.sched_getaffinity(0)),
        "workers": workers,
    }))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="reads thread affinity from Linux's /proc")
@pytest.mark.parametrize("extra_threads", [0, 1])
def test_compute_workers_are_bound_one_per_cpu_only_when_the_pool_matches_the_cpus(run_tf, extra_threads):
    """With the default pool, one worker per CPU the process may use, each
    worker is bound to a CPU of its own and together they cover the
    process's CPUs; a pool sized otherwise (TFWASM_COMPUTE_THREADS) keeps
    every CPU open to every worker. Either way the product is right."""
    import json

    allowed = sorted(os.sched_getaffinity(0))
    threads = len(allowed) + extra_threads
    env = {"TFWASM_COMPUTE_THREADS": str(threads) if extra_threads else None}
    run = run_tf(POOL_AFFINITY, env=env)
    assert run.returncode == 0, run.describe()
    cases = json.loads(run.results()["cases"])
    assert cases["error"] < 1e-3, cases
    assert cases["process"] == allowed
    workers = cases["workers"]
    assert len(workers) == threads, cases
    if extra_threads == 0 and threads > 1:
        assert all(len(cpus) == 1 for cpus in workers), cases
        assert sorted(cpu for cpus in workers for cpu in cpus) == allowed, cases
    else:
        assert all(cpus == allowed for cpus in workers), cases
