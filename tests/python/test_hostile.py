"""Hostile guests inside the real TensorFlow: a misbehaving guest costs an op, never the process.

Each case runs the hostile test guest in a fresh interpreter. The script
does the same small workload many times (a host→device copy, AddV2 and
MatMul on the device, a copy back), keeps every tensor that was produced
alive, and at the end checks them all again: a bad placement that the host
let through would show up as a corrupted tensor. It catches TensorFlow
errors, so the process must exit 0 and then run a CPU op.
"""

import re

import pytest

from tfwasm_support import HOSTILE_GUEST_NAME, make_policy

ITERATIONS = 12

WORKLOAD = f"""
result("devices", len(tf.config.list_physical_devices("WASM")))
outcomes, kept = [], []


def expected(i):
    a = np.arange(64, dtype=np.float32) + i
    m = a.reshape(8, 8)
    return a, a + a, m @ m  # small integers: exact in float32


# 4 MiB: above the size a stream runs at once on the calling thread, so its
# copies go through the stream worker and TensorFlow polls their events
# while they are pending (where a guest's lie about an event shows).
BIG = 1 << 20


for i in range({ITERATIONS}):
    want = expected(i)
    try:
        with tf.device("/device:WASM:0"):
            a = tf.identity(tf.constant(want[0]))
            b = a + a
            m = tf.reshape(a, [8, 8])
            c = tf.linalg.matmul(m, m)
            big = tf.identity(tf.constant(np.full(BIG, i, np.float32)))
        got = (a.numpy(), b.numpy(), c.numpy())
        good = all(np.array_equal(g, w) for g, w in zip(got, want)) and bool(np.all(big.numpy() == i))
        outcomes.append("ok" if good else "wrong")
        kept.append((i, a, b, c))
    except tf.errors.OpError as e:
        outcomes.append(type(e).__name__)
        print(f"op {{i}} failed: {{type(e).__name__}}: {{e}}", file=sys.stderr, flush=True)

result("outcomes", ",".join(outcomes))
intact = all(
    all(np.array_equal(t.numpy(), w) for t, w in zip((a, b, c), expected(i)))
    for i, a, b, c in kept
)
result("intact", intact)
cpu_check()
"""


def run_hostile(run_tf, hostile_guest, mode, after=5, **limits):
    policy = make_policy(hostile_guest, HOSTILE_GUEST_NAME, config={"mode": mode, "after": after}, **limits)
    run = run_tf(WORKLOAD, policy=policy)
    assert run.returncode == 0, run.describe()
    outcome = run.results()
    assert outcome.get("devices") == "1", f"the hostile device must be listed\n{run.describe()}"
    assert outcome.get("cpu", "").startswith("2.0@"), run.describe()
    outcomes = outcome["outcomes"].split(",")
    assert len(outcomes) == ITERATIONS, run.describe()
    assert "wrong" not in outcomes, f"an op returned wrong values: {outcomes}\n{run.describe()}"
    assert outcome["intact"] == "True", f"a kept tensor was corrupted\n{run.describe()}"
    return run, outcomes


def guest_lines(run, pattern):
    """stderr lines that name the hostile guest and match ``pattern``."""
    return [
        line
        for line in run.stderr.splitlines()
        if HOSTILE_GUEST_NAME in line and re.search(pattern, line, re.IGNORECASE)
    ]


# ------------------------------------------------- misbehaviour in allocate


ALLOCATION_FAULTS = [
    pytest.param("trap-on-allocate", {}, r"trapped", id="trap-on-allocate"),
    pytest.param("loop-on-allocate", {"deadline_ms": 50}, r"deadline", id="loop-on-allocate"),
    pytest.param("out-of-bounds", {}, r"invalid answer.*out of bounds", id="out-of-bounds"),
    pytest.param("overlap", {}, r"invalid answer.*overlap", id="overlap"),
    pytest.param("misaligned", {}, r"invalid answer.*aligned", id="misaligned"),
    # The guest's own memory cap (limits.memory-bytes) stops it, not the deadline.
    pytest.param("grow-memory", {"guest_memory": 8 << 20, "deadline_ms": 2000}, r"trapped|memory", id="grow-memory"),
]


@pytest.mark.parametrize("mode,limits,why", ALLOCATION_FAULTS)
def test_allocation_fault_fails_the_op_and_the_device_recovers(run_tf, hostile_guest, mode, limits, why):
    run, outcomes = run_hostile(run_tf, hostile_guest, mode, **limits)
    assert outcomes[0] == "ok", f"the first allocations are honest (after=5): {outcomes}\n{run.describe()}"
    failed = [i for i, o in enumerate(outcomes) if o != "ok"]
    assert failed, f"{mode}: no op failed, so the misbehaviour went unnoticed: {outcomes}\n{run.describe()}"
    recovered = any(o == "ok" for o in outcomes[failed[0] + 1:])
    assert recovered or "disabled" in run.stderr, (
        f"{mode}: after the fault the device neither recovered nor reported itself disabled: {outcomes}\n{run.describe()}"
    )
    assert guest_lines(run, why), f"{mode}: no stderr line names {HOSTILE_GUEST_NAME!r} and says {why!r}\n{run.describe()}"


def test_deadline_stops_the_loop_quickly(run_tf, hostile_guest):
    # Each looping call must be cut at about the deadline, not run on: the
    # workload has ITERATIONS ops and several faults, all within the timeout.
    # 50 ms, not less: the deadline counts wall-clock ticks, so on a loaded
    # 2-core machine an honest call (or the instantiation that replaces a
    # faulted instance) preempted for tens of ms would be cut too, and the
    # device disabled by faults the guest did not make.
    run, outcomes = run_hostile(run_tf, hostile_guest, "loop-on-allocate", deadline_ms=50)
    assert outcomes.count("ok") >= ITERATIONS // 2, outcomes
    assert guest_lines(run, r"deadline"), run.describe()


def test_a_guest_that_always_traps_is_disabled(run_tf, hostile_guest):
    run, outcomes = run_hostile(run_tf, hostile_guest, "trap-on-allocate", after=0)
    assert all(o != "ok" for o in outcomes), outcomes
    assert guest_lines(run, r"trapped"), run.describe()
    disabled = [line for line in run.stderr.splitlines() if "disabled" in line and HOSTILE_GUEST_NAME in line]
    assert disabled, f"the device must say it is disabled, naming the guest\n{run.describe()}"


def test_honest_out_of_memory_is_not_a_fault(run_tf, hostile_guest):
    run, outcomes = run_hostile(run_tf, hostile_guest, "oom-always", after=0)
    assert all(o != "ok" for o in outcomes), outcomes
    assert guest_lines(run, r"memory"), f"the OOM log names the guest\n{run.describe()}"
    assert not guest_lines(run, r"trapped|invalid answer|deadline|disabled"), (
        f"an honest out-of-memory answer was treated as a fault\n{run.describe()}"
    )


# --------------------------------------------------- misbehaviour on streams


STREAM_FAULTS = [
    pytest.param("bad-seq", r"invalid answer", id="bad-seq"),
    pytest.param("dangling-dependency", r"invalid answer", id="dangling-dependency"),
    pytest.param("lie-event-complete", r"invalid answer", id="lie-event-complete"),
    pytest.param("trap-on-submit", r"trapped", id="trap-on-submit"),
]


@pytest.mark.parametrize("mode,why", STREAM_FAULTS)
def test_stream_lie_is_survived(run_tf, hostile_guest, mode, why):
    # The host checks every ticket and falls back to its own order, so the
    # work still runs correctly: no op needs to fail.
    run, outcomes = run_hostile(run_tf, hostile_guest, mode)
    assert outcomes == ["ok"] * ITERATIONS, f"{mode}: {outcomes}\n{run.describe()}"
    assert guest_lines(run, why), f"{mode}: no stderr line names {HOSTILE_GUEST_NAME!r} and says {why!r}\n{run.describe()}"


@pytest.mark.parametrize("mode", ["bad-seq", "dangling-dependency", "trap-on-submit"])
def test_honest_event_status_is_not_blamed(run_tf, hostile_guest, mode):
    # These guests lie about tickets, never about events. After the host
    # replaces such an instance, the fresh one may rightly not know an event
    # recorded on a stream the host now orders itself; that is no fault.
    run, _ = run_hostile(run_tf, hostile_guest, mode)
    blamed = guest_lines(run, r"event-status.*(invalid answer|trapped)|(invalid answer|trapped).*event-status")
    assert not blamed, f"{mode}: the host blamed an honest event-status answer:\n" + "\n".join(blamed)


def test_faults_under_concurrent_use(run_tf, hostile_guest):
    # Four threads allocate at once while the guest traps every 10th
    # allocation: each fault costs an op, never a wrong value or the process.
    script = """
    import threading

    errors, wrong, kept = [], [], []
    lock = threading.Lock()

    def worker(index):
        rng = np.random.default_rng(index)
        for i in range(25):
            a = rng.standard_normal([9, 11]).astype(np.float32)
            b = rng.standard_normal([11, 4]).astype(np.float32)
            try:
                with tf.device("/device:WASM:0"):
                    c = tf.linalg.matmul(tf.constant(a), tf.constant(b)) + 1.0
                got = c.numpy()
            except tf.errors.OpError as e:
                with lock:
                    errors.append(type(e).__name__)
                continue
            want = a.astype(np.float64) @ b + 1.0
            with lock:
                if not np.allclose(got, want, rtol=1e-4, atol=1e-4):
                    wrong.append((index, i))
                kept.append((c, want))

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result("errors", len(errors))
    result("ok", len(kept))
    result("wrong", len(wrong))
    result("intact", all(np.allclose(c.numpy(), w, rtol=1e-4, atol=1e-4) for c, w in kept))
    cpu_check()
    """
    policy = make_policy(hostile_guest, HOSTILE_GUEST_NAME, config={"mode": "trap-on-allocate", "after": 10})
    run = run_tf(script, policy=policy)
    assert run.returncode == 0, run.describe()
    r = run.results()
    assert r["wrong"] == "0" and r["intact"] == "True", run.describe()
    assert int(r["errors"]) > 0, f"the guest trapped, so some op must have failed\n{run.describe()}"
    assert int(r["ok"]) > 0, run.describe()
    assert r["cpu"].startswith("2.0@"), run.describe()
    assert guest_lines(run, r"trapped"), run.describe()


def test_traps_with_faulthandler_installed_after_tensorflow(run_tf, hostile_guest):
    # Python's faulthandler, enabled after the plugin loaded, sits in front
    # of any signal handler the plugin installed. A guest trap must still be
    # an ordinary error, not a "Fatal Python error".
    policy = make_policy(hostile_guest, HOSTILE_GUEST_NAME, config={"mode": "trap-on-allocate", "after": 5})
    run = run_tf("import faulthandler\nfaulthandler.enable()\n" + WORKLOAD, policy=policy)
    assert run.returncode == 0, run.describe()
    assert "Fatal Python error" not in run.stderr, run.describe()
    outcomes = run.results()["outcomes"].split(",")
    assert "ok" in outcomes and any(o != "ok" for o in outcomes), outcomes
    assert guest_lines(run, r"trapped"), run.describe()


def test_a_guest_that_loops_in_usage_cannot_keep_tensorflow_from_starting(run_tf, hostile_guest):
    # TensorFlow asks every device for its free memory while it creates the
    # eager context; it used to fail with "Failed to query available memory
    # for PluggableDevice 0", so not even the CPU could run. The host answers
    # from its own count when the guest cannot.
    run, outcomes = run_hostile(run_tf, hostile_guest, "loop-on-usage", deadline_ms=50)
    assert outcomes == ["ok"] * ITERATIONS, f"allocation is honest in this mode: {outcomes}\n{run.describe()}"
    assert guest_lines(run, r"memory\.usage.*deadline|deadline.*memory\.usage"), run.describe()
    assert "host's own count" in run.stderr, run.describe()
