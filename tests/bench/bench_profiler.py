"""What profiling costs: the Keras MLP train step with a profiling session
running ÷ without, on the plugin device and, in the same run, on
TensorFlow's CPU device (a policy with ``[device] count = 0``), whose ratio
is TensorFlow's own profiler's cost; then the collect time and the trace's
size for a 10-step profile of the small CNN.

    python tests/bench/bench_profiler.py [--rounds 4] [--steps 60] [--without-profiler]

With ``--without-profiler`` it also builds this tree's plugin twice by the
same command, with the profiler and without it (``cargo build --release -p
tfwasm --no-default-features``: no ``TF_InitProfiler``, every recording site
compiled away, as before the profiler existed), and times the WASM step on
both with profiling off, in the same rotation: "with ÷ without" is what
merely having the profiler costs. Each build is loaded from an overlay of
this interpreter's site-packages whose ``tensorflow-plugins`` holds it
(TensorFlow loads the plugins of site-packages before
``TF_PLUGGABLE_DEVICE_LIBRARY_PATH``, and a second copy of tfwasm stays
inert); with ``TFWASM_TEST_LIBRARY`` instead of an installed wheel, that
variable names it.

Each sample is a fresh process (bench_keras.py's models, ``jit_compile=
False``); the four kinds (WASM off, WASM on, CPU off, CPU on) run in an
order that rotates from round to round. "On" starts
``tf.profiler.experimental.start`` after the warm-up fit and stops it after
the timed one, so every timed step runs inside the session. Nothing here
asserts a time: this is a measurement, not a test.

As a worker (``--worker``) it prints ``STEP_SECONDS``, and with a profile
``COLLECT_SECONDS`` (the time of ``stop()``: collecting every plane and
writing the file) and ``TRACE_BYTES`` (the ``.xplane.pb``'s size).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE))


def worker(model: str, steps: int, profile: bool) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    from bench_keras import build, timed_fit, train_data

    keras.utils.set_random_seed(7)
    net, shape, batch = build(model)
    x, y = train_data(model, shape, batch, steps)

    @contextlib.contextmanager
    def profiled():
        with tempfile.TemporaryDirectory() as logdir:
            tf.profiler.experimental.start(logdir)
            yield
            started = time.perf_counter()
            tf.profiler.experimental.stop()
            print(f"COLLECT_SECONDS {time.perf_counter() - started:.6f}")
            files = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
            print(f"TRACE_BYTES {os.path.getsize(files[0]) if files else 0}")

    step = timed_fit(net, x, y, batch, timed=profiled if profile else contextlib.nullcontext)
    print(f"STEP_SECONDS {step:.9f}")
    print(f"WEIGHTS_ON {net.trainable_variables[0].value.device}")
    return 0


def build_variants(into: Path) -> dict[str, Path]:
    """The plugin built from this tree twice by the same command, with the
    profiler (default features) and without (``--no-default-features``),
    copied to ``into``; the target directory ends with the default build."""
    root = HERE.parent.parent
    built = root / "target" / "release" / "libtfwasm.so"
    cargo = ["cargo", "build", "--release", "--quiet", "-p", "tfwasm"]
    variants = {}
    for name, flags in (("without", ["--no-default-features"]), ("with", [])):
        print(f"bench_profiler: building the plugin {name} the profiler", flush=True)
        subprocess.run([*cargo, *flags], cwd=root, check=True)
        (into / name).mkdir(parents=True, exist_ok=True)
        variants[name] = into / name / built.name
        shutil.copy2(built, variants[name])
    return variants


def overlay_interpreter(library: Path, into: Path) -> tuple[str, dict[str, str]]:
    """An interpreter that loads ``library`` as the plugin, and the
    environment to run it in.

    Installed wheel: a venv over the same base interpreter whose
    site-packages links every entry of this one's except
    ``tensorflow-plugins``, which holds ``library`` and links the installed
    defaults (policy, guests) beside it. No wheel: this interpreter, with
    ``TFWASM_TEST_LIBRARY`` naming ``library``."""
    from tfwasm_support import INSTALLED_PLUGIN, PLUGIN_ENV

    if INSTALLED_PLUGIN is None:
        return sys.executable, {PLUGIN_ENV: str(library)}
    venv = into / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site_packages = Path(
        subprocess.check_output([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], text=True).strip()
    )
    shutil.rmtree(site_packages)
    site_packages.mkdir()
    installed_plugins = INSTALLED_PLUGIN.parent
    for entry in installed_plugins.parent.iterdir():
        if entry.name != installed_plugins.name:
            (site_packages / entry.name).symlink_to(entry)
    plugins = site_packages / installed_plugins.name
    plugins.mkdir()
    shutil.copy2(library, plugins / INSTALLED_PLUGIN.name)
    for entry in installed_plugins.iterdir():
        if entry.name != INSTALLED_PLUGIN.name:
            (plugins / entry.name).symlink_to(entry)
    return str(venv / "bin" / "python"), {}


def run_worker(
    model: str, steps: int, profile: bool, policy: Path | None, interpreter: tuple[str, dict[str, str]] | None = None
) -> dict[str, str]:
    from tfwasm_support import subprocess_env

    python, extra = interpreter or (sys.executable, {})
    env = subprocess_env(extra, policy_path=policy)
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    command = [python, __file__, "--worker", "--model", model, "--steps", str(steps)]
    if profile:
        command.append("--profile")
    done = subprocess.run(command, env=env, capture_output=True, text=True, errors="replace", timeout=1800)
    keys = ("STEP_SECONDS ", "WEIGHTS_ON ", "COLLECT_SECONDS ", "TRACE_BYTES ")
    values = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(keys))
    if done.returncode != 0 or "STEP_SECONDS" not in values:
        sys.exit(f"bench_profiler: the {model} worker failed:\n{done.stderr[-3000:]}")
    return values


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--without-profiler", action="store_true", help="also time a build without the profiler")
    args = parser.parse_args()
    if args.worker:
        return worker(args.model, args.steps, args.profile)

    from tfwasm_support import make_policy, plugin_missing_reason, reference_guest_path, toml_dumps

    reason = plugin_missing_reason()
    if reason:
        sys.exit(reason)
    with tempfile.TemporaryDirectory() as tmp:
        no_device = Path(tmp) / "no-device.toml"
        no_device.write_text(toml_dumps(make_policy(reference_guest_path(), count=0)), encoding="utf-8")
        kinds = [("WASM", False, None), ("WASM", True, None), ("CPU", False, no_device), ("CPU", True, no_device)]
        interpreters = {}
        if args.without_profiler:
            for name, library in build_variants(Path(tmp) / "builds").items():
                interpreters[f"WASM {name}"] = overlay_interpreter(library, Path(tmp) / name)
                kinds.append((f"WASM {name}", False, None))
        samples: dict[tuple[str, bool], list[float]] = {(device, on): [] for device, on, _ in kinds}
        placed = {}
        for index in range(args.rounds):
            shift = index % len(kinds)
            for device, on, policy in kinds[shift:] + kinds[:shift]:
                values = run_worker("mlp", args.steps, on, policy, interpreters.get(device))
                samples[(device, on)].append(float(values["STEP_SECONDS"]))
                placed[device] = values.get("WEIGHTS_ON", "?")
        print("Keras MLP 784-512-256-10, batch 128: train-step time, profiling on / off")
        for device in ("WASM", "CPU"):
            off, on = (statistics.median(samples[(device, flag)]) for flag in (False, True))
            where = placed[device].rsplit("/", 1)[-1]
            print(f"    {device:<5} off {off * 1e3:7.2f} ms  on {on * 1e3:7.2f} ms  on / off = {on / off:.3f}  (weights on {where})")
        wasm = statistics.median(samples[("WASM", True)]) / statistics.median(samples[("WASM", False)])
        cpu = statistics.median(samples[("CPU", True)]) / statistics.median(samples[("CPU", False)])
        print(f"    WASM (on / off) / CPU (on / off) = {wasm / cpu:.3f}")
        if args.without_profiler:
            built = {name: statistics.median(samples[(f"WASM {name}", False)]) for name in ("with", "without")}
            print("    this tree built twice by the same cargo command, profiling off in both:")
            print(f"    WASM with the profiler {built['with'] * 1e3:7.2f} ms  without {built['without'] * 1e3:7.2f} ms  "
                  f"with / without = {built['with'] / built['without']:.3f}")
            per_round = [a / b for a, b in zip(samples[("WASM with", False)], samples[("WASM without", False)])]
            print(f"    per round: {' '.join(f'{r:.3f}' for r in per_round)}")
        print()

        collects, sizes = [], []
        for _ in range(max(2, args.rounds // 2)):
            values = run_worker("cnn", 10, True, None)
            collects.append(float(values["COLLECT_SECONDS"]))
            sizes.append(int(values["TRACE_BYTES"]))
        print("Keras small CNN, batch 64, a 10-step profile on WASM")
        print(f"    collect (tf.profiler.experimental.stop) {statistics.median(collects) * 1e3:.1f} ms, "
              f"trace {statistics.median(sizes) / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
