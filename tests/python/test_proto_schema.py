"""``proto/graph.proto`` against the TensorFlow wheel's own descriptors.

The graph passes read and write TensorFlow's wire format through the field
numbers generated from ``proto/graph.proto``. A wrong number or type there
would make a pass misread every graph, so each field and enum value of our
schema is checked against the descriptors of the installed wheel's
``GraphDef`` / ``NodeDef`` / ``AttrValue`` / ``DataType``.
"""

from __future__ import annotations

import re

import pytest

from tfwasm_support import REPO_ROOT

SCHEMA = REPO_ROOT / "proto" / "graph.proto"

# Scalar .proto types and the descriptor type each must have in TensorFlow.
SCALAR_TYPES = {"string": "TYPE_STRING", "bytes": "TYPE_BYTES", "int64": "TYPE_INT64", "bool": "TYPE_BOOL"}

TOKEN = re.compile(r"//[^\n]*|[A-Za-z_][\w.]*|\d+|<[^>]*>|[{}=;]")


def parse(text: str):
    """Our schema as ``({message path: {field: (type, repeated, number)}}, {enum: {value: number}})``.

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
            repeated = words[0] == "repeated"
            if repeated:
                words = words[1:]
            field_type = words[0] + (words[1] if words[1].startswith("<") else "")
            name = words[-1]
            path = ".".join(n for kind, n in scope if kind == "message")
            messages[path][name] = (field_type, repeated, int(tokens[eq + 1]))
            i = eq + 3
        else:
            i += 1
    return messages, enums


def mismatches(messages, enums) -> list[str]:
    """Every way our schema differs from the wheel's descriptors."""
    from google.protobuf.descriptor import FieldDescriptor
    from tensorflow.core.framework import attr_value_pb2, graph_pb2, node_def_pb2, types_pb2

    theirs = {
        "GraphDef": graph_pb2.GraphDef.DESCRIPTOR,
        "NodeDef": node_def_pb2.NodeDef.DESCRIPTOR,
        "AttrValue": attr_value_pb2.AttrValue.DESCRIPTOR,
        "AttrValue.ListValue": attr_value_pb2.AttrValue.ListValue.DESCRIPTOR,
    }
    type_names = {number: name for name, number in vars(FieldDescriptor).items() if name.startswith("TYPE_")}
    problems = []
    for path, fields in messages.items():
        descriptor = theirs.get(path)
        if descriptor is None:
            problems.append(f"{path}: no such TensorFlow message is checked")
            continue
        for name, (field_type, repeated, number) in fields.items():
            field = descriptor.fields_by_name.get(name)
            if field is None:
                problems.append(f"{path}.{name}: TensorFlow has no such field")
                continue
            if field.number != number:
                problems.append(f"{path}.{name}: number {number}, TensorFlow's is {field.number}")
            if field_type.startswith("map<"):
                # The entry message our generated code reads (key 1, value 2).
                value_type = field_type[4:-1].split(",")[1].strip()
                entry = field.message_type
                if (
                    entry is None
                    or not entry.GetOptions().map_entry
                    or entry.fields_by_name["value"].message_type.name != value_type
                    or (entry.fields_by_name["key"].number, entry.fields_by_name["value"].number) != (1, 2)
                ):
                    problems.append(f"{path}.{name}: TensorFlow's field is not a {field_type}")
                continue
            if field_type in SCALAR_TYPES:
                got = type_names[field.type]
                if got != SCALAR_TYPES[field_type]:
                    problems.append(f"{path}.{name}: type {field_type}, TensorFlow's is {got}")
            else:
                target = field.message_type or field.enum_type
                if target is None or target.name != field_type:
                    problems.append(f"{path}.{name}: type {field_type}, TensorFlow's is {type_names[field.type]}")
            if repeated != field.is_repeated:
                problems.append(f"{path}.{name}: repeated is {repeated} here, not in TensorFlow")
    for enum, values in enums.items():
        if enum != "DataType":
            problems.append(f"{enum}: no such TensorFlow enum is checked")
            continue
        for name, number in values.items():
            value = types_pb2.DataType.DESCRIPTOR.values_by_name.get(name)
            if value is None:
                problems.append(f"DataType.{name}: TensorFlow has no such value")
            elif value.number != number:
                problems.append(f"DataType.{name}: number {number}, TensorFlow's is {value.number}")
    return problems


@pytest.fixture(scope="module")
def schema():
    return parse(SCHEMA.read_text(encoding="utf-8"))


def test_the_schema_names_what_the_passes_use(schema):
    messages, enums = schema
    assert set(messages) == {"GraphDef", "NodeDef", "AttrValue", "AttrValue.ListValue"}
    assert messages["NodeDef"]["attr"] == ("map<string, AttrValue>", False, 5)
    assert messages["AttrValue.ListValue"]["i"] == ("int64", True, 3)
    assert {"DT_FLOAT", "DT_INT32", "DT_RESOURCE", "DT_VARIANT"} <= set(enums["DataType"])


def test_every_field_and_value_matches_the_wheel(schema):
    assert mismatches(*schema) == []


@pytest.mark.parametrize(
    "edit, expected",
    [
        (("string op = 2;", "string op = 7;"), "NodeDef.op: number 7, TensorFlow's is 2"),
        (("bytes s = 2;", "string s = 2;"), "AttrValue.s: type string, TensorFlow's is TYPE_BYTES"),
        (("DT_VARIANT = 21;", "DT_VARIANT = 22;"), "DataType.DT_VARIANT: number 22, TensorFlow's is 21"),
        (("repeated string input = 3;", "string input = 3;"), "NodeDef.input: repeated is False here, not in TensorFlow"),
        (("string device = 4;", "string placement = 4;"), "NodeDef.placement: TensorFlow has no such field"),
        (("map<string, AttrValue> attr", "map<string, NodeDef> attr"), "NodeDef.attr: TensorFlow's field is not a map<string, NodeDef>"),
    ],
)
def test_a_wrong_schema_is_caught(edit, expected):
    text = SCHEMA.read_text(encoding="utf-8")
    assert edit[0] in text
    assert expected in mismatches(*parse(text.replace(edit[0], edit[1])))
