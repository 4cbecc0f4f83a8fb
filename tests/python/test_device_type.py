"""TFWASM_DEVICE_TYPE: the same device under another type name, and a bad name refused safely."""

from tfwasm_support import REFERENCE_GUEST_NAME, make_policy

AS_GPU = """
result("gpu", ",".join(d.name for d in tf.config.list_physical_devices("GPU")))
result("wasm", len(tf.config.list_physical_devices("WASM")))
a = np.random.default_rng(3).standard_normal([7, 13]).astype(np.float32)
b = np.random.default_rng(4).standard_normal([13, 5]).astype(np.float32)
with tf.device("/GPU:0"):
    copy = tf.identity(tf.constant(a))
    product = tf.linalg.matmul(tf.constant(a), tf.constant(b))
    total = product + tf.constant(2.0)
result("copy", f"{copy.device}|{np.array_equal(copy.numpy(), a)}")
result("matmul_device", product.device)
result("add_device", total.device)
want = a.astype(np.float64) @ b
result("matmul_ok", np.allclose(product.numpy(), want, rtol=1e-4, atol=1e-4))
result("add_ok", np.allclose(total.numpy(), want + 2, rtol=1e-4, atol=1e-4))
cpu_check()
"""

BAD_TYPE = """
result("all", ",".join(d.device_type for d in tf.config.list_physical_devices()))
x = tf.constant(1.0) + 1
result("default", f"{float(x.numpy())}@{x.device}")
cpu_check()
"""


def test_device_type_gpu(run_tf, reference_guest):
    run = run_tf(AS_GPU, policy=make_policy(reference_guest, REFERENCE_GUEST_NAME), env={"TFWASM_DEVICE_TYPE": "GPU"})
    assert run.returncode == 0, run.describe()
    r = run.results()
    assert r["gpu"] == "/physical_device:GPU:0", run.describe()
    assert r["wasm"] == "0", run.describe()
    device, _, equal = r["copy"].partition("|")
    assert device.endswith("GPU:0") and equal == "True", run.describe()
    assert r["matmul_device"].endswith("GPU:0"), f"MatMul did not run on /GPU:0\n{run.describe()}"
    assert r["add_device"].endswith("GPU:0"), f"AddV2 did not run on /GPU:0\n{run.describe()}"
    assert r["matmul_ok"] == "True" and r["add_ok"] == "True", run.describe()
    assert r["cpu"].startswith("2.0@"), run.describe()


def test_invalid_device_type_registers_nothing(run_tf, reference_guest):
    run = run_tf(BAD_TYPE, policy=make_policy(reference_guest, REFERENCE_GUEST_NAME), env={"TFWASM_DEVICE_TYPE": "wasm1"})
    assert run.returncode == 0, run.describe()
    r = run.results()
    assert r["all"] == "CPU", f"no plugin device may be listed\n{run.describe()}"
    value, _, device = r["default"].partition("@")
    assert float(value) == 2.0 and device.endswith("CPU:0"), run.describe()
    assert r["cpu"].startswith("2.0@"), run.describe()
    explained = [line for line in run.stderr.splitlines() if "TFWASM_DEVICE_TYPE" in line and "wasm1" in line]
    assert explained, f"stderr must name TFWASM_DEVICE_TYPE and the bad value\n{run.describe()}"


def test_other_valid_device_type(run_tf, reference_guest):
    script = """
    result("types", ",".join(d.device_type for d in tf.config.list_physical_devices()))
    with tf.device("/device:MY_DEV:0"):
        x = tf.identity(tf.constant(np.arange(5, dtype=np.float32)))
    result("copy", f"{x.device}|{np.array_equal(x.numpy(), np.arange(5))}")
    """
    run = run_tf(script, policy=make_policy(reference_guest, REFERENCE_GUEST_NAME), env={"TFWASM_DEVICE_TYPE": "MY_DEV"})
    assert run.returncode == 0, run.describe()
    r = run.results()
    assert r["types"].split(",").count("MY_DEV") == 1, run.describe()
    device, _, equal = r["copy"].partition("|")
    assert device.endswith("MY_DEV:0") and equal == "True", run.describe()
