"""Writes a snapshot of TensorFlow's op registry, as the plugin sees it.

`tfwasm pass run` and `tfwasm pass check` check a pass's answer without
TensorFlow; for "is this an op TensorFlow knows, and how many outputs does
it have" they read this snapshot instead of the live registry. It is every
op registered in a process that imported TensorFlow with tfwasm installed
(so tfwasm's own ops are in it), as an `OpList` (proto/graph.proto) with the
human-readable text (summaries, descriptions, deprecation notes) removed:
names, arguments and attributes are all the checks read.

    .venv/bin/python proto/ops/snapshot.py     # writes proto/ops/tensorflow-<major>.<minor>.oplist.pb

tests/python/test_proto_schema.py checks that the snapshot matches the
installed TensorFlow's registry.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def registry_snapshot() -> tuple[str, bytes]:
    """`(major.minor, serialized OpList)` of this process's registry."""
    import tensorflow as tf
    from tensorflow.core.framework import op_def_pb2
    from tensorflow.python.client import pywrap_tf_session

    buffer = pywrap_tf_session.TF_GetAllOpList()
    try:
        ops = op_def_pb2.OpList.FromString(pywrap_tf_session.TF_GetBuffer(buffer))
    finally:
        pywrap_tf_session.TF_DeleteBuffer(buffer)
    for op in ops.op:
        op.ClearField("summary")
        op.ClearField("description")
        for arg in [*op.input_arg, *op.output_arg]:
            arg.ClearField("description")
        for attr in op.attr:
            attr.ClearField("description")
        op.deprecation.ClearField("explanation")
        if not op.deprecation.version:
            op.ClearField("deprecation")
    ops.op.sort(key=lambda op: op.name)
    version = ".".join(tf.__version__.split(".")[:2])
    return version, ops.SerializeToString(deterministic=True)


def main() -> None:
    version, data = registry_snapshot()
    target = HERE / f"tensorflow-{version}.oplist.pb"
    target.write_bytes(data)
    print(f"{target.name}: {len(data)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
