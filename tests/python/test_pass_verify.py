"""``tfwasm pass verify``: a pass's answers run in TensorFlow against the graphs it was given.

Both reference passes must verify on every golden graph (the graphs they
rewrite run one step in TensorFlow before and after, with the same seeded
feeds and variables, and every fetch and variable agrees). Each semantic
mode of the hostile pass (an answer the host's structural checks accept
but that computes something else) must fail verify, and the output must
name the node the pass changed. A policy whose ``[[pass]]`` says
``verified = REPORT`` loads only the file that report verified.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfwasm_support import GUEST_BUILD_DIR, REPO_ROOT, make_policy, reference_guest_path, toml_dumps

CLI = REPO_ROOT / "target" / "release" / "tfwasm"
FUSE_PASS = GUEST_BUILD_DIR / "tfwasm_fuse_pass.wasm"
CONTRACTION_PASS = GUEST_BUILD_DIR / "tfwasm_contraction_pass.wasm"
HOSTILE_PASS = GUEST_BUILD_DIR / "tfwasm_hostile_pass.wasm"
KERAS_STEP = REPO_ROOT / "tests" / "fixtures" / "graphs" / "keras_mlp_step.pb"
GOLDEN = sorted(p.stem for p in (REPO_ROOT / "tests" / "fixtures" / "graphs").glob("*.pb"))
TIMEOUT = 600


@pytest.fixture(scope="module", autouse=True)
def built():
    missing = [p.relative_to(REPO_ROOT) for p in (CLI, FUSE_PASS, CONTRACTION_PASS, HOSTILE_PASS) if not p.is_file()]
    if missing:
        pytest.fail(
            f"not built: {', '.join(map(str, missing))}; run host/scripts/setup.sh (or cargo build --release "
            "-p tfwasm-cli and cargo build --target wasm32-wasip2 --profile guest for the passes)",
            pytrace=False,
        )


def verify(*args, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ, TFWASM_CLI=str(CLI), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT / "host" / "python"), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "tfwasm", "pass", "verify", *map(str, args)],
        env=env, cwd=cwd, capture_output=True, text=True, errors="replace", timeout=TIMEOUT,
    )


@pytest.fixture(scope="module")
def reference_reports(tmp_path_factory):
    """Each reference pass verified on the golden graphs: (output, report)."""
    directory = tmp_path_factory.mktemp("verify")
    reports = {}
    for name, path in (("fuse", FUSE_PASS), ("contraction", CONTRACTION_PASS)):
        report = directory / f"{name}.json"
        done = verify(path, "--report", report, cwd=directory)
        reports[name] = (done, json.loads(report.read_text()) if report.is_file() else None, report)
    return reports


@pytest.mark.parametrize("name", ["fuse", "contraction"])
def test_reference_pass_verifies_on_every_golden_graph(reference_reports, name):
    done, report, _ = reference_reports[name]
    print(done.stdout)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr[-4000:]}"
    assert report["passed"] and report["sha256"] and report["tensorflow"]
    statuses = {g["graph"]: g["status"] for g in report["graphs"]}
    assert sorted(statuses) == GOLDEN, "every golden graph, none left out"
    assert all(status in ("passed", "unchanged", "skipped") for status in statuses.values()), statuses
    # The pass rewrites Keras steps, and verify ran them: not a vacuous pass.
    ran = [g for g in report["graphs"] if g["status"] == "passed"]
    assert ran and all(g["compared"] > 0 for g in ran), statuses
    for graph in report["graphs"]:
        assert f"{graph['graph']}" in done.stdout and f"{graph['seconds']:6.2f} s" in done.stdout


# Each semantic mode and a graph it spoils (the Keras MLP step with Adam).
SEMANTIC = ["add-to-sub", "edit-const", "neuter-assign"]


@pytest.mark.parametrize("mode", SEMANTIC)
def test_a_semantic_edit_fails_verify_naming_the_node(tmp_path, mode):
    # The node the pass says it changed ...
    ran = subprocess.run(
        [str(CLI), "pass", "run", str(HOSTILE_PASS), str(KERAS_STEP), "--json", "--config", f"mode={mode}"],
        capture_output=True, text=True,
    )
    run = json.loads(ran.stdout)
    assert run["accepted"] and run["changed"], f"the host's checks accept {mode}: {ran.stdout}{ran.stderr}"
    node = run["rewrites"][0][0]
    # ... is the node verify names, among what differs.
    report = tmp_path / "report.json"
    done = verify(HOSTILE_PASS, KERAS_STEP, "--config", f"mode={mode}", "--report", report, cwd=tmp_path)
    print(done.stdout)
    assert done.returncode == 1, f"{done.stdout}\n{done.stderr[-4000:]}"
    (graph,) = json.loads(report.read_text())["graphs"]
    assert graph["status"] == "failed" and graph["differences"], graph
    assert f"node {node!r}" in graph["detail"], graph["detail"]
    assert f"changed by the pass: node {node!r}" in done.stdout
    assert "FAIL" in done.stdout


def test_the_policy_loads_only_a_verified_digest(run_tf, reference_reports, tmp_path):
    """``verified = REPORT``: the fuse pass, which REPORT verified, loads;
    the contraction pass under the same report is refused with a message
    naming it, and so is a swap to it."""
    _, _, report = reference_reports["fuse"]
    policy = make_policy(reference_guest_path())
    policy["pass"] = [
        {"name": "fuse-elementwise", "path": str(FUSE_PASS), "verified": str(report)},
        {"name": "fuse-contraction", "path": str(CONTRACTION_PASS), "verified": str(report)},
    ]
    done = run_tf(
        f"""
        import json
        import tfwasm.passes
        names = [p["slot"] for p in tfwasm.passes.list()]
        try:
            tfwasm.passes.swap("fuse-elementwise", {str(CONTRACTION_PASS)!r})
            swap = "swapped"
        except tfwasm.passes.PassError as error:
            swap = str(error)
        result("cases", json.dumps({{"names": names, "swap": swap}}))
        """,
        policy=policy,
        env={"TFWASM_PASSES": None},
    )
    assert done.returncode == 0, done.describe()
    cases = json.loads(done.results()["cases"])
    assert cases["names"] == ["fuse-elementwise"], done.describe()
    refusal = "is not the one its verify report"
    assert "fuse-contraction" in done.stderr and refusal in done.stderr, done.describe()
    assert refusal in cases["swap"] and "tfwasm_contraction_pass.wasm" in cases["swap"], cases["swap"]
