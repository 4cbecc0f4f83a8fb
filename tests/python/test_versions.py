"""Which TensorFlow the plugin serves, and how it behaves in one it does not.

The range lives in ``host/plugin/src/config.rs`` (``SUPPORTED_TENSORFLOW``);
the wheel's metadata and the plugin's refusal must both say the same.
``bash tests/run.sh --tf nightly`` also runs this file under
tensorflow-cpu 2.20, below the range, where the last test applies.
"""

from __future__ import annotations

import re
import subprocess
from importlib import metadata

import pytest

from tfwasm_support import INSTALLED_PLUGIN, REPO_ROOT, TEST_LIBRARY
from versions import TENSORFLOW


def supported_range() -> tuple[tuple[int, int], tuple[int, int]]:
    text = (REPO_ROOT / "host" / "plugin" / "src" / "config.rs").read_text(encoding="utf-8")
    found = re.search(r"SUPPORTED_TENSORFLOW[^=]*=\s*\((\d+),\s*(\d+)\)\.\.=\((\d+),\s*(\d+)\);", text)
    assert found, "no SUPPORTED_TENSORFLOW in config.rs"
    a, b, c, d = map(int, found.groups())
    return (a, b), (c, d)


LOW, HIGH = supported_range()
SUPPORTED = LOW <= TENSORFLOW <= HIGH


@pytest.mark.skipif(INSTALLED_PLUGIN is None, reason="needs the installed wheel's metadata")
def test_the_wheel_states_the_supported_range():
    meta = metadata.metadata("tfwasm")
    requires = meta.get_all("Requires-Dist") or []
    below = f"{HIGH[0]}.{HIGH[1] + 1}"
    for name in ("tensorflow", "tensorflow-cpu"):
        wanted = f'{name}<{below},>={LOW[0]}.{LOW[1]}; extra == "{name}"'
        assert wanted in requires, f"{wanted!r} not in {requires}"
    # No unconditional TensorFlow requirement: it would install a second one.
    assert all("extra ==" in line for line in requires if line.startswith(("tensorflow", "tf-nightly"))), requires
    assert f"{LOW[0]}.{LOW[1]}-{HIGH[0]}.{HIGH[1]}" in meta["Summary"], meta["Summary"]


def test_the_plugin_names_tensorflows_libraries_and_finds_them_beside_itself():
    # Not the symbols another library happened to export globally: 2.22
    # loads its libraries without RTLD_GLOBAL.
    library = INSTALLED_PLUGIN or TEST_LIBRARY
    dynamic = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", dynamic)
    assert "libtensorflow_framework.so.2" in needed and "libtensorflow_cc.so.2" in needed, needed
    assert "(RUNPATH)" in dynamic and "[$ORIGIN/../tensorflow]" in dynamic, dynamic


@pytest.mark.skipif(SUPPORTED, reason=f"TensorFlow {TENSORFLOW} is supported; run under one outside {LOW}-{HIGH}")
def test_an_unsupported_tensorflow_keeps_working_without_the_device(run_tf):
    run = run_tf("""
result("version", tf.__version__)
result("devices", len(tf.config.list_physical_devices("WASM")))
with tf.device("/device:CPU:0"):
    result("sum", float(tf.reduce_sum(tf.constant([1.0, 2.0, 3.5])).numpy()))
cpu_check()
""")
    assert run.returncode == 0, run.describe()
    r = run.results()
    assert r["devices"] == "0" and r["sum"] == "6.5" and r["cpu"].startswith("2.0@"), run.describe()
    said = [line for line in run.stderr.splitlines() if "supports TensorFlow" in line]
    assert said and f"{LOW[0]}.{LOW[1]} to {HIGH[0]}.{HIGH[1]}" in said[0] and r["version"] in said[0], run.stderr[-3000:]
