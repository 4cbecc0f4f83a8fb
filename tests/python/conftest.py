"""Shared fixtures for the tests that load tfwasm into the real TensorFlow.

How the plugin gets into TensorFlow
-----------------------------------
* Normally the wheel is installed in the interpreter running pytest (the
  repo's ``.venv``): ``site-packages/tensorflow-plugins/libtfwasm.so`` is
  loaded by ``import tensorflow`` together with its installed policy and
  reference guest. ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH`` must then stay unset
  (loading the plugin twice aborts TensorFlow), so it is removed everywhere.
* Otherwise ``TFWASM_TEST_LIBRARY=<path to libtfwasm.so>`` names a build to
  test; it is passed to TensorFlow as ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH`` and
  the repo's ``policies/device.toml`` with the built reference guest stands in
  for the installed defaults.

Most numeric tests share one in-process TensorFlow (fixture ``tf``). Tests
that need another policy, another environment or a guest that may misbehave
run a fresh interpreter through ``run_tf`` with a policy written from a dict.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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


def _defaults_env() -> dict[str, str]:
    """Variables that make the plugin find a policy and a guest.

    Empty when the wheel is installed (its own defaults apply); with
    ``TFWASM_TEST_LIBRARY`` the repo's policy and built guest stand in.
    """
    if INSTALLED_PLUGIN is not None:
        return {}
    env = {PLUGIN_ENV: str(Path(TEST_LIBRARY).resolve())} if TEST_LIBRARY else {}
    env["TFWASM_POLICY"] = str(REPO_POLICY)
    env["TFWASM_GUEST"] = str(BUILT_REFERENCE_GUEST)
    return env


@pytest.fixture(scope="session", autouse=True)
def plugin_available():
    """Every test here needs the plugin: say clearly how to provide it."""
    reason = plugin_missing_reason()
    if reason:
        pytest.fail(reason, pytrace=False)


@pytest.fixture(scope="session")
def hostile_guest() -> Path:
    if not BUILT_HOSTILE_GUEST.is_file():
        pytest.fail(
            f"the hostile guest is not built ({BUILT_HOSTILE_GUEST.relative_to(REPO_ROOT)}); "
            "build the guests: cargo build --target wasm32-wasip2 --profile guest "
            "-p tfwasm-reference-device -p tfwasm-hostile-device",
            pytrace=False,
        )
    return BUILT_HOSTILE_GUEST


@pytest.fixture(scope="session")
def reference_guest() -> Path:
    path = reference_guest_path()
    if not path.is_file():
        pytest.fail(f"no reference guest at {path}", pytrace=False)
    return path


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


def subprocess_env(extra: dict | None = None, policy_path: Path | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in TFWASM_ENV and k != PLUGIN_ENV}
    env.update(_defaults_env())
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


@pytest.fixture
def run_tf(tmp_path):
    """``run_tf(code, env=None, policy=None, timeout=...)`` → TfRun.

    Runs ``sys.executable -c code`` (dedented) in a fresh process. ``policy``
    (a dict) is written as TOML into the test's tmp dir and passed as
    TFWASM_POLICY; ``None`` keeps the install's default policy. ``env``
    entries override the environment (a value of ``None`` removes one).
    """
    counter = iter(range(1_000_000))

    def run(code: str, env: dict | None = None, policy: dict | None = None, timeout: float = DEFAULT_TIMEOUT) -> TfRun:
        policy_path = None
        if policy is not None:
            policy_path = tmp_path / f"policy-{next(counter)}.toml"
            policy_path.write_text(toml_dumps(policy), encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "-c", textwrap.dedent(code)],
                env=subprocess_env(env, policy_path),
                cwd=tmp_path,
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
            pytest.fail(f"the TensorFlow subprocess hung for {timeout} s\n--- stdout ---\n{out}\n--- stderr ---\n{err[-6000:]}")
        return TfRun(done.returncode, done.stdout, done.stderr)

    return run


# ------------------------------------------------------- in-process TensorFlow


@pytest.fixture(scope="session")
def tf():
    """TensorFlow imported once into the test process, with the plugin loaded."""
    os.environ.pop(PLUGIN_ENV, None)
    for key, value in _defaults_env().items():
        if key == PLUGIN_ENV or key not in os.environ:
            os.environ[key] = value
    import tensorflow

    devices = tensorflow.config.list_physical_devices("WASM")
    assert devices, "the tfwasm plugin registered no WASM device (see the stderr of this test run)"
    return tensorflow
