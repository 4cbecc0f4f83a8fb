#!/usr/bin/env python3
"""Build the tfwasm wheel from already-built artifacts (standard library only).

The wheel installs into site-packages:

    tensorflow-plugins/libtfwasm.so                 loaded by `import tensorflow`
    tensorflow-plugins/tfwasm/device.toml           default sandbox policy
    tensorflow-plugins/tfwasm/reference_device.wasm default guest
    tfwasm/*.py                                     `python -m tfwasm sweep|coverage`

TensorFlow loads every `*.so` directly inside `tensorflow-plugins/` and
ignores subdirectories, so the policy and guest can sit in `tfwasm/` beside
the plugin, which looks for them there.

Usage (from anywhere; defaults are relative to the repository root):

    python3 host/packaging/build_wheel.py [--plugin PATH] [--policy PATH]
                                          [--guest PATH] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import os
import re
import sys
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "tfwasm"
TAG = "py3-none-linux_x86_64"
PLUGIN_DIR = "tensorflow-plugins"

# Zip entries get a fixed timestamp so rebuilding identical inputs gives an
# identical wheel (SOURCE_DATE_EPOCH overrides it, as reproducible builds expect).
DEFAULT_EPOCH = 315532800  # 1980-01-01, the earliest time a zip can store


def workspace_version() -> str:
    """`[workspace.package] version` from the top-level Cargo.toml."""
    text = (REPO / "Cargo.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[workspace\.package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    match = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not match:
        sys.exit("build_wheel: no [workspace.package] version in Cargo.toml")
    return match.group(1)


def metadata(version: str) -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        "Summary: A TensorFlow PluggableDevice whose device logic runs as sandboxed WebAssembly\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: Rust\n"
        "Description-Content-Type: text/markdown\n"
        "\n"
        "Adds a `/device:WASM:0` device to TensorFlow 2.21 (install `tensorflow` or\n"
        "`tensorflow-cpu` 2.21 yourself; the plugin speaks that release's C ABI).\n"
        "The device's decisions are made by a WebAssembly guest running in a\n"
        "wasmtime sandbox; compute runs natively in the plugin.\n"
        "\n"
        "Do not also set TF_PLUGGABLE_DEVICE_LIBRARY_PATH to this plugin:\n"
        "TensorFlow aborts when it loads the same plugin twice.\n"
    )


def wheel_file() -> str:
    return (
        "Wheel-Version: 1.0\n"
        "Generator: tfwasm build_wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {TAG}\n"
    )


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def zip_info(name: str, mode: int, epoch: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=time.gmtime(max(epoch, DEFAULT_EPOCH))[:6])
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = (0o100000 | mode) << 16  # regular file + permissions
    return info


def python_package() -> list[tuple[str, bytes, int]]:
    """The `tfwasm` Python package (the `python -m tfwasm` commands)."""
    source = REPO / "host" / "python" / NAME
    return [(f"{NAME}/{path.name}", path.read_bytes(), 0o644) for path in sorted(source.glob("*.py"))]


def build(plugin: Path, policy: Path, guest: Path, out_dir: Path) -> Path:
    for label, path in (("plugin", plugin), ("policy", policy), ("guest", guest)):
        if not path.is_file():
            sys.exit(f"build_wheel: {label} not found: {path} (build it first: host/scripts/setup.sh)")

    version = workspace_version()
    dist_info = f"{NAME}-{version}.dist-info"
    payload = [
        (f"{PLUGIN_DIR}/libtfwasm.so", plugin.read_bytes(), 0o755),
        (f"{PLUGIN_DIR}/{NAME}/device.toml", policy.read_bytes(), 0o644),
        (f"{PLUGIN_DIR}/{NAME}/reference_device.wasm", guest.read_bytes(), 0o644),
        *python_package(),
        (f"{dist_info}/METADATA", metadata(version).encode(), 0o644),
        (f"{dist_info}/WHEEL", wheel_file().encode(), 0o644),
    ]
    record_name = f"{dist_info}/RECORD"
    record = io.StringIO()
    for name, data, _ in payload:
        record.write(f"{name},{record_hash(data)},{len(data)}\n")
    record.write(f"{record_name},,\n")
    payload.append((record_name, record.getvalue().encode(), 0o644))

    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", DEFAULT_EPOCH))
    out_dir.mkdir(parents=True, exist_ok=True)
    wheel = out_dir / f"{NAME}-{version}-{TAG}.whl"
    partial = wheel.with_suffix(".whl.part")
    with zipfile.ZipFile(partial, "w") as archive:
        for name, data, mode in payload:
            archive.writestr(zip_info(name, mode, epoch), data)
    partial.replace(wheel)  # never leave a half-written wheel behind
    return wheel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plugin", type=Path, default=REPO / "target/release/libtfwasm.so",
                        help="the host cdylib (default: target/release/libtfwasm.so)")
    parser.add_argument("--policy", type=Path, default=REPO / "policies/device.toml",
                        help="the default policy (default: policies/device.toml)")
    parser.add_argument("--guest", type=Path,
                        default=REPO / "target/wasm32-wasip2/guest/tfwasm_reference_device.wasm",
                        help="the default guest (default: the reference device built with --profile guest)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "dist",
                        help="where to write the wheel (default: dist/)")
    args = parser.parse_args()
    print(build(args.plugin, args.policy, args.guest, args.out_dir))


if __name__ == "__main__":
    main()
