"""Guests that cannot become a device: TensorFlow still imports and the CPU works.

Each case runs in a fresh interpreter: the plugin reads its policy once, at
``import tensorflow``. The device is simply absent, and stderr names the
guest (its policy ``guest.name``) and says why.
"""

import re

import pytest

from tfwasm_support import INSTALLED_PLUGIN, make_policy

SCRIPT = """
result("devices", len(tf.config.list_physical_devices("WASM")))
result("all", ",".join(d.device_type for d in tf.config.list_physical_devices()))
x = tf.constant(1.0) + 1
result("default", f"{float(x.numpy())}@{x.device}")
cpu_check()
"""


def check_refused(run, name: str, why: str):
    outcome = run.results()
    assert run.returncode == 0, run.describe()
    assert outcome.get("devices") == "0", run.describe()
    assert outcome.get("all") == "CPU", run.describe()
    value, _, device = outcome["default"].partition("@")
    assert float(value) == 2.0 and device.endswith("CPU:0"), run.describe()
    assert outcome["cpu"].startswith("2.0@"), run.describe()
    lines = [line for line in run.stderr.splitlines() if name in line]
    assert lines, f"stderr never names the guest {name!r}\n{run.describe()}"
    assert any(re.search(why, line, re.IGNORECASE) for line in lines), (
        f"no stderr line naming {name!r} says why ({why!r})\n{run.describe()}"
    )


def test_missing_guest_file(run_tf, tmp_path):
    policy = make_policy(tmp_path / "no-such-guest.wasm", "missing-guest")
    check_refused(run_tf(SCRIPT, policy=policy), "missing-guest", r"cannot read|no such file|not found")


def test_guest_path_override_to_missing_file(run_tf, tmp_path, reference_guest):
    # TFWASM_GUEST replaces the policy's guest.path, even when that one is fine.
    policy = make_policy(reference_guest, "overridden-guest")
    run = run_tf(SCRIPT, policy=policy, env={"TFWASM_GUEST": tmp_path / "elsewhere.wasm"})
    check_refused(run, "overridden-guest", r"cannot read|no such file|not found")


def test_corrupt_bytes(run_tf, tmp_path):
    guest = tmp_path / "corrupt.wasm"
    guest.write_bytes(b"definitely not wasm, just some bytes\x00\xff\x13")
    check_refused(run_tf(SCRIPT, policy=make_policy(guest, "corrupt-guest")), "corrupt-guest", r"not a valid|invalid|magic")


def test_truncated_guest(run_tf, tmp_path, reference_guest):
    guest = tmp_path / "truncated.wasm"
    guest.write_bytes(reference_guest.read_bytes()[:4096])
    run = run_tf(SCRIPT, policy=make_policy(guest, "truncated-guest"))
    check_refused(run, "truncated-guest", r"not a valid|invalid|unexpected end|eof")


def test_core_module_is_not_a_component(run_tf, tmp_path):
    guest = tmp_path / "core.wasm"
    guest.write_bytes(b"\0asm\x01\0\0\0")  # a valid, empty core module
    check_refused(run_tf(SCRIPT, policy=make_policy(guest, "core-module-guest")), "core-module-guest", r"component")


def test_component_of_another_world(run_tf, tmp_path):
    guest = tmp_path / "empty-component.wasm"
    guest.write_bytes(b"\0asm\x0d\0\x01\0")  # a valid, empty component: exports nothing
    run = run_tf(SCRIPT, policy=make_policy(guest, "wrong-world-guest"))
    check_refused(run, "wrong-world-guest", r"export|world|identity")


def test_guest_init_error(run_tf, hostile_guest):
    policy = make_policy(hostile_guest, "init-error-guest", config={"mode": "init-error"})
    check_refused(run_tf(SCRIPT, policy=policy), "init-error-guest", r"init")


def test_guest_traps_in_init(run_tf, hostile_guest):
    policy = make_policy(hostile_guest, "trap-on-init-guest", config={"mode": "trap-on-init"})
    check_refused(run_tf(SCRIPT, policy=policy), "trap-on-init-guest", r"trap")


@pytest.mark.parametrize(
    "text,why",
    [
        pytest.param("this is = not [toml", r"policy|expected|invalid", id="not-toml"),
        pytest.param('[guest]\nname = "x"\npath = "x.wasm"\nsurprise = 1\n', r"surprise|unknown", id="unknown-key"),
        pytest.param('[guest]\nname = "x"\npath = "x.wasm"\n[device]\nmemory-bytes = 10\n', r"memory-bytes", id="bad-limit"),
    ],
)
def test_invalid_policy(run_tf, tmp_path, text, why):
    policy = tmp_path / "bad-policy.toml"
    policy.write_text(text)
    run = run_tf(SCRIPT, env={"TFWASM_POLICY": policy})
    # A policy that cannot be read has no guest name yet: the message names the file.
    check_refused(run, "bad-policy.toml", why)


def test_missing_policy_file(run_tf, tmp_path):
    run = run_tf(SCRIPT, env={"TFWASM_POLICY": tmp_path / "absent-policy.toml"})
    check_refused(run, "absent-policy.toml", r"cannot read|no such file|not found")


@pytest.mark.skipif(INSTALLED_PLUGIN is None, reason="the defaults an empty variable falls back to are the wheel's")
def test_empty_policy_and_guest_variables_mean_the_defaults(run_tf):
    # `TFWASM_POLICY=$UNSET_VAR` in a shell script: the installed policy and
    # guest apply, where the empty path used to fail to read.
    run = run_tf(SCRIPT, env={"TFWASM_POLICY": "", "TFWASM_GUEST": ""})
    assert run.returncode == 0, run.describe()
    assert run.results().get("devices") == "1", run.describe()
    value, _, device = run.results()["default"].partition("@")
    assert float(value) == 2.0 and device.endswith("WASM:0"), run.describe()
