"""Helpers shared by the Python tests: paths, plugin lookup, policies, subprocesses.

Kept apart from conftest.py so test modules can import them (``from
tfwasm_support import ...``); conftest.py holds the fixtures.
"""

from __future__ import annotations

import json
import os
import site
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
GUEST_BUILD_DIR = REPO_ROOT / "target" / "wasm32-wasip2" / "guest"
BUILT_REFERENCE_GUEST = GUEST_BUILD_DIR / "tfwasm_reference_device.wasm"
BUILT_HOSTILE_GUEST = GUEST_BUILD_DIR / "tfwasm_hostile_device.wasm"
REPO_POLICY = REPO_ROOT / "policies" / "device.toml"

LIBRARY_FILE = "libtfwasm.so"
PLUGIN_ENV = "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"
TEST_LIBRARY_ENV = "TFWASM_TEST_LIBRARY"
# Every variable the plugin reads; subprocesses start without the caller's.
TFWASM_ENV = ("TFWASM_POLICY", "TFWASM_GUEST", "TFWASM_DEVICE_TYPE", "TFWASM_LOG")

REFERENCE_GUEST_NAME = "reference-device"
HOSTILE_GUEST_NAME = "hostile-device"

DEFAULT_TIMEOUT = 180


# ------------------------------------------------------------ plugin lookup


def _site_packages_dirs() -> list[Path]:
    """The directories TensorFlow scans for ``tensorflow-plugins``."""
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs += [p for p in sys.path if "site-packages" in p or "dist-packages" in p]
    seen, result = set(), []
    for d in dirs:
        path = Path(d)
        if path not in seen:
            seen.add(path)
            result.append(path)
    return result


def installed_plugin() -> Path | None:
    """``tensorflow-plugins/libtfwasm.so`` in this interpreter, if installed."""
    for d in _site_packages_dirs():
        candidate = d / "tensorflow-plugins" / LIBRARY_FILE
        if candidate.is_file():
            return candidate
    return None


INSTALLED_PLUGIN = installed_plugin()
TEST_LIBRARY = None if INSTALLED_PLUGIN else os.environ.get(TEST_LIBRARY_ENV) or None


def plugin_missing_reason() -> str | None:
    if INSTALLED_PLUGIN is not None:
        return None
    if TEST_LIBRARY is None:
        return (
            f"tfwasm is not installed in {sys.executable} (no tensorflow-plugins/{LIBRARY_FILE} "
            f"in site-packages): run the tests with the repo's .venv, or set "
            f"{TEST_LIBRARY_ENV}=<path to {LIBRARY_FILE}>"
        )
    if not Path(TEST_LIBRARY).is_file():
        return f"{TEST_LIBRARY_ENV}={TEST_LIBRARY} does not exist"
    if not BUILT_REFERENCE_GUEST.is_file():
        return f"{TEST_LIBRARY_ENV} is set but the reference guest is not built ({BUILT_REFERENCE_GUEST.name})"
    return None


def reference_guest_path() -> Path:
    """The reference guest TensorFlow gets by default: the installed one if any."""
    if INSTALLED_PLUGIN is not None:
        installed = INSTALLED_PLUGIN.parent / "tfwasm" / "reference_device.wasm"
        if installed.is_file():
            return installed
    return BUILT_REFERENCE_GUEST


def defaults_env() -> dict[str, str]:
    """Variables that make the plugin find a policy and a guest.

    Empty when the wheel is installed (its own defaults apply); with
    ``TFWASM_TEST_LIBRARY`` the repo's policy and built guest stand in.
    """
    if INSTALLED_PLUGIN is not None:
        return {}
    env = {PLUGIN_ENV: str(Path(TEST_LIBRARY).resolve())} if TEST_LIBRARY else {}
    env["TFWASM_POLICY"] = str(REPO_POLICY)
    env["TFWASM_GUEST"] = str(BUILT_REFERENCE_GUEST)
    # The `tfwasm` Python package (traffic counters, sweep) from the source tree.
    package = str(REPO_ROOT / "host" / "python")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package, os.environ.get("PYTHONPATH")]))
    return env


# --------------------------------------------------------------------- TOML


def _toml_key(key: str) -> str:
    if key and all(c.isascii() and (c.isalnum() or c in "-_") for c in key):
        return key
    return _toml_string(key)


def _toml_string(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value:
            return "nan"
        if value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, (str, os.PathLike)):
        return _toml_string(os.fspath(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML: {value!r}")


def toml_dumps(document: dict) -> str:
    """A small TOML writer: nested dicts become tables, dicts in lists inline tables."""
    lines: list[str] = []

    def table(prefix: list[str], body: dict) -> None:
        scalars = [(k, v) for k, v in body.items() if not isinstance(v, dict)]
        children = [(k, v) for k, v in body.items() if isinstance(v, dict)]
        if prefix and (scalars or not children):
            if lines:
                lines.append("")
            lines.append("[" + ".".join(_toml_key(p) for p in prefix) + "]")
        for key, value in scalars:
            lines.append(f"{_toml_key(key)} = {_toml_value(value)}")
        for key, value in children:
            table(prefix + [key], value)

    table([], document)
    return "\n".join(lines) + "\n"


def make_policy(
    guest: os.PathLike | str,
    name: str = REFERENCE_GUEST_NAME,
    *,
    config: dict | None = None,
    count: int = 1,
    device_memory: int = 4 << 30,
    guest_memory: int = 32 << 20,
    deadline_ms: int = 250,
) -> dict:
    """A policy dict in the shape of policies/device.toml."""
    return {
        "guest": {"name": name, "path": os.fspath(guest), "config": dict(config or {})},
        "limits": {"memory-bytes": guest_memory, "call-deadline-ms": deadline_ms},
        "device": {"count": count, "memory-bytes": device_memory},
        "capabilities": {"stderr": False, "preopens": []},
    }


# --------------------------------------------------------------- subprocess


class TfRun:
    """Outcome of one ``run_tf``."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))

    def describe(self) -> str:
        return f"returncode {self.returncode}\n--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr[-6000:]}"

    def results(self) -> dict[str, str]:
        """``RESULT key=value`` lines printed by the child script."""
        found = {}
        for line in self.stdout.splitlines():
            if line.startswith("RESULT "):
                key, _, value = line[len("RESULT "):].partition("=")
                found[key.strip()] = value.strip()
        return found


def run_cases(run_tf, program: str, env: dict) -> tuple[dict, TfRun]:
    """Runs ``program`` with ``run_tf`` and ``env``; the program reports its
    findings as ``result("cases", json.dumps(...))``. Returns them decoded,
    with the run. A program that fails fails the calling test."""
    done = run_tf(program, env=env)
    assert done.returncode == 0, done.describe()
    return json.loads(done.results()["cases"]), done


def subprocess_env(extra: dict | None = None, policy_path: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TFWASM_ENV and k != PLUGIN_ENV}
    env.update(defaults_env())
    if policy_path is not None:
        env["TFWASM_POLICY"] = str(policy_path)
        env.pop("TFWASM_GUEST", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    for key, value in (extra or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = str(value)
    return env




# ------------------------------------------------------ in-process op tests

WASM = "/device:WASM:0"


def binary_shapes():
    """Operand shape pairs for elementwise binary op tests, as pytest params:
    0-size with broadcasting, 1×1, primes, 3-D broadcasting, a scalar on
    either side, an outer product, a one-element operand that raises the
    output's rank, and two large enough for the compute pool (broadcast and
    same-shape)."""
    import pytest

    return [
        pytest.param([0, 3], [1, 3], id="empty-broadcast"),
        pytest.param([1, 1], [1, 1], id="1x1"),
        pytest.param([7, 13], [7, 13], id="primes"),
        pytest.param([3, 1, 5], [4, 1], id="broadcast-3d"),
        pytest.param([], [2, 3], id="scalar-left"),
        pytest.param([3, 1], [1, 4], id="outer"),
        pytest.param([301, 257], [257], id="large-row"),
        pytest.param([263, 131], [263, 131], id="large-same"),
        pytest.param([5, 0], [], id="empty-scalar-right"),
        pytest.param([1], [4, 1], id="one-raises-rank"),
    ]


def random_data(shape, seed, scale=3.0):
    """float32 values with both signs and fractional parts, so a wrong kernel shows."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def on_wasm(tensor) -> bool:
    return tensor.device.endswith("WASM:0")


def run_on_wasm(tf, mode, fn, *args, scope_eager=False):
    """Calls ``fn(*args)`` eagerly (inside ``tf.device(WASM)`` if
    ``scope_eager``; without a scope the plugin still outranks the CPU), or,
    in ``mode == "function"``, as a tf.function whose ops are pinned to the
    WASM device with soft placement off.

    A function's output tensor reports the device of the call, not of the ops
    inside, so pinning with soft placement off is what makes a missing WASM
    kernel fail loudly instead of quietly running on the CPU.
    """
    if mode == "eager":
        if scope_eager:
            with tf.device(WASM):
                return fn(*args)
        return fn(*args)

    @tf.function
    def pinned(*inner):
        with tf.device(WASM):
            return fn(*inner)

    soft = tf.config.get_soft_device_placement()
    tf.config.set_soft_device_placement(False)
    try:
        return pinned(*args)
    finally:
        tf.config.set_soft_device_placement(soft)


def ops_on_wasm(tf, fn, *args):
    """``fn(*args)`` (a tf.function) and the op types it ran on WASM, from
    TensorFlow's run metadata: the function graphs after every pass, the
    plugin's graph pass included."""
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx.enable_run_metadata()
    try:
        ctx.export_run_metadata()  # drops what earlier calls left there
        result = fn(*args)
        graphs = ctx.export_run_metadata().function_graphs
    finally:
        ctx.disable_run_metadata()
    return result, {n.op for g in graphs for n in g.post_optimization_graph.node if n.device.endswith("WASM:0")}


# Prepended to every ``run_tf`` script (unless ``prelude=False``).
SCRIPT_PRELUDE = """\
import sys
import numpy as np
import tensorflow as tf


def result(key, value):
    print(f"RESULT {key}={value}", flush=True)


def cpu_check():
    \"\"\"A CPU op after whatever happened to the plugin device.\"\"\"
    with tf.device("/device:CPU:0"):
        x = tf.constant(1.0) + 1
    result("cpu", f"{float(x.numpy())}@{x.device}")

"""
