"""Tools for the tfwasm TensorFlow plugin.

The plugin itself is ``tensorflow-plugins/libtfwasm.so``, loaded by
``import tensorflow``; nothing here needs importing to use the device.
This package holds the user-facing commands:

    python -m tfwasm sweep      run every kernel the plugin registers on WASM and on CPU, compare
    python -m tfwasm coverage   which ops of a program ran on WASM and which fell back to CPU
    python -m tfwasm pass verify  a graph pass's answers run in TensorFlow against the graphs it was given

and ``tfwasm.traffic``, the copies each WASM device was asked for, and
``tfwasm.passes``, the optimizer passes (list, swap, enable, disable).
"""

__all__ = ["coverage", "passes", "sweep", "traffic", "verify"]
