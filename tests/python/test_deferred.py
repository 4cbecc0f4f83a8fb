"""Deferred kernels against the real wheel.

The convolutions are registered with ``TF_NewAsyncKernelBuilder``: an
execution with at least 256 KiB of inputs moves TensorFlow's completion
callback (a ``std::function`` in TensorFlow's stack frame) out of the frame
and finishes on the compute pool after the compute callback returned
(``host/plugin/src/abi/ffi/done.rs``, ``abi::kernels::compute_kernel_async``).
These tests run that path in graphs (the executor's ``ComputeAsync``) and
eagerly (TensorFlow's blocking ``Compute`` wrapper), compare with NumPy in
float64 and with TF's CPU device, check a failing deferred kernel becomes a
Python error that leaves the process working, and check from the trace log
that the executions really were deferred (a test that only ever ran the
inline path would prove nothing about the moved callback).

Products and fused elementwise trees are synchronous: TensorFlow hands every
node an asynchronous kernel makes ready to its inter-op pool, which cost a
Keras MLP step more than the overlap won (``docs/architecture.md``). The
log must show none of them deferred, however large.
"""

DEFERRED = "finishes on the compute pool"
DEFERRED_OPS = ("MatMul", "BatchMatMulV2", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter", "_TfwasmFusedElementwise")

PRODUCTS = """
rng = np.random.default_rng(7)
# Products of any size finish inline: x and y (8.5M multiply-adds each)
# were deferred while products were asynchronous.
a = rng.standard_normal((131, 509)).astype(np.float32)
b = rng.standard_normal((509, 127)).astype(np.float32)
c = rng.standard_normal((509, 131)).astype(np.float32)
batch_a = rng.standard_normal((3, 67, 509)).astype(np.float32)
batch_b = rng.standard_normal((3, 509, 61)).astype(np.float32)

def close(name, got, want):
    got = np.asarray(got, dtype=np.float64)
    err = float(np.max(np.abs(got - want)) / max(1.0, float(np.max(np.abs(want)))))
    result(name, f"{got.shape == want.shape} {err < 1e-5} {err:.2e}")

@tf.function(jit_compile=False)
def graph(a, b, c, batch_a, batch_b):
    with tf.device("/device:WASM:0"):
        x = tf.matmul(a, b)                    # independent of y
        y = tf.matmul(a, c)
        z = tf.matmul(y, x, transpose_a=True)
        w = tf.linalg.matmul(batch_a, batch_b) # BatchMatMulV2
        return x, y, z, w

x, y, z, w = graph(a, b, c, batch_a, batch_b)
A, B, C = a.astype(np.float64), b.astype(np.float64), c.astype(np.float64)
close("graph_x", x, A @ B)
close("graph_y", y, A @ C)
close("graph_z", z, (A @ C).T @ (A @ B))
close("graph_w", w, batch_a.astype(np.float64) @ batch_b.astype(np.float64))
result("device", x.device)

with tf.device("/device:WASM:0"):
    e = tf.matmul(a, b)
close("eager", e, A @ B)
result("eager_device", e.device)

# Conv2D and both backprops (forward input 2×64×64×16 = 512 KB).
images = tf.constant(rng.standard_normal((2, 64, 64, 16)).astype(np.float32))
kernel = tf.constant(rng.standard_normal((3, 3, 16, 8)).astype(np.float32))

def conv_and_grads(images, kernel):
    with tf.GradientTape() as tape:
        tape.watch([images, kernel])
        out = tf.nn.conv2d(images, kernel, 1, "SAME")
        loss = tf.reduce_sum(out * out)
    return (out, *tape.gradient(loss, [images, kernel]))

with tf.device("/device:WASM:0"):
    got = tf.function(conv_and_grads, jit_compile=False)(images, kernel)
with tf.device("/device:CPU:0"):
    want = conv_and_grads(images, kernel)
for name, g, ref in zip(("conv", "conv_dx", "conv_dw"), got, want):
    close(name, g, np.asarray(ref, dtype=np.float64))
result("conv_device", got[0].device)

# Fused elementwise trees (the graph pass makes each one node), on inputs
# of 301×257 (≥ 256 KiB) and 7×5: all finish inline.
u = rng.standard_normal((301, 257)).astype(np.float32)
v = rng.standard_normal((301, 257)).astype(np.float32)
s = rng.standard_normal((7, 5)).astype(np.float32)

@tf.function(jit_compile=False)
def trees(u, v, s):
    with tf.device("/device:WASM:0"):
        return tf.sqrt(tf.abs(u) + 1.0) * v, (u - v) * 0.5 + v, tf.abs(s) * 2.0 + 1.0

p, q, r = [t.numpy() for t in trees(u, v, s)]
one, half, two = np.float32(1), np.float32(0.5), np.float32(2)
# Each step is one exactly rounded float32 operation, as NumPy's are.
result("fused_p", bool(np.array_equal(p, np.sqrt(np.abs(u) + one) * v)))
result("fused_q", bool(np.array_equal(q, (u - v) * half + v)))
result("fused_r", bool(np.array_equal(r, np.abs(s) * two + one)))
"""


def test_inline_products_and_deferred_convolutions_match_numpy_and_the_cpu(run_tf):
    run = run_tf(PRODUCTS, env={"TFWASM_LOG": "trace"})
    assert run.returncode == 0, run.describe()
    found = run.results()
    for name in ("graph_x", "graph_y", "graph_z", "graph_w", "eager", "conv", "conv_dx", "conv_dw"):
        assert found.get(name, "").startswith("True True"), f"{name}: {found.get(name)}\n{run.describe()}"
    for key in ("device", "eager_device", "conv_device"):
        assert found[key].endswith("device:WASM:0"), found
    for name in ("fused_p", "fused_q", "fused_r"):
        assert found.get(name) == "True", f"{name}: {found.get(name)}\n{run.describe()}"
    # Each deferred execution logs once: the convolution with both
    # backprops. The products and fused trees never do.
    counts = {op: run.stderr.count(f"tfwasm: {op} {DEFERRED}") for op in DEFERRED_OPS}
    assert counts == {
        "MatMul": 0,
        "BatchMatMulV2": 0,
        "Conv2D": 1,
        "Conv2DBackpropInput": 1,
        "Conv2DBackpropFilter": 1,
        "_TfwasmFusedElementwise": 0,
    }, (
        f"{counts}\n{run.describe()}"
    )


def test_a_failing_deferred_convolution_is_a_python_error_and_the_process_carries_on(run_tf):
    run = run_tf(
        """
        spec = tf.TensorSpec([None, None, None, None], tf.float32)

        @tf.function(input_signature=[spec, spec], jit_compile=False)
        def conv(images, kernel):
            with tf.device("/device:WASM:0"):
                return tf.nn.conv2d(images, kernel, 1, "SAME")

        images = np.ones((2, 64, 64, 16), np.float32)  # 512 KiB of input: deferred
        try:
            conv(images, np.ones((3, 3, 15, 8), np.float32)).numpy()  # depth 16 against 15
            result("error", "none")
        except tf.errors.InvalidArgumentError as e:
            result("error", " ".join(str(e).split())[:400])
        good = conv(images, np.ones((3, 3, 16, 8), np.float32))
        result("after", f"{float(good.numpy()[0, 5, 5, 0])}@{good.device}")
        cpu_check()
        """,
        env={"TFWASM_LOG": "trace"},
    )
    assert run.returncode == 0, run.describe()
    found = run.results()
    assert "Conv2D" in found["error"] and "16 vs 15" in found["error"], found
    # An interior output sums a full 3×3×16 window of ones.
    assert found["after"] == "144.0@/job:localhost/replica:0/task:0/device:WASM:0", found
    assert found["cpu"].startswith("2.0@"), found
    assert f"tfwasm: Conv2D {DEFERRED}" in run.stderr, run.describe()
