"""Where a program's data went: the copies each WASM device was asked for.

    import tensorflow as tf
    import tfwasm.traffic
    before = tfwasm.traffic.read()
    ...                                  # run something
    moved = tfwasm.traffic.since(before) # per device, per path: copies and bytes

Reads counters the plugin keeps as TensorFlow submits copies (host to
device, device to host, device to device, fills); nothing is recorded
beyond two relaxed atomic adds per copy. Needs ``import tensorflow`` first:
the counters live in the ``libtfwasm.so`` TensorFlow loaded.
"""

from __future__ import annotations

import ctypes

from . import _plugin

PATHS = ("host_to_device", "device_to_host", "device_to_device", "fill")


class _Traffic(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("copies", ctypes.c_uint64 * 4), ("bytes", ctypes.c_uint64 * 4)]


def _library() -> ctypes.CDLL:
    library = _plugin.library()
    library.tfwasm_device_traffic.argtypes = [ctypes.c_uint32, ctypes.POINTER(_Traffic)]
    library.tfwasm_device_traffic.restype = ctypes.c_int
    return library


def read() -> list[dict[str, dict[str, int]]]:
    """Per device ordinal: ``{path: {"copies": n, "bytes": n}}`` since start-up."""
    library = _library()
    devices = []
    while True:
        counters = _Traffic(struct_size=ctypes.sizeof(_Traffic))
        if not library.tfwasm_device_traffic(len(devices), ctypes.byref(counters)):
            return devices
        devices.append({p: {"copies": counters.copies[i], "bytes": counters.bytes[i]} for i, p in enumerate(PATHS)})


def since(before: list[dict[str, dict[str, int]]]) -> list[dict[str, dict[str, int]]]:
    """What moved since ``before`` (an earlier :func:`read`)."""
    now = read()
    return [
        {p: {k: now[d][p][k] - before[d][p][k] for k in ("copies", "bytes")} for p in PATHS}
        for d in range(len(now))
    ]
