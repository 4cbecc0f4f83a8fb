"""``proto/graph.proto`` and ``proto/xplane.proto`` against the TensorFlow
wheel's own descriptors.

Two kinds of code read graphs through this schema: the host's passes, by
field number, and pass guests with the host's validation of their answers,
which decode whole messages with prost and encode them again. A wrong number
or type would make the first misread every graph; a field left out would make
the second drop it. So every field and enum value of our schema is checked
against the descriptors of the installed wheel, and every field of every
message reachable from TensorFlow's ``GraphDef`` must be in our schema.
The profiler's XSpace schema is checked the same way: TensorFlow parses
what the host writes with its own descriptors.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tfwasm_support import REPO_ROOT

SCHEMA = REPO_ROOT / "proto" / "graph.proto"
XPLANE_SCHEMA = REPO_ROOT / "proto" / "xplane.proto"

# Scalar .proto types and the descriptor type each must have in TensorFlow.
SCALAR_TYPES = {
    "string": "TYPE_STRING", "bytes": "TYPE_BYTES", "bool": "TYPE_BOOL", "float": "TYPE_FLOAT",
    "double": "TYPE_DOUBLE", "int32": "TYPE_INT32", "int64": "TYPE_INT64", "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64", "fixed64": "TYPE_FIXED64",
}

TOKEN = re.compile(r"//[^\n]*|[A-Za-z_][\w.]*|\d+|<[^>]*>|[{}=;]")
# The schema's messages and enums are TensorFlow's under this package.
TF_PACKAGE = "tensorflow"
# ... and the XSpace schema's under this one.
XPLANE_PACKAGE = "tensorflow.profiler"


def parse(text: str):
    """Our schema as ``({message path: {field: (type, label, number)}}, {enum: {value: number}})``.

    ``label`` is ``"repeated"``, ``"optional"`` (a scalar with presence) or ``""``.

    Enough of the .proto grammar for this file: messages (nested), oneofs,
    maps, enums. Paths are dotted (``AttrValue.ListValue``).
    """
    tokens = [t for t in TOKEN.findall(text) if not t.startswith("//")]
    messages, enums, scope = {}, {}, []  # scope: (kind, name) per open block
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("message", "enum", "oneof") and tokens[i + 2] == "{":
            scope.append((t, tokens[i + 1]))
            path = ".".join(name for kind, name in scope if kind == "message")
            if t == "message":
                messages[path] = {}
            elif t == "enum":
                enums[tokens[i + 1]] = {}
            i += 3
        elif t == "}":
            scope.pop()
            i += 1
        elif scope and scope[-1][0] == "enum" and tokens[i + 1] == "=":
            enums[scope[-1][1]][t] = int(tokens[i + 2])
            i += 4
        elif scope and scope[-1][0] in ("message", "oneof") and "=" in tokens[i:i + 5]:
            eq = tokens.index("=", i)
            words = tokens[i:eq]
            label = words[0] if words[0] in ("repeated", "optional") else ""
            if label:
                words = words[1:]
            field_type = words[0] + (words[1] if words[1].startswith("<") else "")
            name = words[-1]
            path = ".".join(n for kind, n in scope if kind == "message")
            messages[path][name] = (field_type, label, int(tokens[eq + 1]))
            i = eq + 3
        else:
            i += 1
    return messages, enums


def tf_descriptor(kind: str, path: str, package: str = TF_PACKAGE):
    """TensorFlow's descriptor of message or enum ``path`` (dotted, nested), or None."""
    # Importing the modules registers their messages in the default pool.
    from google.protobuf import descriptor_pool
    from tensorflow.core.framework import graph_pb2  # noqa: F401
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: F401

    pool = descriptor_pool.Default()
    find = pool.FindMessageTypeByName if kind == "message" else pool.FindEnumTypeByName
    try:
        return find(f"{package}.{path}")
    except KeyError:
        return None


def our_path(descriptor) -> str:
    return descriptor.full_name.removeprefix(f"{TF_PACKAGE}.")


def field_type_problem(ours: str, field) -> str | None:
    """Why our type ``ours`` does not describe TensorFlow's ``field``, or None."""
    from google.protobuf.descriptor import FieldDescriptor

    type_names = {number: name for name, number in vars(FieldDescriptor).items() if name.startswith("TYPE_")}
    if ours in SCALAR_TYPES:
        got = type_names[field.type]
        return None if got == SCALAR_TYPES[ours] else f"type {ours}, TensorFlow's is {got}"
    target = field.message_type or field.enum_type
    if target is None or our_path(target) != ours and target.name != ours:
        return f"type {ours}, TensorFlow's is {target.full_name if target else type_names[field.type]}"
    return None


def mismatches(messages, enums, package: str = TF_PACKAGE) -> list[str]:
    """Every way our schema differs from the wheel's descriptors."""
    problems = []
    for path, fields in messages.items():
        descriptor = tf_descriptor("message", path, package)
        if descriptor is None:
            problems.append(f"{path}: TensorFlow has no such message")
            continue
        for name, (field_type, label, number) in fields.items():
            field = descriptor.fields_by_name.get(name)
            if field is None:
                problems.append(f"{path}.{name}: TensorFlow has no such field")
                continue
            if field.number != number:
                problems.append(f"{path}.{name}: number {number}, TensorFlow's is {field.number}")
            if field_type.startswith("map<"):
                key_type, value_type = (t.strip() for t in field_type[4:-1].split(","))
                entry = field.message_type
                if (
                    entry is None
                    or not entry.GetOptions().map_entry
                    or field_type_problem(key_type, entry.fields_by_name["key"])
                    or field_type_problem(value_type, entry.fields_by_name["value"])
                ):
                    problems.append(f"{path}.{name}: TensorFlow's field is not a {field_type}")
                continue
            problem = field_type_problem(field_type, field)
            if problem:
                problems.append(f"{path}.{name}: {problem}")
            if (label == "repeated") != field.is_repeated:
                problems.append(f"{path}.{name}: repeated is {label == 'repeated'} here, not in TensorFlow")
            # proto2 scalars have presence; without `optional` a zero would not round-trip.
            presence = field.has_presence and not field.is_repeated and field.message_type is None
            presence = presence and field.containing_oneof is None
            if presence != (label == "optional"):
                problems.append(f"{path}.{name}: presence is {label == 'optional'} here, {presence} in TensorFlow")
    for enum, values in enums.items():
        descriptor = tf_descriptor("enum", enum, package)
        if descriptor is None:
            problems.append(f"{enum}: TensorFlow has no such enum")
            continue
        for name, number in values.items():
            value = descriptor.values_by_name.get(name)
            if value is None:
                problems.append(f"{enum}.{name}: TensorFlow has no such value")
            elif value.number != number:
                problems.append(f"{enum}.{name}: number {number}, TensorFlow's is {value.number}")
    return problems


def missing(messages) -> list[str]:
    """Fields of TensorFlow's GraphDef, and of every message it reaches, that our schema leaves out."""
    problems, seen, todo = [], set(), [tf_descriptor("message", "GraphDef")]
    while todo:
        descriptor = todo.pop()
        if descriptor.full_name in seen:
            continue
        seen.add(descriptor.full_name)
        ours = messages.get(our_path(descriptor))
        if ours is None:
            problems.append(f"{our_path(descriptor)}: the message is not in our schema")
            continue
        for field in descriptor.fields:
            if field.name not in ours:
                problems.append(f"{our_path(descriptor)}.{field.name}: not in our schema (decoding would drop it)")
            target = field.message_type
            if target is not None and target.GetOptions().map_entry:
                target = target.fields_by_name["value"].message_type
            if target is not None:
                todo.append(target)
    return problems


@pytest.fixture(scope="module")
def schema():
    return parse(SCHEMA.read_text(encoding="utf-8"))


def test_the_schema_names_what_the_passes_use(schema):
    messages, enums = schema
    assert {"GraphDef", "NodeDef", "AttrValue", "AttrValue.ListValue", "FunctionDefLibrary", "TensorProto"} <= set(messages)
    assert messages["NodeDef"]["attr"] == ("map<string, AttrValue>", "", 5)
    assert messages["AttrValue.ListValue"]["i"] == ("int64", "repeated", 3)
    assert messages["GraphDebugInfo.FileLineCol"]["line"] == ("int32", "optional", 2)
    assert {"DT_FLOAT", "DT_INT32", "DT_RESOURCE", "DT_VARIANT"} <= set(enums["DataType"])


def test_every_field_and_value_matches_the_wheel(schema):
    assert mismatches(*schema) == []


def test_the_schema_is_complete(schema):
    """Every field a GraphDef can hold in this TensorFlow is ours too."""
    assert missing(schema[0]) == []


@pytest.mark.parametrize(
    "edit, expected",
    [
        (("string op = 2;", "string op = 7;"), "NodeDef.op: number 7, TensorFlow's is 2"),
        (("    bytes s = 2;", "    string s = 2;"), "AttrValue.s: type string, TensorFlow's is TYPE_BYTES"),
        (("DT_VARIANT = 21;", "DT_VARIANT = 22;"), "DataType.DT_VARIANT: number 22, TensorFlow's is 21"),
        (("repeated string input = 3;", "string input = 3;"), "NodeDef.input: repeated is False here, not in TensorFlow"),
        (("string device = 4;", "string placement = 4;"), "NodeDef.placement: TensorFlow has no such field"),
        (("by name.\n  map<string, AttrValue> attr = 5;", "by name.\n  map<string, NodeDef> attr = 5;"), "NodeDef.attr: TensorFlow's field is not a map<string, NodeDef>"),
        (("map<fixed64, FileLineCol>", "map<int64, FileLineCol>"), "GraphDebugInfo.frames_by_id: TensorFlow's field is not a map<int64, FileLineCol>"),
        (("optional int32 line = 2;", "int32 line = 2;"), "GraphDebugInfo.FileLineCol.line: presence is False here, True in TensorFlow"),
        (("float8_val = 18", "float9_val = 18"), "TensorProto.float9_val: TensorFlow has no such field"),
    ],
)
def test_a_wrong_schema_is_caught(edit, expected):
    text = SCHEMA.read_text(encoding="utf-8")
    assert text.count(edit[0]) == 1
    assert expected in mismatches(*parse(text.replace(edit[0], edit[1])))


@pytest.mark.parametrize(
    "dropped, expected",
    [
        ("  bytes float8_val = 18;\n", "TensorProto.float8_val: not in our schema"),
        ("  GraphDebugInfo debug_info = 5;\n", "GraphDef.debug_info: not in our schema"),
    ],
)
def test_an_incomplete_schema_is_caught(dropped, expected):
    text = SCHEMA.read_text(encoding="utf-8")
    assert text.count(dropped) == 1
    assert any(p.startswith(expected) for p in missing(parse(text.replace(dropped, ""))[0]))


# ------------------------------------------------------------------ XSpace


def test_the_xspace_schema_matches_the_wheel_and_is_complete():
    messages, enums = parse(XPLANE_SCHEMA.read_text(encoding="utf-8"))
    assert set(messages) == {"XSpace", "XPlane", "XLine", "XEvent", "XStat", "XEventMetadata", "XStatMetadata"}
    assert mismatches(messages, enums, XPLANE_PACKAGE) == []
    left_out = [
        f"{name}.{field.name}"
        for name in messages
        for field in tf_descriptor("message", name, XPLANE_PACKAGE).fields
        if field.name not in messages[name]
    ]
    assert left_out == []


def test_a_wrong_xspace_schema_is_caught():
    text = XPLANE_SCHEMA.read_text(encoding="utf-8")
    edit = ("int64 timestamp_ns = 3;", "int64 timestamp_ns = 4;")
    assert text.count(edit[0]) == 1
    wrong = mismatches(*parse(text.replace(*edit)), XPLANE_PACKAGE)
    assert "XLine.timestamp_ns: number 4, TensorFlow's is 3" in wrong


# ------------------------------------------------------------- round trips


def tfwasm_command() -> Path:
    """The tfwasm command: the wheel's, else the workspace's build."""
    import sysconfig

    for candidate in (Path(sysconfig.get_path("scripts")) / "tfwasm", REPO_ROOT / "target" / "release" / "tfwasm"):
        if candidate.is_file():
            return candidate
    pytest.fail("no tfwasm command: install the wheel (host/scripts/setup.sh) or cargo build --release -p tfwasm-cli")


def every_kind_of_graph():
    """A GraphDef holding every message and field kind the schema names:
    attributes of each kind, constants of many dtypes, a function library with
    argument attributes and gradients, debug info with explicit zeros."""
    import numpy as np
    import tensorflow as tf
    from tensorflow.core.framework import graph_debug_info_pb2, graph_pb2

    @tf.function
    def body(x, n):
        i = tf.constant(0)
        total = tf.zeros_like(x)
        while i < n:  # a While with functions as attributes
            total += tf.cast(tf.strings.length(tf.strings.as_string(x)), x.dtype)
            i += 1
        return tf.cond(n > 2, lambda: total * 2.0, lambda: total)

    graph = body.get_concrete_function(tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([], tf.int32)).graph
    with graph.as_default():
        for value in (
            np.array([1.5, -2.0], np.float16), np.array([[1 + 2j]], np.complex64), np.array([3 - 1j], np.complex128),
            np.array([True, False]), np.array([b"a", b"\xff\x00"]), np.arange(7, dtype=np.uint32),
            np.arange(5, dtype=np.uint64), np.array([0], np.int8), np.float64(2.5), np.zeros((0, 4), np.float32),
        ):
            tf.constant(value)
        tf.raw_ops.Placeholder(dtype=tf.float32, shape=tf.TensorShape(None))  # unknown rank
    graph_def = graph.as_graph_def(add_shapes=True)
    # A gradient registration and debug info (proto2 fields: zeros with presence).
    graph_def.library.gradient.add(function_name=graph_def.library.function[0].signature.name, gradient_func="g")
    graph_def.library.registered_gradients.add(gradient_func="g", registered_op_type="Foo")
    function = graph_def.library.function[0]
    function.arg_attr[0].attr["_user"].s = b"x"
    function.resource_arg_unique_id[0] = 0
    function.node_def[0].experimental_debug_info.original_node_names.append("before")
    info = graph_debug_info_pb2.GraphDebugInfo(files=["model.py"])
    info.frames_by_id[7].CopyFrom(graph_debug_info_pb2.GraphDebugInfo.FileLineCol(file_index=0, line=0, col=0, func=""))
    info.traces_by_id[9].frame_id.extend([7, 7])
    info.traces["node"].file_line_cols.add(line=12)
    info.name_to_trace_id["node"] = 9
    graph_def.debug_info.CopyFrom(info)
    graph_def.node[0].experimental_type.type_id = 10001  # a full type we do not name
    graph_def.node[0].experimental_type.args.add(type_id=1, s="t")
    return graph_pb2.GraphDef.FromString(graph_def.SerializeToString())


GRAPHS = sorted((REPO_ROOT / "tests" / "fixtures" / "graphs").glob("*.pb"))


@pytest.mark.parametrize("source", ["every-kind", *(path.name for path in GRAPHS)])
def test_a_round_trip_through_the_schema_is_lossless(source, tmp_path):
    """What a pass guest decodes and encodes again is, to TensorFlow, the
    same graph: equal as a message, field for field, nothing dropped."""
    from tensorflow.core.framework import graph_pb2

    if source == "every-kind":
        original = every_kind_of_graph()
        assert original.debug_info.frames_by_id[7].HasField("line")
        data = original.SerializeToString()
    else:
        data = (REPO_ROOT / "tests" / "fixtures" / "graphs" / source).read_bytes()
        original = graph_pb2.GraphDef.FromString(data)
    given, answered = tmp_path / "in.pb", tmp_path / "out.pb"
    given.write_bytes(data)
    run = subprocess.run([tfwasm_command(), "graph", "roundtrip", given, answered], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    again = graph_pb2.GraphDef.FromString(answered.read_bytes())
    assert again.node, "a graph came back"
    assert again == original, "the round trip changed the graph"
    if source == "every-kind":
        assert again.debug_info.frames_by_id[7].HasField("line"), "an explicit zero keeps its presence"
        assert again.node[0].experimental_type.type_id == 10001


def test_the_op_registry_snapshot_is_this_tensorflows():
    """``proto/ops``'s snapshot of the registry (what offline pass checks read)
    is the installed TensorFlow's, with tfwasm's ops registered."""
    import sys

    sys.path.insert(0, str(REPO_ROOT / "proto" / "ops"))
    import snapshot

    version, live = snapshot.registry_snapshot()
    kept = REPO_ROOT / "proto" / "ops" / f"tensorflow-{version}.oplist.pb"
    if not kept.is_file():
        pytest.skip(f"no snapshot for TensorFlow {version}; offline checks use {sorted(p.name for p in kept.parent.glob('*.pb'))}")
    assert kept.read_bytes() == live, f"{kept.name} is stale: run .venv/bin/python proto/ops/snapshot.py"
