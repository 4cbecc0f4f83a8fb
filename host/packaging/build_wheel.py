#!/usr/bin/env python3
"""Build the tfwasm wheel from already-built artifacts (standard library only).

The wheel installs into site-packages:

    tensorflow-plugins/libtfwasm.so                 loaded by `import tensorflow`
    tensorflow-plugins/tfwasm/device.toml           default sandbox policy
    tensorflow-plugins/tfwasm/reference_device.wasm default guest
    tensorflow-plugins/tfwasm/*_pass.wasm           the reference optimizer passes the policy runs
    tensorflow-plugins/tfwasm/reference_profiler.wasm the profiler guest the policy names
    tfwasm/*.py                                     `python -m tfwasm sweep|coverage`
    (the environment's bin/)tfwasm                  the `tfwasm` command: check, info,
                                                    precompile, policy check
    tfwasm-<version>.dist-info/licenses/THIRD_PARTY_LICENSES.txt
                                                    what the plugin and guest are built from,
                                                    with their license texts

TensorFlow loads every `*.so` directly inside `tensorflow-plugins/` and
ignores subdirectories, so the policy and guest can sit in `tfwasm/` beside
the plugin, which looks for them there.

Usage (from anywhere; defaults are relative to the repository root):

    python3 host/packaging/build_wheel.py [--plugin PATH] [--policy PATH]
                                          [--guest PATH] [--cli PATH] [--out-dir DIR]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import os
import re
import subprocess
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


def supported_tensorflow() -> tuple[tuple[int, int], tuple[int, int]]:
    """The first and last (major, minor) TensorFlow release the plugin
    serves: `SUPPORTED_TENSORFLOW` in host/plugin/src/config.rs, which the plugin
    checks when TensorFlow loads it."""
    text = (REPO / "host" / "plugin" / "src" / "config.rs").read_text(encoding="utf-8")
    match = re.search(r"SUPPORTED_TENSORFLOW[^=]*=\s*\((\d+),\s*(\d+)\)\.\.=\((\d+),\s*(\d+)\);", text)
    if not match:
        sys.exit("build_wheel: no SUPPORTED_TENSORFLOW range in host/plugin/src/config.rs")
    low_major, low_minor, high_major, high_minor = map(int, match.groups())
    return (low_major, low_minor), (high_major, high_minor)


def workspace_version() -> str:
    """`[workspace.package] version` from the top-level Cargo.toml."""
    text = (REPO / "Cargo.toml").read_text(encoding="utf-8")
    section = re.search(r"^\[workspace\.package\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    match = section and re.search(r'^version\s*=\s*"([^"]+)"', section.group(1), re.M)
    if not match:
        sys.exit("build_wheel: no [workspace.package] version in Cargo.toml")
    return match.group(1)


def metadata(version: str) -> str:
    (low_major, low_minor), (high_major, high_minor) = supported_tensorflow()
    low, high = f"{low_major}.{low_minor}", f"{high_major}.{high_minor}"
    # Releases below the next minor after the last supported one.
    below = f"{high_major}.{high_minor + 1}"
    # No plain Requires-Dist on TensorFlow: it ships under several names
    # (tensorflow, tensorflow-cpu, tf-nightly, tf-nightly-cpu), and requiring
    # one would make pip install it beside the user's. The extras state the
    # range for those who want pip to pick a TensorFlow too.
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {version}\n"
        f"Summary: A TensorFlow {low}-{high} PluggableDevice whose device logic runs as sandboxed WebAssembly\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.9\n"
        "Classifier: Operating System :: POSIX :: Linux\n"
        "Classifier: Programming Language :: Rust\n"
        "Provides-Extra: tensorflow\n"
        f'Requires-Dist: tensorflow<{below},>={low}; extra == "tensorflow"\n'
        "Provides-Extra: tensorflow-cpu\n"
        f'Requires-Dist: tensorflow-cpu<{below},>={low}; extra == "tensorflow-cpu"\n'
        "Description-Content-Type: text/markdown\n"
        "\n"
        f"Adds a `/device:WASM:0` device to TensorFlow {low} to {high} (`tensorflow`,\n"
        f"`tensorflow-cpu`, or `tf-nightly`/`tf-nightly-cpu` of {high} and before;\n"
        f"`pip install tfwasm[tensorflow-cpu]` picks one for you). Loaded into a\n"
        "TensorFlow outside that range, the plugin registers no device and logs why;\n"
        "`import tensorflow` and the CPU device are unaffected.\n"
        "The device's decisions are made by a WebAssembly guest running in a\n"
        "wasmtime sandbox; compute runs natively in the plugin.\n"
        "\n"
        "Do not also set TF_PLUGGABLE_DEVICE_LIBRARY_PATH to this plugin: the\n"
        "second copy registers nothing and logs an error.\n"
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


# Which binary of the wheel each workspace package ends up in, and the
# target it is built for (the packages it links are those `cargo metadata`
# resolves for that target, through normal dependencies).
SHIPPED = (
    ("tfwasm", "x86_64-unknown-linux-gnu", f"{PLUGIN_DIR}/libtfwasm.so"),
    ("tfwasm-reference-device", "wasm32-wasip2", f"{PLUGIN_DIR}/{NAME}/reference_device.wasm"),
    ("tfwasm-cli", "x86_64-unknown-linux-gnu", "bin/tfwasm"),
)

# The reference optimizer passes: (package, the component cargo builds with
# --profile guest, its name beside the default policy, which lists them).
PASSES = (
    ("tfwasm-fuse-pass", "tfwasm_fuse_pass.wasm", "fuse_pass.wasm"),
    ("tfwasm-contraction-pass", "tfwasm_contraction_pass.wasm", "contraction_pass.wasm"),
)
# The reference profiler guest, which the default policy names to shape the trace.
PROFILERS = (("tfwasm-reference-profiler", "tfwasm_reference_profiler.wasm", "reference_profiler.wasm"),)
SHIPPED += tuple((package, "wasm32-wasip2", f"{PLUGIN_DIR}/{NAME}/{name}") for package, _, name in PASSES + PROFILERS)
GUEST_DIR = REPO / "target/wasm32-wasip2/guest"

# Native code a crate builds from sources it carries, under a license of its
# own that the crate's declared license does not name.
BUNDLED = {
    "blis-src": ("BLIS, the C library it builds and links statically (BSD-3-Clause)", "upstream/LICENSE"),
}

LICENSE_FILE_PREFIXES = ("LICENSE", "LICENCE", "COPYING", "COPYRIGHT", "NOTICE")


def linked_packages(root: str, platform: str) -> list[dict]:
    """The registry packages `root` is built from on `platform`: its normal
    dependencies, transitively, proc-macros and theirs included (over-listing
    is harmless in a notices file); build- and dev-dependencies are left out."""
    command = ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", platform]
    try:
        result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", "") or error
        sys.exit(f"build_wheel: `{' '.join(command)}` failed, so the license notices cannot be listed: {detail}")
    meta = json.loads(result.stdout)
    packages = {package["id"]: package for package in meta["packages"]}
    nodes = {node["id"]: node for node in meta["resolve"]["nodes"]}
    start = [key for key, package in packages.items() if package["name"] == root and package["source"] is None]
    if len(start) != 1:
        sys.exit(f"build_wheel: workspace package {root} not found by cargo metadata")
    seen, stack = set(), list(start)
    while stack:
        package_id = stack.pop()
        if package_id in seen:
            continue
        seen.add(package_id)
        for dep in nodes[package_id]["deps"]:
            if any(kind["kind"] is None for kind in dep["dep_kinds"]):
                stack.append(dep["pkg"])
    # Workspace packages (no source) are this project's own.
    return [packages[package_id] for package_id in seen if packages[package_id]["source"] is not None]


def license_files(package: dict) -> list[tuple[str, str]]:
    """`(what, text)` for each license file the package carries."""
    root = Path(package["manifest_path"]).parent
    names = sorted(p.name for p in root.iterdir() if p.is_file() and p.name.upper().startswith(LICENSE_FILE_PREFIXES))
    declared = package.get("license_file")
    if declared and (root / declared).is_file() and declared not in names:
        names.append(declared)
    files = [(name, (root / name).read_text(encoding="utf-8", errors="replace")) for name in names]
    if package["name"] in BUNDLED:
        what, relative = BUNDLED[package["name"]]
        path = root / relative
        if not path.is_file():
            sys.exit(f"build_wheel: {package['name']} {package['version']} has no {relative} ({what})")
        files.append((f"{relative}: {what}", path.read_text(encoding="utf-8", errors="replace")))
    return files


def third_party_notices() -> bytes:
    """A text listing every third-party package in the wheel's binaries,
    its declared license, and the license texts the packages carry, each
    text printed once with the packages it came with."""
    shipped_in: dict[tuple[str, str], list[str]] = {}
    packages: dict[tuple[str, str], dict] = {}
    for root, platform, binary in SHIPPED:
        for package in linked_packages(root, platform):
            key = (package["name"], package["version"])
            packages[key] = package
            shipped_in.setdefault(key, []).append(binary.rsplit("/", 1)[-1])

    texts: dict[str, int] = {}  # text -> its number
    bodies: list[tuple[list[str], str]] = []  # per number: (sources, text)
    listing = []
    for key in sorted(packages):
        package = packages[key]
        numbers = []
        for what, text in license_files(package):
            number = texts.get(text)
            if number is None:
                number = texts[text] = len(bodies) + 1
                bodies.append(([], text))
            bodies[number - 1][0].append(f"{key[0]} {key[1]}: {what}")
            numbers.append(number)
        refs = ", ".join(f"[{n}]" for n in numbers) if numbers else "no license file in its package"
        extra = f"; also {BUNDLED[key[0]][0]}" if key[0] in BUNDLED else ""
        listing.append(
            f"{key[0]} {key[1]}\n    license: {package.get('license') or 'not declared'}{extra}\n"
            f"    in: {', '.join(shipped_in[key])}\n    texts: {refs}\n"
        )

    out = io.StringIO()
    out.write(
        "Third-party software in the tfwasm wheel\n"
        "========================================\n\n"
        "libtfwasm.so, reference_device.wasm and the tfwasm command are built from\n"
        "tfwasm's own crates "
        "and the packages listed below (and the Rust standard library, MIT OR\n"
        "Apache-2.0): every package Cargo resolves for the binary's target, which\n"
        "may name a few that the final link leaves out. Each package is listed with\n"
        "its version, its declared license (an SPDX expression) and the binaries it\n"
        "is in. The license texts the packages carry follow the list, each printed\n"
        "once and numbered. A package that carries no license file is still under\n"
        "the license it declares.\n\n"
        f"Packages ({len(packages)})\n"
        "--------\n\n"
    )
    out.write("\n".join(listing))
    out.write("\nLicense texts\n-------------\n")
    for number, (sources, text) in enumerate(bodies, 1):
        out.write(f"\n[{number}] from {'; '.join(sources)}\n\n{text.rstrip()}\n")
    return out.getvalue().encode()


def build(plugin: Path, policy: Path, guest: Path, cli: Path, out_dir: Path) -> Path:
    passes = [(f"pass {package}", GUEST_DIR / built, name) for package, built, name in PASSES]
    passes += [(f"profiler {package}", GUEST_DIR / built, name) for package, built, name in PROFILERS]
    for label, path in (("plugin", plugin), ("policy", policy), ("guest", guest), ("command", cli),
                        *((label, path) for label, path, _ in passes)):
        if not path.is_file():
            sys.exit(f"build_wheel: {label} not found: {path} (build it first: host/scripts/setup.sh)")

    version = workspace_version()
    dist_info = f"{NAME}-{version}.dist-info"
    payload = [
        (f"{PLUGIN_DIR}/libtfwasm.so", plugin.read_bytes(), 0o755),
        (f"{PLUGIN_DIR}/{NAME}/device.toml", policy.read_bytes(), 0o644),
        (f"{PLUGIN_DIR}/{NAME}/reference_device.wasm", guest.read_bytes(), 0o644),
        *((f"{PLUGIN_DIR}/{NAME}/{name}", path.read_bytes(), 0o644) for _, path, name in passes),
        # pip installs a wheel's `.data/scripts/` into the environment's bin/.
        (f"{NAME}-{version}.data/scripts/tfwasm", cli.read_bytes(), 0o755),
        *python_package(),
        (f"{dist_info}/METADATA", metadata(version).encode(), 0o644),
        (f"{dist_info}/licenses/THIRD_PARTY_LICENSES.txt", third_party_notices(), 0o644),
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
    parser.add_argument("--cli", type=Path, default=REPO / "target/release/tfwasm",
                        help="the tfwasm command (default: target/release/tfwasm)")
    parser.add_argument("--out-dir", type=Path, default=REPO / "dist",
                        help="where to write the wheel (default: dist/)")
    args = parser.parse_args()
    print(build(args.plugin, args.policy, args.guest, args.cli, args.out_dir))


if __name__ == "__main__":
    main()
