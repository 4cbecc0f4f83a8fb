"""The device guest written in C serves TensorFlow like the reference guest.

``guest/c-device`` implements the WIT world ``device`` in C; its build
script writes ``target/wasm32-wasip2/guest/tfwasm_c_device.wasm`` and
``policies/c-device.toml`` names it. Under that policy, in a fresh
interpreter, the Keras MLP of ``keras_models.py`` trains on
/device:WASM:0 to the losses of TensorFlow's CPU device (the tolerance of
test_training.py), and the device really is the C guest's: the log carries
the line its ``init`` writes, tagged with its policy name and file. (TensorFlow shows a PluggableDevice's platform name, ``TFWASM``, in
its device details, not the hardware name the guest reports.)
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_training import LOSS_RTOL, SCRIPT, assert_same_training, env_with_package
from tfwasm_support import GUEST_BUILD_DIR, REPO_ROOT

C_GUEST = GUEST_BUILD_DIR / "tfwasm_c_device.wasm"
C_POLICY = REPO_ROOT / "policies" / "c-device.toml"
TIMEOUT = 900


@pytest.fixture(scope="module")
def c_guest():
    if not C_GUEST.is_file():
        pytest.fail(
            f"the C guest is not built ({C_GUEST.relative_to(REPO_ROOT)}): run bash guest/c-device/build.sh",
            pytrace=False,
        )
    return C_GUEST


def train(args: list[str], env: dict, tmp_path, label: str) -> subprocess.CompletedProcess:
    env["TF_ENABLE_ONEDNN_OPTS"] = "0"
    done = subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, f"{label} failed:\n{done.stdout[-4000:]}\n{done.stderr[-6000:]}"
    return done


def last_json(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"no result line:\n{stdout[-4000:]}"
    return json.loads(lines[-1])


def test_keras_mlp_trains_on_the_c_guest_like_on_the_cpu(c_guest, tmp_path, cpu_policy):
    env = env_with_package(C_POLICY)
    env["TFWASM_GUEST"] = str(c_guest)  # the built guest, wherever the policy's relative path points
    env["TFWASM_LOG"] = "info"
    on_c = train([str(SCRIPT), "--model", "mlp"], env, tmp_path, "the MLP on the C guest")
    cpu = last_json(train([str(SCRIPT), "--model", "mlp"], env_with_package(cpu_policy), tmp_path, "the MLP on the CPU").stdout)

    # The host starts each line about a guest with its policy name and file;
    # this one the C guest's init writes itself, through `host.log`.
    guest_lines = [line for line in on_c.stderr.splitlines() if "guest 'c-device' (tfwasm_c_device.wasm)" in line]
    shown = "\n".join(guest_lines or on_c.stderr.splitlines()[-40:])
    assert any("device 0:" in line and "best-fit placement (C guest)" in line for line in guest_lines), (
        f"no init line from the C guest in the log:\n{shown}"
    )

    wasm = last_json(on_c.stdout)
    assert wasm["devices"] == ["CPU", "WASM"]
    assert cpu["devices"] == ["CPU"], "the reference run must not see a WASM device"
    assert len(wasm["loss"]) == 3
    assert_same_training(wasm, cpu, LOSS_RTOL, "mlp on the C guest")
