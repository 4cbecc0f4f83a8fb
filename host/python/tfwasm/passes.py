"""The optimizer's passes in this process: list them, swap one, turn one on or off.

    import tensorflow as tf
    import tfwasm.passes
    for p in tfwasm.passes.list():
        print(p["slot"], p["name"], p["version"], p["sha256"][:12], p["calls"], p["failures"])
    tfwasm.passes.swap("fuse-elementwise", "build/my_fuse_pass.wasm")
    tfwasm.passes.disable("fuse-elementwise")
    tfwasm.passes.enable("fuse-elementwise")

The passes are the policy's ``[[pass]]`` entries, run by the plugin
TensorFlow loaded (``import tensorflow`` first; nothing is loaded twice).
A swap compiles, instantiates and asks the new file to describe itself
before anything changes: on failure it raises :class:`PassError` and the old
pass stays. Graphs optimized after a swap use the new pass; a graph
TensorFlow already optimized keeps what the old one made, so a Keras model
picks the new pass up when its step function is traced again, e.g. after
``model.compile(...)`` or with a new ``tf.function``.
"""

from __future__ import annotations

import ctypes
import json
import os

from . import _plugin

__all__ = ["PassError", "list", "swap", "enable", "disable"]

_list = list  # `list` below is this module's function


class PassError(RuntimeError):
    """The plugin refused a pass operation; the message says why."""


def _library() -> ctypes.CDLL:
    library = _plugin.library()
    library.tfwasm_passes_list.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    library.tfwasm_passes_list.restype = ctypes.c_ssize_t
    control = [ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    library.tfwasm_passes_swap.argtypes = [ctypes.c_char_p, ctypes.c_char_p, *control]
    library.tfwasm_passes_swap.restype = ctypes.c_int
    library.tfwasm_passes_set_enabled.argtypes = [ctypes.c_char_p, ctypes.c_int, *control]
    library.tfwasm_passes_set_enabled.restype = ctypes.c_int
    return library


def list() -> _list[dict]:  # noqa: A001 - the module's verb
    """The passes in pipeline order, each a dict: slot (the policy's name),
    name, version, summary (what the pass says of itself), path, sha256,
    enabled, disabled (why the plugin turned it off, or None), calls,
    rewrites, failures, last_error, generation (1 + swaps)."""
    library = _library()
    size = 4096
    while True:
        buffer = ctypes.create_string_buffer(size)
        needed = library.tfwasm_passes_list(buffer, size)
        if needed < 0:
            raise PassError("tfwasm: the pass list could not be read (see the log)")
        if needed <= size:
            return json.loads(buffer.raw[:needed].decode("utf-8"))
        size = needed


def _control(call, *args) -> None:
    message = ctypes.create_string_buffer(1024)
    length = ctypes.c_size_t(0)
    if not call(*args, message, len(message), ctypes.byref(length)):
        raise PassError(message.raw[: min(length.value, len(message))].decode("utf-8", "replace"))


def swap(slot: str, path: str | os.PathLike) -> None:
    """Installs the pass file at ``path`` in place of pass ``slot``."""
    library = _library()
    _control(library.tfwasm_passes_swap, slot.encode(), os.fsencode(os.path.abspath(path)))


def enable(slot: str) -> None:
    """Turns pass ``slot`` on; also after the plugin disabled it for failing."""
    _control(_library().tfwasm_passes_set_enabled, slot.encode(), 1)


def disable(slot: str) -> None:
    """Turns pass ``slot`` off: graphs optimized from now on skip it."""
    _control(_library().tfwasm_passes_set_enabled, slot.encode(), 0)
