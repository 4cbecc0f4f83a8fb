"""Takes docs/img/trace-viewer.png: TensorBoard's trace viewer showing a
Keras fit on /device:WASM:0, from the real TensorBoard in a headless browser.

    .venv/bin/python host/scripts/trace_screenshot.py [--out docs/img/trace-viewer.png]

Needs the plugin installed in this interpreter (host/scripts/setup.sh, which
also installs tensorboard and xprof), a Chromium (Debian: `apt-get install
chromium`) and Playwright to drive it (`pip install playwright`, in this or
another interpreter named by --browser-python; only its driver is used, with
the system Chromium, so no browser is downloaded). Not part of the tests.

Steps: profile two epochs of a small Keras MLP into a temporary log
directory, start `tensorboard --logdir` on it, open the profile plugin's
trace viewer on the run, zoom into one training step and save the page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROFILE = textwrap.dedent(
    """
    import sys
    import numpy as np
    import keras
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2048, 784)).astype("float32")
    y = rng.integers(0, 10, 2048)
    model = keras.Sequential([
        keras.Input((784,)),
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    model.fit(x, y, batch_size=256, epochs=1, verbose=0)
    with tf.profiler.experimental.Profile(sys.argv[1]):
        model.fit(x, y, batch_size=256, epochs=1, verbose=0)
    """
)

SHOOT = textwrap.dedent(
    """
    import sys
    from playwright.sync_api import sync_playwright

    url, out, browser_path = sys.argv[1], sys.argv[2], sys.argv[3]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1600, "height": 900})
        page.goto(url)
        # The trace viewer imports the trace in chunks; its page has no
        # signal for "done" that survives its shadow DOM, so wait.
        page.wait_for_timeout(20000)
        # Zoom ('w', centred on the pointer) into the middle of the
        # profile, where the training steps run.
        zoom = int(sys.argv[4])
        if zoom:
            # Focus the timeline (a click on the empty right edge of the
            # first track) so it takes the keys, then point at the middle.
            page.mouse.click(1560, 330)
            page.mouse.move(float(sys.argv[5]), 330)
        for _ in range(zoom):
            page.keyboard.press("w")
            page.wait_for_timeout(150)
        page.wait_for_timeout(1500)
        page.screenshot(path=out)
        browser.close()
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "trace-viewer.png")
    parser.add_argument("--browser", default=shutil.which("chromium") or "chromium")
    parser.add_argument("--browser-python", default=sys.executable, help="an interpreter with playwright")
    parser.add_argument("--zoom", type=int, default=6, help="zoom steps into the trace")
    parser.add_argument("--at", type=float, default=900, help="x pixel the zoom centres on")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "TF_PLUGGABLE_DEVICE_LIBRARY_PATH"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with tempfile.TemporaryDirectory() as logdir:
        subprocess.run([sys.executable, "-c", PROFILE, logdir], env=env, check=True)
        run = next((Path(logdir) / "plugins" / "profile").iterdir()).name
        host = next((Path(logdir) / "plugins" / "profile" / run).glob("*.xplane.pb")).name.removesuffix(".xplane.pb")
        port = free_port()
        tensorboard = Path(sys.executable).with_name("tensorboard")
        server = subprocess.Popen(
            [str(tensorboard), "--logdir", logdir, "--port", str(port), "--host", "127.0.0.1"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(120):
                try:
                    urllib.request.urlopen(f"{base}/data/plugin/profile/runs", timeout=2)
                    break
                except OSError:
                    time.sleep(0.5)
            data = f"/data/plugin/profile/data?run={run}&tag=trace_viewer&host={host}"
            url = (
                f"{base}/data/plugin/profile/trace_viewer_index.html?is_streaming=false&is_oss=true"
                f"&trace_data_url={urllib.parse.quote(data, safe='')}"
            )
            args.out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(
                [args.browser_python, "-c", SHOOT, url, str(args.out), args.browser, str(args.zoom), str(args.at)], check=True
            )
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
