"""The rest of the hostile suite inside the real TensorFlow: the hand-written
WAT guests of guest/hostile-wat and the hostile guest's newer modes.

Each kind runs in a fresh interpreter (the plugin reads its policy once, at
``import tensorflow``), two at a time, all started by one module fixture so
the suite pays for TensorFlow's import in parallel; each parametrized test
then checks its kind's run. Whatever the guest does, the process exits 0,
the CPU device works afterwards, and a line of stderr names the guest (its
policy ``guest.name`` is the kind) and says why. A guest that cannot start
leaves TensorFlow without a WASM device; one that faults later costs the
ops it touched, never a wrong value; a legal one costs nothing.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tfwasm_support import (
    BUILT_HOSTILE_GUEST,
    DEFAULT_TIMEOUT,
    REPO_ROOT,
    SCRIPT_PRELUDE,
    TfRun,
    make_policy,
    subprocess_env,
    toml_dumps,
)

WAT_GUEST_DIR = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target").resolve() / "wasm32-wasip2" / "guest" / "hostile"

# TensorFlow starts, lists its devices and adds on the default one.
START = """
result("devices", len(tf.config.list_physical_devices("WASM")))
x = tf.constant(1.0) + 1
result("default", f"{float(x.numpy())}@{x.device}")
cpu_check()
"""

ITERATIONS = 6

# A few ops on the device, each result checked, every result kept and checked
# again at the end (a placement the host let through would corrupt one). The
# 4 MiB copy goes through the stream worker, so TensorFlow polls its event.
WORKLOAD = f"""
result("devices", len(tf.config.list_physical_devices("WASM")))
outcomes, kept = [], []


def expected(i):
    a = np.arange(64, dtype=np.float32) + i
    m = a.reshape(8, 8)
    return a, a + a, m @ m


for i in range({ITERATIONS}):
    want = expected(i)
    try:
        with tf.device("/device:WASM:0"):
            a = tf.identity(tf.constant(want[0]))
            b = a + a
            c = tf.linalg.matmul(tf.reshape(a, [8, 8]), tf.reshape(a, [8, 8]))
            big = tf.identity(tf.constant(np.full(1 << 20, i, np.float32)))
        good = all(np.array_equal(g, w) for g, w in zip((a.numpy(), b.numpy(), c.numpy()), want))
        outcomes.append("ok" if good and bool(np.all(big.numpy() == i)) else "wrong")
        kept.append((i, a, b, c))
    except tf.errors.OpError as e:
        outcomes.append(type(e).__name__)
        print(f"op {{i}} failed: {{type(e).__name__}}: {{e}}", file=sys.stderr, flush=True)

result("outcomes", ",".join(outcomes))
result("intact", all(
    all(np.array_equal(t.numpy(), w) for t, w in zip((a, b, c), expected(i))) for i, a, b, c in kept
))
cpu_check()
"""

# What happens to TensorFlow:
ABSENT = "absent"  # the guest cannot start: no WASM device
FAULTS = "faults"  # ops on the device fail, the device recovers or is disabled
SURVIVES = "survives"  # the lie is caught and worked around: every op succeeds
LEGAL = "legal"  # nothing to catch: every op succeeds, no fault is logged

# (id, guest file or None for the hostile guest, [guest.config], limits, outcome, what stderr says)
CASES = [
    # Guests built for another host, or importing what the policy does not grant.
    ("wrong-version", "wrong-version", {}, {}, ABSENT, r"built against tfwasm:device@9\.0\.0"),
    ("newer-host", "newer-host", {}, {}, ABSENT, r"built against tfwasm:device@0\.2\.0"),
    ("missing-export", "missing-export", {}, {}, ABSENT, r"does not export tfwasm:device/streams"),
    # An empty filesystem and the clocks give a guest nothing: they load.
    ("imports-filesystem", "imports-filesystem", {}, {}, LEGAL, None),
    ("imports-clocks", "imports-clocks", {}, {}, LEGAL, None),
    ("imports-random", "imports-random", {}, {}, ABSENT, r"wasi:random/random.*capabilities\.random"),
    ("imports-sockets", "imports-sockets", {}, {}, ABSENT, r"wasi:sockets/.*never grants"),
    # Guests that cannot be instantiated or lie in init.
    ("huge-initial-memory", "huge-initial-memory", {}, {}, ABSENT, r"instantiate.*limits\.memory-bytes"),
    ("start-loop", "start-loop", {}, {"deadline_ms": 50}, ABSENT, r"`instantiate` exceeded its 50 ms deadline"),
    ("string-past-memory", "string-past-memory", {}, {}, ABSENT, r"identity\.init.*out of bounds"),
    ("invalid-utf8", "invalid-utf8", {}, {}, ABSENT, r"identity\.init.*utf-8"),
    ("realloc-lies", "realloc-lies", {}, {}, ABSENT, r"identity\.init.*realloc"),
    ("resource-bomb", "resource-bomb", {}, {}, ABSENT, r"more than 4096 WASI resources"),
    ("trap-in-post-return", "trap-in-post-return", {}, {}, ABSENT, r"`identity\.init` trapped"),
    ("huge-name", None, {"mode": "huge-name"}, {}, ABSENT, r"hardware-name must be at most 256 bytes"),
    ("loop-on-init", None, {"mode": "loop-on-init"}, {"deadline_ms": 50}, ABSENT, r"`identity\.init` exceeded"),
    # Guests that blow up in allocate: every allocation fails.
    ("stack-overflow", "stack-overflow", {}, {}, FAULTS, r"memory\.allocate.*stack overflow"),
    ("memory-grow-bomb", "memory-grow-bomb", {}, {"guest_memory": 8 << 20}, FAULTS, r"past its cap of 8388608 bytes"),
    ("table-grow-bomb", "table-grow-bomb", {}, {}, FAULTS, r"grow a table to \d+ elements, past the host's cap"),
    ("bad-discriminant", "bad-discriminant", {}, {}, FAULTS, r"memory\.allocate.*discriminant"),
    # The hostile guest's allocation modes, after 5 honest allocations.
    ("deep-recursion", None, {"mode": "deep-recursion", "after": 5}, {}, FAULTS, r"memory\.allocate` trapped"),
    ("exit", None, {"mode": "exit", "after": 5}, {}, FAULTS, r"called exit\(1\)"),
    ("offset-overflow", None, {"mode": "offset-overflow", "after": 5}, {}, FAULTS, r"invalid answer.*out of bounds"),
    ("huge-refusal", None, {"mode": "huge-refusal", "after": 5}, {}, FAULTS, r"memory\.allocate` failed.*bytes in all"),
    # Lies about streams and events, and loops where TensorFlow does not wait:
    # caught, and the host orders the work itself.
    ("list-past-memory", "list-past-memory", {}, {}, SURVIVES, r"streams\.submit.*list pointer/length out of bounds"),
    ("seq-jump", None, {"mode": "seq-jump"}, {}, SURVIVES, r"invalid answer.*jumps more than"),
    ("loop-on-complete", None, {"mode": "loop-on-complete"}, {"deadline_ms": 50}, SURVIVES, r"`streams\.complete` exceeded"),
    ("loop-on-event-status", None, {"mode": "loop-on-event-status"}, {"deadline_ms": 50}, SURVIVES,
     r"`streams\.event-status` exceeded"),
    # Legal, if odd.
    ("honest", "honest", {}, {}, LEGAL, None),
    # Slow but far inside its deadline, however loaded the machine: the
    # deadline counts wall-clock ticks, preemption included.
    ("slow", None, {"mode": "slow", "delay-ms": 2}, {"deadline_ms": 2000}, LEGAL, None),
    ("huge-ticket", None, {"mode": "huge-ticket"}, {}, LEGAL, None),
    ("log-forgery", None, {"mode": "log-forgery"}, {}, LEGAL, r"starting\\ntfwasm: guest 'reference-device'"),
]

# Fault words that must not appear about a legal guest.
FAULT_WORDS = r"trapped|invalid answer|deadline|disabled|replaces the instance"


def guest_path(file: str | None) -> Path:
    if file is None:
        return BUILT_HOSTILE_GUEST
    return WAT_GUEST_DIR / f"{file}.wasm"


def run_case(case, policy_dir: Path) -> TfRun:
    name, file, config, limits, outcome, _ = case
    policy_path = policy_dir / f"{name}.toml"
    # An option, so the host passes init a list (which a lying cabi_realloc must take).
    config = {"colour": "red", **config}
    policy_path.write_text(toml_dumps(make_policy(guest_path(file), name, config=config, **limits)), encoding="utf-8")
    script = SCRIPT_PRELUDE + textwrap.dedent(START if outcome == ABSENT else WORKLOAD)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            env=subprocess_env(None, policy_path),
            cwd=policy_dir,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=DEFAULT_TIMEOUT,
        )
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return TfRun(-1, "", f"the TensorFlow subprocess hung for {DEFAULT_TIMEOUT} s\n{err}")
    return TfRun(done.returncode, done.stdout, done.stderr)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, hostile_guest):
    missing = [guest_path(c[1]) for c in CASES if not guest_path(c[1]).is_file()]
    if missing:
        pytest.fail(f"not built: {', '.join(p.name for p in missing)}: bash guest/hostile-wat/build.sh", pytrace=False)
    policy_dir = tmp_path_factory.mktemp("hostile-kinds")
    # Two at a time: importing TensorFlow is most of each run's time.
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {case[0]: pool.submit(run_case, case, policy_dir) for case in CASES}
        return {name: future.result() for name, future in futures.items()}


def guest_lines(run: TfRun, name: str, pattern: str) -> list[str]:
    return [line for line in run.stderr.splitlines() if f"guest '{name}'" in line and re.search(pattern, line)]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_kind(runs, case):
    name, _, _, _, outcome, why = case
    run = runs[name]
    assert run.returncode == 0, f"{name}: the process did not live\n{run.describe()}"
    results = run.results()
    assert results.get("cpu", "").startswith("2.0@"), f"{name}: the CPU device no longer works\n{run.describe()}"
    if why is not None:
        assert guest_lines(run, name, why), f"{name}: no stderr line names guest '{name}' and says {why!r}\n{run.describe()}"
    if outcome == ABSENT:
        assert results.get("devices") == "0", run.describe()
        value, _, device = results["default"].partition("@")
        assert float(value) == 2.0 and device.endswith("CPU:0"), run.describe()
        return
    assert results.get("devices") == "1", f"{name}: the device must be listed\n{run.describe()}"
    outcomes = results["outcomes"].split(",")
    assert len(outcomes) == ITERATIONS and "wrong" not in outcomes, f"{name}: {outcomes}\n{run.describe()}"
    assert results["intact"] == "True", f"{name}: a kept tensor was corrupted\n{run.describe()}"
    if outcome == FAULTS:
        assert any(o != "ok" for o in outcomes), f"{name}: no op failed, so the fault went unnoticed\n{run.describe()}"
    else:
        assert outcomes == ["ok"] * ITERATIONS, f"{name}: {outcomes}\n{run.describe()}"
    if outcome == LEGAL:
        blamed = guest_lines(run, name, FAULT_WORDS)
        assert not blamed, f"{name}: a legal guest was blamed:\n" + "\n".join(blamed)


def test_text_from_a_guest_cannot_forge_log_lines(runs):
    # Its forged lines arrive escaped, inside the line that names it.
    for name in ("log-forgery", "huge-refusal"):
        stderr = runs[name].stderr
        assert "\x1b" not in stderr and "\r" not in stderr, f"{name}: a terminal escape reached stderr"
        forged = [line for line in stderr.splitlines() if line.lstrip().startswith("tfwasm: guest 'reference-device'")]
        assert not forged, f"{name}: a forged line reached stderr:\n" + "\n".join(forged)
    refusals = [line for line in runs["huge-refusal"].stderr.splitlines() if "bytes in all" in line]
    assert refusals and max(map(len, refusals)) < 8192, "the 4 MiB refusal reached stderr whole"
