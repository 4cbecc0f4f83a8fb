"""Shared fixtures for the tests that load tfwasm into the real TensorFlow.

How the plugin gets into TensorFlow
-----------------------------------
* Normally the wheel is installed in the interpreter running pytest (the
  repo's ``.venv``): ``site-packages/tensorflow-plugins/libtfwasm.so`` is
  loaded by ``import tensorflow`` together with its installed policy and
  reference guest. ``TF_PLUGGABLE_DEVICE_LIBRARY_PATH`` must then stay unset
  (a second copy of the plugin registers nothing), so it is removed everywhere.
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
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# The CPU device these tests compare with runs TensorFlow's own kernels, not
# their oneDNN replacements (on by default): on an AVX-512 machine, TensorFlow
# 2.21's oneDNN Conv2D of a batch of 0 returns the input's channel count
# ([0,7,7,3] for 4 filters), and its depthwise convolution refuses an empty
# filter, so a correct WASM kernel would fail against them. Set before any
# import of TensorFlow; subprocesses inherit it.
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

from tfwasm_support import (
    BUILT_HOSTILE_GUEST,
    DEFAULT_TIMEOUT,
    PLUGIN_ENV,
    REPO_ROOT,
    SCRIPT_PRELUDE,
    TfRun,
    defaults_env,
    make_policy,
    plugin_missing_reason,
    reference_guest_path,
    subprocess_env,
    toml_dumps,
)


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


@pytest.fixture
def run_tf(tmp_path):
    """``run_tf(code, env=None, policy=None, timeout=...)`` → TfRun.

    Runs ``sys.executable -c code`` (dedented, after ``SCRIPT_PRELUDE``, which
    imports numpy as np and tensorflow as tf and defines ``result(key,
    value)`` and ``cpu_check()``) in a fresh process. ``policy``
    (a dict) is written as TOML into the test's tmp dir and passed as
    TFWASM_POLICY; ``None`` keeps the install's default policy. ``env``
    entries override the environment (a value of ``None`` removes one).
    """
    counter = iter(range(1_000_000))

    def run(
        code: str,
        env: dict | None = None,
        policy: dict | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        prelude: bool = True,
    ) -> TfRun:
        policy_path = None
        if policy is not None:
            policy_path = tmp_path / f"policy-{next(counter)}.toml"
            policy_path.write_text(toml_dumps(policy), encoding="utf-8")
        try:
            done = subprocess.run(
                [sys.executable, "-c", (SCRIPT_PRELUDE if prelude else "") + textwrap.dedent(code)],
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


@pytest.fixture(scope="module")
def cpu_policy(tmp_path_factory) -> Path:
    """A policy whose plugin lists no device: TensorFlow's CPU kernels only,
    the reference side of the training-parity tests."""
    path = tmp_path_factory.mktemp("policy") / "no-device.toml"
    path.write_text(toml_dumps(make_policy(reference_guest_path(), count=0)), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tf():
    """TensorFlow imported once into the test process, with the plugin loaded."""
    os.environ.pop(PLUGIN_ENV, None)
    for key, value in defaults_env().items():
        if key == PLUGIN_ENV or key not in os.environ:
            os.environ[key] = value
    import tensorflow

    devices = tensorflow.config.list_physical_devices("WASM")
    assert devices, "the tfwasm plugin registered no WASM device (see the stderr of this test run)"
    return tensorflow


@pytest.fixture(params=["eager", "function"])
def mode(request):
    """Each op test runs eagerly and inside a tf.function (see ``run_on_wasm``)."""
    return request.param
