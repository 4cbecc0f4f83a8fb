"""Keras trains unchanged on the WASM device, to the same losses as on the CPU.

Each model is trained twice in fresh interpreters from the same seeds and
data: once with the plugin listing its device (placement left to
TensorFlow), once with a policy of ``[device] count = 0`` (the plugin loads,
no WASM device exists, everything runs on TensorFlow's CPU kernels). The
losses of 3 epochs must agree, and ``python -m tfwasm coverage`` must count
at least 95% of the train step's compute nodes on WASM.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tfwasm_support import REPO_ROOT, subprocess_env
from versions import keras_eager_xla_step

SCRIPT = REPO_ROOT / "tests" / "python" / "keras_models.py"
PACKAGE = REPO_ROOT / "host" / "python"
TIMEOUT = 900

# Float32 training on two kernel sets (oneDNN/Eigen vs ours) differs in
# summation order; Adam keeps those differences small over 3 epochs.
LOSS_RTOL = 2e-3
# Issue 3 asks for 95%. Measured: every compute node of the models runs on
# WASM (MLP 206/206, CNN 247/247, separable 302/302), integer bookkeeping included (the
# optimizer's int64 step counter, Keras' seed-generator state, int32 shape
# arithmetic). Nothing needs the CPU, so any op that falls back fails the
# test, whatever the share.
MIN_SHARE_ON_WASM = 0.95
# Ops a model exists to exercise: each must be placed on WASM in the train
# step (not merely absent from the fallbacks because it never ran).
MUST_RUN_ON_WASM = {
    "separable": {"DepthwiseConv2dNative", "DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter"},
    "transformer": {"Einsum", "Erfc", "UnsortedSegmentSum"},
}


def run(args: list[str], env: dict, tmp_path, label: str) -> tuple[dict, str]:
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
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{label}: no result line:\n{done.stdout[-4000:]}"
    return json.loads(lines[-1]), done.stdout


def env_with_package(policy_path=None) -> dict:
    env = subprocess_env(policy_path=policy_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE), env.get("PYTHONPATH")]))
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    return env


def train_on_both(args: list[str], label: str, tmp_path, cpu_policy) -> tuple[dict, dict, dict]:
    """Runs ``keras_models.py args`` on WASM under ``python -m tfwasm
    coverage`` and on the CPU only: (WASM result, CPU result, coverage)."""
    coverage_json = tmp_path / "coverage.json"
    wasm, _ = run(
        ["-m", "tfwasm", "coverage", "--json", str(coverage_json), "--", str(SCRIPT), *args],
        env_with_package(),
        tmp_path,
        f"{label} on WASM",
    )
    cpu, _ = run([str(SCRIPT), *args], env_with_package(cpu_policy), tmp_path, f"{label} on CPU")
    return wasm, cpu, json.loads(coverage_json.read_text())


def assert_same_training(wasm: dict, cpu: dict, rtol: float, label: str) -> None:
    """The weights lived on WASM, both runs' losses agree, and the model learned."""
    assert wasm["weights_device"].endswith("WASM:0")
    np.testing.assert_allclose(wasm["loss"], cpu["loss"], rtol=rtol, err_msg=f"{label}: losses per epoch")
    np.testing.assert_allclose(wasm["eval_loss"], cpu["eval_loss"], rtol=rtol)
    assert wasm["loss"][-1] < wasm["loss"][0], "the model did not learn"


def assert_all_on_wasm(coverage: dict, label: str, allowed: frozenset = frozenset(), min_nodes: int = 50) -> None:
    """The coverage report counted the train step (more than ``min_nodes``
    compute nodes) and found every compute node on WASM, no op but the
    ``allowed`` ones falling back to the CPU."""
    on, total = coverage["compute_nodes_on_device"], coverage["compute_nodes"]
    assert total > min_nodes, f"too few compute nodes counted ({total}): is the placement log parsed?"
    share = on / total
    fallbacks = set(coverage["fallbacks"])
    assert share >= MIN_SHARE_ON_WASM, f"{label}: {on}/{total} = {share:.1%} compute nodes on WASM; elsewhere: {sorted(fallbacks)}"
    assert fallbacks <= allowed, f"{label}: ops fell back to the CPU: {sorted(fallbacks - allowed)}"


def assert_ran_on_wasm(coverage: dict, ops: set, label: str) -> None:
    """Each of ``ops`` was placed on WASM at least once."""
    on_wasm = {node["op"] for node in coverage["nodes"] if node["device"].startswith("WASM")}
    assert ops <= on_wasm, f"{label}: never placed on WASM: {sorted(ops - on_wasm)}"


@pytest.mark.parametrize("model", ["mlp", "cnn", "separable", "transformer"])
def test_training_matches_cpu_and_runs_on_wasm(model, tmp_path, cpu_policy):
    wasm, cpu, coverage = train_on_both(["--model", model], model, tmp_path, cpu_policy)
    assert cpu["devices"] == ["CPU"], "the reference run must not see a WASM device"
    assert wasm["devices"] == ["CPU", "WASM"]
    assert len(wasm["loss"]) == 3
    assert_same_training(wasm, cpu, LOSS_RTOL, model)
    assert_all_on_wasm(coverage, model)
    assert_ran_on_wasm(coverage, MUST_RUN_ON_WASM.get(model, set()), model)


# Mixed precision: the layers compute in float16/bfloat16 on both devices,
# ours rounding each result once, TensorFlow's rounding partial results
# too, so the losses differ by more than in float32.
MIXED_LOSS_RTOL = {"mixed_float16": 5e-3, "mixed_bfloat16": 2e-2}


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_mixed_precision_training_matches_cpu_and_runs_on_wasm(model, policy, tmp_path, cpu_policy):
    """Keras' mixed precision policies: float16/bfloat16 layers, float32
    variables. Every compute node runs on WASM (the narrow layers'
    products, convolutions, pooling, attention, normalisation, activations
    and dropout draws, their gradients, the casts between the types, the
    loss scaling's finiteness checks), and trains to the CPU's losses."""
    label = f"{model} {policy}"
    wasm, cpu, coverage = train_on_both(["--model", model, "--dtype-policy", policy], label, tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, MIXED_LOSS_RTOL[policy], label)
    assert wasm["compute_dtype"] == cpu["compute_dtype"] == policy.removeprefix("mixed_")
    assert_all_on_wasm(coverage, label)
    assert_ran_on_wasm(coverage, {"Cast", "MatMul" if model == "mlp" else "Conv2D" if model == "cnn" else "Einsum"}, label)


@keras_eager_xla_step
def test_mixed_precision_sequence_model_with_keras_defaults(tmp_path, cpu_policy):
    """Embedding → LSTM → Conv1D under `mixed_float16` and Keras' defaults
    (`jit_compile="auto"`): the jit step runs without XLA, its loops lowered,
    and trains to the CPU's losses. What stays on the CPU is only what no
    C-API kernel can do (the gradient loop's variant AddN, a variant
    ZerosLike) and the orthogonal initializer's Qr; the LSTM's gate splits
    run on WASM in float16."""
    label = "sequence mixed_float16 jit=default"
    args = ["--model", "sequence", "--dtype-policy", "mixed_float16", "--jit", "default", "--epochs", "2"]
    wasm, cpu, coverage = train_on_both(args, label, tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, MIXED_LOSS_RTOL["mixed_float16"], label)
    assert wasm["compute_dtype"] == "float16"
    assert_all_on_wasm(coverage, label, allowed=frozenset({"AddN", "ZerosLike", "Qr", "MatrixDiagPartV3"}), min_nodes=200)
    assert_ran_on_wasm(coverage, {"Split", "MatMul", "Conv2D", "TensorListGetItem", "AddN"}, label)


def test_recurrent_training_matches_cpu(tmp_path, cpu_policy):
    """A SimpleRNN's while loop copies its state within the device on the
    compute stream; kernels that read before the copy ran made the losses
    drift from the CPU's in some runs. The loop's TensorList ops run on
    WASM; the CPU keeps the orthogonal initializer (Qr, MatrixDiagPartV3)
    and a variant ZerosLike, which no C-API kernel can implement."""
    wasm, cpu, coverage = train_on_both(["--model", "rnn"], "rnn", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "rnn")
    assert_all_on_wasm(coverage, "rnn", allowed=frozenset({"Qr", "MatrixDiagPartV3", "ZerosLike"}))
    assert_ran_on_wasm(coverage, {"TensorListGetItem", "TensorListSetItem", "TensorListStack", "MatMul", "Tanh", "TanhGrad"}, "rnn")


def test_dilated_convolutions_train_on_wasm(tmp_path, cpu_policy):
    """Conv2D and causal Conv1D with `dilation_rate` > 1, which TensorFlow
    runs as plain convolutions between SpaceToBatchND and BatchToSpaceND
    (each the other's gradient): the losses match the CPU's and every
    compute node runs on WASM, the two reshuffles included."""
    wasm, cpu, coverage = train_on_both(["--model", "dilated"], "dilated", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "dilated")
    assert_all_on_wasm(coverage, "dilated")
    assert_ran_on_wasm(coverage, {"SpaceToBatchND", "BatchToSpaceND", "Conv2D", "Conv2DBackpropFilter"}, "dilated")


def test_bilinear_upsampling_trains_on_wasm(tmp_path, cpu_policy):
    """UpSampling2D(interpolation="bilinear") and Resizing, as a
    segmentation decoder upsamples: ResizeBilinear and its gradient run on
    WASM, and the losses match the CPU's. Its top-3 accuracy metric ranks
    on WASM too (InTopKV2)."""
    wasm, cpu, coverage = train_on_both(["--model", "upsample"], "upsample", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "upsample")
    assert_all_on_wasm(coverage, "upsample")
    assert_ran_on_wasm(coverage, {"ResizeBilinear", "ResizeBilinearGrad", "InTopKV2"}, "upsample")


def test_volume_convolutions_train_on_wasm(tmp_path, cpu_policy):
    """Conv3D, Conv3DTranspose, MaxPooling3D and AveragePooling3D, as
    volumetric models use them: the 3-D convolutions, their backprops and
    the 3-D pools' gradients run on WASM, and the losses match the CPU's."""
    wasm, cpu, coverage = train_on_both(["--model", "volume"], "volume", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "volume")
    assert_all_on_wasm(coverage, "volume")
    volume_ops = {
        "Conv3D", "Conv3DBackpropInputV2", "Conv3DBackpropFilterV2",
        "MaxPool3D", "MaxPool3DGrad", "AvgPool3D", "AvgPool3DGrad",
    }
    assert_ran_on_wasm(coverage, volume_ops, "volume")


def test_augmentation_layers_train_on_wasm(tmp_path, cpu_policy):
    """RandomFlip, RandomRotation, RandomZoom, RandomTranslation and a
    nearest-neighbour Resizing in the model: the projective transforms, the
    sines and cosines of their matrices and the resize run on WASM, drawing
    the same random transforms as the CPU (Philox, bit-identical), and the
    losses match the CPU's."""
    wasm, cpu, coverage = train_on_both(["--model", "augment"], "augment", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "augment")
    assert_all_on_wasm(coverage, "augment")
    augment_ops = {"ImageProjectiveTransformV3", "Sin", "Cos", "ResizeNearestNeighbor", "StatelessRandomUniformV2"}
    assert_ran_on_wasm(coverage, augment_ops, "augment")


def test_masked_recurrence_moves_its_mask_on_wasm(tmp_path, cpu_policy):
    """Embedding(mask_zero=True) → Bidirectional(GRU): the bool mask is
    transposed, reversed (the backward direction), tiled and concatenated
    on WASM. What stays on the CPU: the mask's own TensorList (TensorFlow
    has no device kernels for bool lists, and no C-API kernel can make a
    list), the gradient loop's variant AddN and ZerosLike, and the
    orthogonal initializer."""
    wasm, cpu, coverage = train_on_both(["--model", "masked"], "masked", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "masked")
    cpu_only = {"AddN", "ZerosLike", "Qr", "MatrixDiagPartV3", "TensorListFromTensor", "TensorListGetItem", "TensorListPopBack"}
    assert_all_on_wasm(coverage, "masked", allowed=frozenset(cpu_only), min_nodes=200)
    assert_ran_on_wasm(coverage, {"Transpose", "ReverseV2", "Tile", "ConcatV2", "SelectV2", "MatMul"}, "masked")


def test_embedding_training_matches_cpu_and_keeps_its_ops_on_wasm(tmp_path, cpu_policy):
    """Embedding → GlobalAveragePooling1D → Dense(1, sigmoid) with binary
    cross-entropy and Adam: the losses match the CPU's, and the ops this
    model adds to the others' stay on WASM: Adam densifying the Embedding's
    sparse gradient (UnsortedSegmentSum), the binary cross-entropy from
    logits and its gradient (Select), `ops.take` wrapping negative ids
    (int64 Less and SelectV2), the AUC metric's running sums (Cumsum)."""
    wasm, cpu, coverage = train_on_both(["--model", "embedding"], "embedding", tmp_path, cpu_policy)
    assert_same_training(wasm, cpu, LOSS_RTOL, "embedding")

    assert_ran_on_wasm(coverage, {"UnsortedSegmentSum", "Select", "SelectV2", "Less", "Cumsum"}, "embedding")
    assert_all_on_wasm(coverage, "embedding")
