"""``tfwasm pass verify``: differential verification of a graph-optimizer pass.

The host's checks of a pass's answer (``tfwasm pass check``) prove that the
answer is a graph TensorFlow can run; they cannot prove that it computes
what the graph it was given computes. This does, on the graphs it is given:
each graph (the golden graphs ``pass check`` runs, or GraphDefs a user
captured) goes through the pass with the ``tfwasm`` command (``tfwasm pass
run``: the plugin's pipeline and checks, without TensorFlow); then the
graph before and the graph after run one step each in TensorFlow, with the
same seeded feeds and the same seeded variable values, and every fetch and
every variable's new value must agree within tolerances (float: rtol/atol
as the kernel sweep's matmul and convolution, ``|after - before| <= atol +
rtol·|before|``; integers and booleans exactly; NaN where both have it).

Running: every node goes on TensorFlow's CPU device; a node whose op has no
CPU kernel (``_TfwasmFusedElementwise``, which the reference fusion pass
makes) goes on the WASM device, with the plugin's passes off
(``TFWASM_PASSES=0``), so nothing but the pass under test rewrites either
graph. A function body's ``_Arg`` becomes a fed placeholder, or for a
resource a variable; its ``_Retval`` an ``Identity`` that is fetched; every
node nothing reads (the step's updates) is run too.

When something differs, verify names the nodes the pass changed upstream
of it, and which of those already compute a different value.

    python -m tfwasm pass verify PASS.wasm [GRAPH.pb ...] [--report R.json]
        [--config KEY=VALUE] [--seed 0] [--rtol 1e-4] [--atol 1e-4] [--json]

Exit status 0 when every graph agrees (or the pass left it unchanged), 1
when one differs or the host refused the pass's answer, 2 on a usage or
environment error (no TensorFlow, no ``tfwasm`` command).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

#: |after - before| <= atol + rtol·|before|: the sweep's tolerance for
#: products (tfwasm.sweep.PRODUCT), the loosest of its float classes, since a
#: pass may legitimately reorder a sum (a fused MatMul and BiasAdd).
RTOL, ATOL = 1e-4, 1e-4

#: Unknown dimensions of a feed or a variable take this size.
UNKNOWN_DIM = 2

#: Suspects listed per difference.
MAX_SUSPECTS = 8


class NotRunnable(Exception):
    """The graph cannot run on its own (e.g. it calls a function whose body
    it does not carry): verify skips it and says why."""


@dataclass
class Difference:
    """One fetch or variable whose value differs after the pass."""

    what: str  # "fetch NAME" / "variable NAME"
    detail: str


@dataclass
class Suspect:
    node: str
    change: str
    #: True/False when its value was compared, None when it has none to compare.
    differs: bool | None = None


@dataclass
class GraphResult:
    graph: str
    #: passed | failed | unchanged | skipped | refused
    status: str
    detail: str = ""
    seconds: float = 0.0
    nodes_before: int = 0
    nodes_after: int = 0
    compared: int = 0
    differences: list[Difference] = field(default_factory=list)
    suspects: list[Suspect] = field(default_factory=list)


# --------------------------------------------------------------------------
# The tfwasm command


def find_cli() -> Path:
    """``TFWASM_CLI``; the ``tfwasm`` beside this Python (where the wheel
    installs it); a checkout's ``target/release/tfwasm``; ``tfwasm`` on PATH."""
    if os.environ.get("TFWASM_CLI"):
        return Path(os.environ["TFWASM_CLI"])
    candidates = [Path(sys.executable).parent / "tfwasm", Path(__file__).resolve().parents[3] / "target/release/tfwasm"]
    on_path = shutil.which("tfwasm")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    raise SystemExit(
        "tfwasm pass verify: no tfwasm command (looked beside this Python, in target/release and on PATH); "
        "set TFWASM_CLI or build it: cargo build --release -p tfwasm-cli"
    )


def golden_graphs(cli: Path, into: Path) -> list[Path]:
    """The golden graphs ``pass check`` runs, written by the command that embeds them."""
    out = subprocess.run([str(cli), "graph", "golden", str(into)], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"tfwasm pass verify: {cli} graph golden failed: {out.stderr.strip()}")
    return [Path(line) for line in out.stdout.split()]


def run_pass(cli: Path, pass_path: Path, graph: Path, answer: Path, preserve: list[str], options: list[str]) -> dict:
    command = [str(cli), "pass", "run", str(pass_path), str(graph), "-o", str(answer), "--json"]
    if preserve:
        command += ["--preserve", ",".join(preserve)]
    for option in options:
        command += ["--config", option]
    out = subprocess.run(command, capture_output=True, text=True)
    if out.returncode not in (0, 1) or not out.stdout.strip():
        raise RuntimeError(f"tfwasm pass run failed: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout)


# --------------------------------------------------------------------------
# Making a graph TensorFlow hands the optimizer runnable in a session


@dataclass
class Variable:
    key: str  # what a report calls it
    node: str  # the node whose output is its handle
    dtype: int
    shape: list[int]


@dataclass
class Runnable:
    graph: object  # GraphDef
    feeds: dict  # placeholder node -> (key, dtype enum, shape)
    variables: list[Variable]
    fetches: dict  # label -> tensor name
    targets: list[str]
    on_wasm: int = 0


def _shape_of(shape_proto) -> list[int] | None:
    if shape_proto.unknown_rank:
        return None
    return [d.size for d in shape_proto.dim]


def _concrete(shape: list[int] | None) -> list[int]:
    return [UNKNOWN_DIM if d < 0 else d for d in (shape or [])]


def _source(name: str) -> str:
    name = name.lstrip("^")
    base, _, port = name.rpartition(":")
    return base if base and port.isdigit() else name


class _Kernels:
    """Which device each op can run on here: CPU when TensorFlow has a CPU kernel."""

    def __init__(self, tf, library_functions: set[str]):
        from tensorflow.python.framework import kernels

        self._kernels = kernels
        self._functions = library_functions
        self._cache: dict[str, str] = {}
        self.wasm = bool(tf.config.list_physical_devices("WASM"))

    def device(self, op: str) -> str:
        if op in self._functions:
            return "/device:CPU:0"
        if op not in self._cache:
            devices = {k.device_type for k in self._kernels.get_registered_kernels_for_op(op).kernel}
            if "CPU" in devices or "DEFAULT" in devices or not devices:
                self._cache[op] = "/device:CPU:0"
            elif self.wasm and "WASM" in devices:
                self._cache[op] = "/device:WASM:0"
            else:
                raise NotRunnable(f"op {op} has no CPU kernel ({', '.join(sorted(devices))} only)")
        return self._cache[op]


def _called_functions(node) -> list[str]:
    called = []
    for value in node.attr.values():
        if value.HasField("func"):
            called.append(value.func.name)
        elif value.HasField("list"):
            called.extend(f.name for f in value.list.func)
    return called


def caller_hints(body, caller) -> dict[str, tuple[int, list[int] | None]]:
    """The variables a function body's resource arguments hold, from the graph
    that calls it: TensorFlow hands a function body without them, but its
    caller's arguments carry ``_handle_dtypes``/``_handle_shapes``, and a
    Keras step passes its variables on in order. Used only when both lists
    have the same length and every dtype matches the body's readers."""
    from tensorflow.core.framework import types_pb2

    def resources(graph):
        args = [n for n in graph.node if n.op in ("_Arg", "_DeviceArg") and n.attr["T"].type == types_pb2.DT_RESOURCE]
        return sorted(args, key=lambda n: n.attr["index"].i)

    typed = [n for n in resources(caller) if "_handle_dtypes" in n.attr and n.attr["_handle_dtypes"].list.type]
    args = resources(body)
    if len(typed) != len(args):
        return {}
    readers: dict[str, list] = {}
    for node in body.node:
        for name in node.input:
            readers.setdefault(_source(name), []).append(node)
    hints = {}
    for arg, given in zip(args, typed):
        dtype = given.attr["_handle_dtypes"].list.type[0]
        shapes = given.attr["_handle_shapes"].list.shape if "_handle_shapes" in given.attr else []
        if any("dtype" in r.attr and r.attr["dtype"].type != dtype for r in readers.get(arg.name, [])):
            return {}
        hints[arg.name] = (dtype, _shape_of(shapes[0]) if shapes else None)
    return hints


def prepare(graph, tf, hints: dict | None = None) -> Runnable:
    """A copy of ``graph`` that runs one step in a session: arguments fed or
    made variables, results fetched, every node placed where it can run.
    ``hints``: resource argument -> (dtype, shape) where the graph lacks them."""
    from tensorflow.core.framework import graph_pb2, types_pb2
    from tensorflow.python.framework import op_def_registry

    graph = graph_pb2.GraphDef.FromString(graph.SerializeToString())
    functions = {f.signature.name for f in graph.library.function}
    kernels = _Kernels(tf, functions)
    by_name = {n.name: n for n in graph.node}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(_source(name), []).append(node)
    for node in graph.node:
        if node.op not in functions and op_def_registry.get(node.op) is None:
            raise NotRunnable(f"node {node.name}: op {node.op} is not one this TensorFlow knows")
        missing = [f for f in _called_functions(node) if f not in functions]
        if missing:
            raise NotRunnable(
                f"node {node.name} ({node.op}) calls {missing[0]}, whose body this GraphDef does not carry "
                "(captured without its function library)"
            )

    feeds, variables, fetches = {}, [], {}
    for node in sorted(graph.node, key=lambda n: (n.op, n.attr["index"].i if "index" in n.attr else 0)):
        if node.op in ("_Arg", "_DeviceArg"):
            dtype, index = node.attr["T"].type, node.attr["index"].i
            shapes = node.attr["_output_shapes"].list.shape if "_output_shapes" in node.attr else []
            if dtype == types_pb2.DT_RESOURCE:
                var_dtype, var_shape = _resource_type(node, readers.get(node.name, []), (hints or {}).get(node.name))
                key = f"arg {index} {node.name}"
                _make_var_handle(node, var_dtype, var_shape)
                variables.append(Variable(key, node.name, var_dtype, _concrete(var_shape)))
            else:
                shape = _shape_of(shapes[0]) if shapes else None
                key = f"arg {index} {node.name}"
                node.op = "Placeholder"
                attrs = {"dtype": node.attr["T"]}
                node.ClearField("attr")
                node.attr["dtype"].CopyFrom(attrs["dtype"])
                if shape is not None:
                    node.attr["shape"].shape.CopyFrom(shapes[0])
                feeds[node.name] = (key, dtype, _concrete(shape))
        elif node.op == "VarHandleOp":
            shape = _shape_of(node.attr["shape"].shape)
            variables.append(Variable(f"variable {node.name}", node.name, node.attr["dtype"].type, _concrete(shape)))
        elif node.op in ("_Retval", "_DeviceRetval"):
            fetches[f"retval {node.attr['index'].i} {node.name}"] = f"{node.name}:0"
            node.op = "Identity"
            t = node.attr["T"]
            node.ClearField("attr")
            node.attr["T"].CopyFrom(t)
        elif node.op == "Placeholder" and node.name not in feeds:
            shape = _shape_of(node.attr["shape"].shape) if "shape" in node.attr else None
            feeds[node.name] = (f"placeholder {node.name}", node.attr["dtype"].type, _concrete(shape))
    for variable in variables:
        # Each run's variables are its own, whatever the graph names them.
        by_name[variable.node].attr["shared_name"].s = f"tfwasm_verify/{variable.node}".encode()
    on_wasm = 0
    for node in graph.node:
        node.attr.pop("_class", None)  # colocation with nodes placed elsewhere
        node.device = kernels.device(node.op)
        on_wasm += node.device.endswith("WASM:0")
    for function in graph.library.function:
        for node in function.node_def:
            node.attr.pop("_class", None)
            node.device = kernels.device(node.op) if node.op not in ("_Arg", "_Retval") else ""
    read = set(readers)
    targets = [n.name for n in graph.node if n.name not in read and n.op not in ("Placeholder", "Const", "VarHandleOp")]
    return Runnable(graph, feeds, variables, fetches, targets, on_wasm)


def _resource_type(node, readers, hint) -> tuple[int, list[int] | None]:
    """A resource argument's variable: dtype and shape from the argument's
    handle attributes, the caller's (``hint``), else the nodes that read it."""
    if "_handle_dtypes" in node.attr and node.attr["_handle_dtypes"].list.type:
        dtype = node.attr["_handle_dtypes"].list.type[0]
        shapes = node.attr["_handle_shapes"].list.shape if "_handle_shapes" in node.attr else []
        return dtype, (_shape_of(shapes[0]) if shapes else None)
    if hint is not None:
        return hint
    for reader in readers:
        if reader.op == "ReadVariableOp":
            shapes = reader.attr["_output_shapes"].list.shape if "_output_shapes" in reader.attr else []
            return reader.attr["dtype"].type, (_shape_of(shapes[0]) if shapes else None)
    for reader in readers:
        if "dtype" in reader.attr:
            return reader.attr["dtype"].type, None
    raise NotRunnable(f"resource argument {node.name}: no dtype for its variable")


def _make_var_handle(node, dtype: int, shape: list[int] | None) -> None:
    node.op = "VarHandleOp"
    node.ClearField("attr")
    node.ClearField("input")
    node.attr["dtype"].type = dtype
    if shape is None:
        raise NotRunnable(f"resource argument {node.name}: its variable's shape is unknown")
    node.attr["shape"].shape.SetInParent()  # a scalar's shape has no dims, and must still be set
    for size in _concrete(shape):
        node.attr["shape"].shape.dim.add().size = size
    node.attr["container"].s = b""
    node.attr["shared_name"].s = node.name.encode()


# --------------------------------------------------------------------------
# Seeded values and one step


def _values(key: str, dtype: int, shape: list[int], seed: int, variable: bool):
    """The value of feed or variable ``key``: the same in both runs. Floats
    of both signs for data; positive for variables (an optimizer's second
    moments are non-negative, a learning rate positive); small
    non-negative integers (labels, indices and counters stay in range)."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng([seed, zlib.crc32(key.encode())])
    dt = tf.dtypes.as_dtype(dtype)
    if dt.is_floating:
        low, high = (0.05, 1.0) if variable else (-1.0, 1.0)
        return rng.uniform(low, high, size=shape).astype(dt.as_numpy_dtype)
    if dt.is_integer:
        return rng.integers(0, 3 if variable else 2, size=shape).astype(dt.as_numpy_dtype)
    if dt == tf.bool:
        return rng.random(size=shape) < 0.5
    raise NotRunnable(f"{key}: no seeded values for {dt.name}")


def execute(runnable: Runnable, seed: int, extra: dict[str, str] | None = None) -> dict:
    """One step of ``runnable`` in a fresh session: ``{label: value}`` for
    every fetch, every variable after the step, and the ``extra`` tensors."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(runnable.graph, name="")
        inits, init_feeds, reads = [], {}, {}
        for variable in runnable.variables:
            handle = graph.get_tensor_by_name(f"{variable.node}:0")
            value = _values(variable.key, variable.dtype, variable.shape, seed, variable=True)
            with tf.device("/device:CPU:0"):
                placeholder = tf.compat.v1.placeholder(variable.dtype, shape=value.shape)
                inits.append(tf.raw_ops.AssignVariableOp(resource=handle, value=placeholder))
                reads[f"variable {variable.key}"] = tf.raw_ops.ReadVariableOp(resource=handle, dtype=variable.dtype)
            init_feeds[placeholder] = value
    feeds = {
        f"{name}:0": _values(key, dtype, shape, seed, variable=False) for name, (key, dtype, shape) in runnable.feeds.items()
    }
    fetches = {f"fetch {label}": name for label, name in runnable.fetches.items()}
    fetches.update(extra or {})
    config = tf.compat.v1.ConfigProto(allow_soft_placement=False)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        session.run(inits, init_feeds)
        values, _ = session.run((fetches, runnable.targets), feeds)
        values.update(session.run(reads))
    return values


# --------------------------------------------------------------------------
# Comparing, and naming what the pass changed


def compare(before, after, rtol: float, atol: float) -> str | None:
    """None when ``after`` agrees with ``before``; else how it differs."""
    import numpy as np

    before, after = np.asarray(before), np.asarray(after)
    if before.shape != after.shape:
        return f"shape {list(after.shape)}, was {list(before.shape)}"
    if before.dtype != after.dtype:
        return f"dtype {after.dtype}, was {before.dtype}"
    if before.dtype.kind in "fc":
        b64, a64 = before.astype(np.complex128 if before.dtype.kind == "c" else np.float64), after.astype(
            np.complex128 if before.dtype.kind == "c" else np.float64
        )
        both_nan = np.isnan(b64) & np.isnan(a64)
        diff = np.where(both_nan, 0.0, np.abs(a64 - b64))
        bound = atol + rtol * np.where(np.isfinite(b64), np.abs(b64), 0.0)
        bad = ~(diff <= bound) & ~(b64 == a64)  # equal infinities agree
        if not bad.any():
            return None
        where = np.unravel_index(int(np.argmax(np.where(bad, np.nan_to_num(diff, nan=np.inf), -1))), before.shape)
        return (
            f"{int(bad.sum())} of {before.size} values beyond rtol={rtol:g} atol={atol:g}; "
            f"at {list(map(int, where))}: {after[where]!r} after, {before[where]!r} before"
        )
    if before.dtype.kind == "O":
        return None if before.tolist() == after.tolist() else "values differ"
    bad = before != after
    if not bad.any():
        return None
    where = np.unravel_index(int(np.argmax(bad)), before.shape) if before.shape else ()
    return f"{int(bad.sum())} of {before.size} values differ; at {list(map(int, where))}: {after[where]!r} after, {before[where]!r} before"


def changes(before, after) -> dict[str, str]:
    """Nodes of ``after`` that the pass made or changed, and how (devices aside)."""
    old = {n.name: n for n in before.node}
    changed = {}
    for node in after.node:
        was = old.get(node.name)
        if was is None:
            changed[node.name] = f"new {node.op}"
        elif was.op != node.op:
            changed[node.name] = f"{was.op} became {node.op}"
        elif list(was.input) != list(node.input):
            changed[node.name] = f"{node.op} with inputs {list(node.input)}, was {list(was.input)}"
        else:
            keys = sorted(k for k in set(was.attr) | set(node.attr) if k != "_output_shapes" and was.attr.get(k) != node.attr.get(k))
            if keys:
                changed[node.name] = f"{node.op} with attr {', '.join(keys)} changed"
    return changed


def upstream(graph, sinks: set[str]) -> list[str]:
    """Nodes whose value or effect reaches ``sinks`` (themselves included), in graph order."""
    inputs = {n.name: [_source(i) for i in n.input] for n in graph.node}
    seen, stack = set(sinks), list(sinks)
    while stack:
        for source in inputs.get(stack.pop(), []):
            if source not in seen:
                seen.add(source)
                stack.append(source)
    return [n.name for n in graph.node if n.name in seen]


# --------------------------------------------------------------------------
# One graph


def verify_graph(tf, before_gd, after_gd, hints, seed: int, rtol: float, atol: float, result: GraphResult) -> None:
    before = prepare(before_gd, tf, hints)
    after = prepare(after_gd, tf, hints)
    want = execute(before, seed)
    got = execute(after, seed)
    for label in want:
        if label not in got:
            result.differences.append(Difference(label, "missing after the pass"))
            continue
        result.compared += 1
        how = compare(want[label], got[label], rtol, atol)
        if how:
            result.differences.append(Difference(label, how))
    if not result.differences:
        extra = f", {after.on_wasm} node(s) without a CPU kernel on WASM" if after.on_wasm else ""
        result.status, result.detail = "passed", f"{result.compared} fetches and variables agree{extra}"
        return
    result.status = "failed"
    # What the pass changed upstream of what differs.
    changed = changes(before_gd, after_gd)
    handles = {v.key: v.node for v in after.variables}
    sinks = set()
    by_tensor = {t: label for label, t in after.fetches.items()}
    for difference in result.differences:
        kind, _, label = difference.what.partition(" ")
        if kind == "fetch":
            sinks.add(_source(after.fetches[label]))
        elif kind == "variable" and label in handles:
            sinks.update(n.name for n in after.graph.node if any(_source(i) == handles[label] for i in n.input))
    del by_tensor
    names = [n for n in upstream(after_gd, sinks) if n in changed] or list(changed)
    suspects = [Suspect(n, changed[n]) for n in names]
    # Which of them already compute something else: both graphs fetch them.
    old_names = {n.name for n in before_gd.node}
    comparable = [s for s in suspects if s.node in old_names and not changed[s.node].startswith("new")]
    extra = {f"node {s.node}": f"{s.node}:0" for s in comparable[:64]}
    if extra:
        try:
            want_extra = execute(before, seed, _with_outputs(before, extra))
            got_extra = execute(after, seed, _with_outputs(after, extra))
            for suspect in comparable:
                label = f"node {suspect.node}"
                if label in want_extra and label in got_extra:
                    suspect.differs = compare(want_extra[label], got_extra[label], rtol, atol) is not None
        except Exception:  # noqa: BLE001 - e.g. a tensor inside a loop cannot be fetched
            pass
    suspects.sort(key=lambda s: (s.differs is not True, s.differs is None))
    result.suspects = suspects
    first = suspects[0] if suspects else None
    result.detail = f"{len(result.differences)} of {result.compared} fetches and variables differ" + (
        f"; the pass changed node {first.node!r} ({first.change}) upstream of them" if first else ""
    )


def _with_outputs(runnable: Runnable, extra: dict[str, str]) -> dict[str, str]:
    """``extra`` without nodes that have no output 0 in ``runnable``."""
    from tensorflow.python.framework import op_def_registry

    ops = {n.name: n.op for n in runnable.graph.node}
    kept = {}
    for label, tensor in extra.items():
        op = op_def_registry.get(ops.get(_source(tensor), ""))
        if op is not None and op.output_arg:
            kept[label] = tensor
    return kept


# --------------------------------------------------------------------------
# The command


def _read_graph(path: Path):
    from google.protobuf import text_format
    from tensorflow.core.framework import graph_pb2

    if path.suffix == ".pbtxt":
        return text_format.Parse(path.read_text(), graph_pb2.GraphDef())
    return graph_pb2.GraphDef.FromString(path.read_bytes())


def _import_tensorflow():
    os.environ["TFWASM_PASSES"] = "0"  # only the pass under test rewrites the graphs
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
    try:
        import tensorflow as tf
    except ImportError as error:
        sys.stderr.write(
            f"tfwasm pass verify runs each graph in TensorFlow's CPU runtime, and {sys.executable} cannot import "
            f"tensorflow ({error}): install tensorflow-cpu (2.21 to 2.23) there, or point TFWASM_PYTHON at a Python "
            "that has it\n"
        )
        raise SystemExit(2) from None
    tf.compat.v1.disable_eager_execution()
    return tf


def verify(
    pass_path: Path,
    graphs: list[Path],
    options: list[str],
    seed: int = 0,
    rtol: float = RTOL,
    atol: float = ATOL,
    progress=None,
) -> dict:
    tf = _import_tensorflow()
    cli = find_cli()
    sha256 = hashlib.sha256(pass_path.read_bytes()).hexdigest()
    results = []
    with tempfile.TemporaryDirectory(prefix="tfwasm-verify-") as tmp:
        tmp = Path(tmp)
        graphs = graphs or golden_graphs(cli, tmp / "golden")
        for graph_path in graphs:
            name = graph_path.stem
            started = time.perf_counter()
            result = GraphResult(name, "failed")
            try:
                before = _read_graph(graph_path)
                result.nodes_before = result.nodes_after = len(before.node)
                preserve = [n.name for n in before.node if n.op in ("_Retval", "_DeviceRetval")]
                answer = tmp / f"{name}.answer.pb"
                run = run_pass(cli, pass_path, graph_path, answer, preserve, options)
                if not run["accepted"]:
                    result.status, result.detail = "refused", f"the host refused the pass's answer: {run['failure']}"
                elif not run["changed"]:
                    result.status, result.detail = "unchanged", "the pass left the graph unchanged"
                else:
                    after = _read_graph(answer)
                    result.nodes_after = len(after.node)
                    caller = graph_path.with_name(f"{name}_call{graph_path.suffix}")
                    hints = caller_hints(before, _read_graph(caller)) if caller.is_file() else {}
                    verify_graph(tf, before, after, hints, seed, rtol, atol, result)
            except NotRunnable as why:
                result.status, result.detail = "skipped", f"cannot run on its own: {why}"
            except Exception as error:  # noqa: BLE001 - TensorFlow's errors are many; the report says which
                message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
                result.status, result.detail = "failed", f"{type(error).__name__}: {message}"
            result.seconds = time.perf_counter() - started
            results.append(result)
            if progress:
                progress(result)
    failed = [r for r in results if r.status in ("failed", "refused")]
    return {
        "tool": "tfwasm pass verify",
        "pass": str(pass_path),
        "sha256": sha256,
        "config": dict(o.split("=", 1) for o in options),
        "passed": not failed,
        "tensorflow": tf.__version__,
        "seed": seed,
        "rtol": rtol,
        "atol": atol,
        "graphs": [asdict(r) for r in results],
    }


def _print_result(result: GraphResult, width: int) -> None:
    verdict = {"passed": "pass", "unchanged": "pass", "skipped": "skip"}.get(result.status, "FAIL")
    print(f"  {result.graph:{width}}  {verdict}  {result.seconds:6.2f} s  {result.detail}", flush=True)
    for difference in result.differences[:MAX_SUSPECTS]:
        print(f"      differs: {difference.what}: {difference.detail}")
    if len(result.differences) > MAX_SUSPECTS:
        print(f"      ... and {len(result.differences) - MAX_SUSPECTS} more")
    for suspect in result.suspects[:MAX_SUSPECTS]:
        value = {True: "its value differs", False: "its value agrees", None: "no value to compare"}[suspect.differs]
        print(f"      changed by the pass: node {suspect.node!r}: {suspect.change} ({value})")
    if len(result.suspects) > MAX_SUSPECTS:
        print(f"      ... and {len(result.suspects) - MAX_SUSPECTS} more changed nodes upstream")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tfwasm pass verify",
        description="Run graphs one step before and after a pass in TensorFlow; every fetch and variable must agree.",
    )
    parser.add_argument("pass_path", metavar="PASS", type=Path, help="the pass component (.wasm)")
    parser.add_argument("graphs", metavar="GRAPH", type=Path, nargs="*", help="GraphDefs (.pb/.pbtxt); default: the golden graphs")
    parser.add_argument("--report", type=Path, help="write the verdict as JSON here (what a policy's `verified` reads)")
    parser.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="the pass's [pass.config]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rtol", type=float, default=RTOL)
    parser.add_argument("--atol", type=float, default=ATOL)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_intermixed_args(argv)
    if not args.pass_path.is_file():
        parser.error(f"no pass at {args.pass_path}")
    for option in args.config:
        if "=" not in option:
            parser.error(f"--config {option!r} is not KEY=VALUE")
    width = max([len(g.stem) for g in args.graphs] + [20])
    if not args.json:
        print(f"pass verify: {args.pass_path} (rtol {args.rtol:g}, atol {args.atol:g}, seed {args.seed})", flush=True)
    started = time.perf_counter()
    report = verify(
        args.pass_path,
        args.graphs,
        args.config,
        args.seed,
        args.rtol,
        args.atol,
        progress=None if args.json else lambda r: _print_result(r, width),
    )
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        counts = {}
        for graph in report["graphs"]:
            counts[graph["status"]] = counts.get(graph["status"], 0) + 1
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
        print(
            f"{'verified' if report['passed'] else 'FAILED'}: {summary} of {len(report['graphs'])} graphs "
            f"in {time.perf_counter() - started:.1f} s (TensorFlow {report['tensorflow']}, sha256 {report['sha256'][:12]})"
        )
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
