"""Two devices from one policy (device.count = 2): each has its own guest and memory."""

from tfwasm_support import REFERENCE_GUEST_NAME, make_policy

LISTING = """
result("physical", ",".join(d.name for d in tf.config.list_physical_devices("WASM")))
result("logical", ",".join(d.name for d in tf.config.list_logical_devices("WASM")))
"""

COPIES = LISTING + """
values = (np.arange(7 * 13, dtype=np.float32).reshape(7, 13) - 40.5) / 3
with tf.device("/device:WASM:0"):
    on0 = tf.identity(tf.constant(values))
with tf.device("/device:WASM:1"):
    on1 = tf.identity(on0)
result("on0", on0.device)
result("on1", on1.device)
result("copy_equal", np.array_equal(on1.numpy(), values) and np.array_equal(on0.numpy(), values))

# Back and forth through both devices, with odd sizes.
ok = True
for n in [1, 3, 4097, 250_001]:
    v = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    with tf.device("/device:WASM:1"):
        x = tf.identity(tf.constant(v))
    with tf.device("/device:WASM:0"):
        y = tf.identity(x)
    with tf.device("/device:WASM:1"):
        z = tf.identity(y)
    ok = ok and np.array_equal(z.numpy(), v) and z.device.endswith("WASM:1") and y.device.endswith("WASM:0")
result("round_trips", ok)
cpu_check()
"""

COMPUTE = LISTING + """
a = np.random.default_rng(1).standard_normal([7, 13]).astype(np.float32)
b = np.random.default_rng(2).standard_normal([13, 5]).astype(np.float32)
with tf.device("/device:WASM:1"):
    product = tf.linalg.matmul(tf.constant(a), tf.constant(b))
    total = product + tf.constant(1.0)
result("matmul_device", product.device)
result("add_device", total.device)
want = a.astype(np.float64) @ b
result("matmul_ok", np.allclose(product.numpy(), want, rtol=1e-4, atol=1e-4))
result("add_ok", np.allclose(total.numpy(), want + 1, rtol=1e-4, atol=1e-4))
cpu_check()
"""


def two_devices(run_tf, reference_guest, script):
    run = run_tf(script, policy=make_policy(reference_guest, REFERENCE_GUEST_NAME, count=2, device_memory=256 << 20))
    assert run.returncode == 0, run.describe()
    r = run.results()
    assert r["physical"] == "/physical_device:WASM:0,/physical_device:WASM:1", run.describe()
    assert r["logical"] == "/device:WASM:0,/device:WASM:1", run.describe()
    assert r["cpu"].startswith("2.0@"), run.describe()
    return run, r


def test_copy_between_two_devices(run_tf, reference_guest):
    run, r = two_devices(run_tf, reference_guest, COPIES)
    assert r["on0"].endswith("WASM:0") and r["on1"].endswith("WASM:1"), run.describe()
    assert r["copy_equal"] == "True", run.describe()
    assert r["round_trips"] == "True", run.describe()


def test_compute_on_the_second_device(run_tf, reference_guest):
    run, r = two_devices(run_tf, reference_guest, COMPUTE)
    assert r["matmul_device"].endswith("WASM:1"), f"MatMul did not run on WASM:1\n{run.describe()}"
    assert r["add_device"].endswith("WASM:1"), f"AddV2 did not run on WASM:1\n{run.describe()}"
    assert r["matmul_ok"] == "True" and r["add_ok"] == "True", run.describe()


def test_count_zero_lists_no_device(run_tf, reference_guest):
    run = run_tf(
        'result("devices", len(tf.config.list_physical_devices("WASM")))\ncpu_check()\n',
        policy=make_policy(reference_guest, REFERENCE_GUEST_NAME, count=0),
    )
    assert run.returncode == 0, run.describe()
    assert run.results()["devices"] == "0", run.describe()
    assert run.results()["cpu"].startswith("2.0@"), run.describe()
