"""Op coverage of a program: which ops ran on the WASM device and which fell back to the CPU.

    python -m tfwasm coverage [--json FILE] [--all] -- SCRIPT [ARGS...]

Runs SCRIPT (as ``python SCRIPT ARGS``, in a child interpreter) with
TensorFlow's device-placement log switched on, reads the log, and prints
per op type:

* ``nodes``: graph nodes TensorFlow placed, per device: every node of every
  function TensorFlow instantiated (a ``tf.function``, Keras' train step,
  and the one-node functions eager ops run in);
* ``eager runs``: eager executions per device.

A function whose loops and branches TensorFlow lowers after the graph
passes (a jit function run without XLA on WASM, see docs/architecture.md)
is placed a second time, without the placement log. Its first placement
still names the functional ``While``/``If`` and misses every op inside, so
TensorFlow's placer is also asked for its own lines (``TF_CPP_VMODULE``
``placer=1``): one it writes alone, with no placement-log line for the same
node on the same thread just before, is such a second placement, and it
replaces the node's earlier record.

Nodes of tf.data input-pipeline functions (instantiated when a dataset
iterator is created: TensorFlow always runs them on the host CPU, whatever
devices exist) are counted apart, as ``pipeline``, and not in the share.

Then a summary: the share of compute nodes on WASM. Compute nodes are all
nodes except the bookkeeping ones that carry no arithmetic (function
arguments and results, constants, identities, no-ops, variable handles and
reads/writes, control flow, dataset iterators): see ``NOT_COMPUTE``.
``--all`` counts those too in the table. The program's own output passes
through unchanged; the placement lines are taken out of it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

#: Ops that move or name data without computing on it. They go wherever
#: their neighbours are and say nothing about kernel coverage.
NOT_COMPUTE = frozenset(
    """
    _Arg _Retval _DeviceArg _DeviceRetval _EagerConst Const NoOp Identity IdentityN Placeholder
    VarHandleOp ReadVariableOp AssignVariableOp AssignAddVariableOp AssignSubVariableOp
    VarIsInitializedOp DestroyResourceOp _Send _Recv _HostSend _HostRecv
    PartitionedCall StatefulPartitionedCall While StatelessWhile If StatelessIf Case
    Switch Merge Enter Exit NextIteration LoopCond ControlTrigger
    IteratorGetNext IteratorGetNextAsOptional OptionalHasValue OptionalGetValue OptionalNone
    IteratorV2 AnonymousIteratorV3 MakeIterator DeleteIterator OptionalFromValue
    """.split()
)


def is_not_compute(op: str) -> bool:
    # Dataset ops build tf.data pipelines (host objects), they compute nothing.
    return op in NOT_COMPUTE or op.endswith("Dataset") or "DatasetV" in op

# "name: (Op): /job:localhost/replica:0/task:0/device:WASM:0" (placer, stdout and the log)
PLACED = re.compile(r"^(?:.*placer\.cc:\d+\] )?(?P<node>[^\s()]+): \((?P<op>[A-Za-z0-9_]+)\): (?P<device>/job:\S+)$")
# "name(Op) placed on: /job:..." (the placer's own VLOG(1) line, for every placement)
REPLACED = re.compile(r"placer\.cc:\d+\] (?P<node>[^\s()]+)\((?P<op>[A-Za-z0-9_]+)\) placed on: (?P<device>/job:\S+)$")
# The thread id in TensorFlow's log prefix.
THREAD = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+(?P<thread>\d+) ")
# "Executing op Relu in device /job:localhost/replica:0/task:0/device:CPU:0"
EXECUTED = re.compile(r"Executing op (?P<op>\S+) in device (?P<device>/job:\S+)$")
# TensorFlow's own C++ log prefix: "I0000 00:00:1795355550.407420    9015 placer.cc:162] ..."
LOG_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ")


def short_device(device: str) -> str:
    """``/job:localhost/replica:0/task:0/device:WASM:0`` → ``WASM:0``."""
    return device.rsplit("/device:", 1)[-1]


def is_pipeline_op(op: str) -> bool:
    """Ops whose execution instantiates tf.data functions."""
    return op in ("MakeIterator", "AnonymousIteratorV3", "AnonymousIteratorV2", "IteratorV2") or "Dataset" in op


@dataclass
class Coverage:
    nodes: Counter = field(default_factory=Counter)  # (op, device) → nodes placed
    eager: Counter = field(default_factory=Counter)  # (op, device) → eager executions
    pipeline: Counter = field(default_factory=Counter)  # (op, device) → tf.data function nodes
    # True between the execution of an iterator-creating op and the next execution:
    # the graphs placed then are the dataset's functions.
    in_pipeline: bool = False
    # Per thread: each node name's latest placement, as (counter, key), and
    # the node of the last placement-log line (its VLOG twin comes next).
    placed: dict = field(default_factory=dict)
    logged: dict = field(default_factory=dict)

    def feed(self, line: str) -> bool:
        """Records a placement-log line; False if the line is not one."""
        line = line.rstrip("\n")
        m = EXECUTED.search(line)
        if m:
            op = m.group("op")
            self.in_pipeline = is_pipeline_op(op)
            # A call of a tf.function; its nodes are counted where placed.
            if not op.startswith("__inference_"):
                self.eager[(op, short_device(m.group("device")))] += 1
            return True
        m = PLACED.match(line)
        if m:
            if "placer.cc" in line:
                # The same placement is printed to stdout and logged; count the log line only.
                key = (m.group("op"), short_device(m.group("device")))
                counter = self.placing()
                counter[key] += 1
                thread = self.thread(line)
                self.placed.setdefault(thread, {})[m.group("node")] = (counter, key)
                self.logged[thread] = m.group("node")
            return True
        m = REPLACED.search(line)
        if m:
            thread, node = self.thread(line), m.group("node")
            if self.logged.pop(thread, None) == node:
                return True  # the twin of the placement-log line just counted
            key = (m.group("op"), short_device(m.group("device")))
            placed = self.placed.setdefault(thread, {})
            counter = self.placing()
            if node in placed:
                counter, old = placed[node]
                counter[old] -= 1
                if counter[old] <= 0:
                    del counter[old]
            counter[key] += 1
            placed[node] = (counter, key)
            return True
        return False

    def placing(self) -> Counter:
        """The counter the nodes placed now go to."""
        return self.pipeline if self.in_pipeline else self.nodes

    @staticmethod
    def thread(line: str) -> str:
        m = THREAD.match(line)
        return m.group("thread") if m else ""

    def ops(self, include_all: bool) -> list[str]:
        names = {op for op, _ in self.nodes} | {op for op, _ in self.eager}
        return sorted(n for n in names if include_all or not is_not_compute(n))

    def devices(self) -> list[str]:
        return sorted({d for _, d in self.nodes} | {d for _, d in self.eager})

    def compute_nodes(self, device_type: str) -> tuple[int, int]:
        """(compute nodes on ``device_type``, all compute nodes)."""
        on = sum(n for (op, d), n in self.nodes.items() if not is_not_compute(op) and d.split(":")[0] == device_type)
        total = sum(n for (op, _), n in self.nodes.items() if not is_not_compute(op))
        return on, total

    def fallbacks(self, device_type: str) -> list[str]:
        """Compute ops placed on some other device at least once."""
        return sorted({op for (op, d) in list(self.nodes) + list(self.eager) if not is_not_compute(op) and d.split(":")[0] != device_type})

    def report(self, device_type: str, include_all: bool = False) -> str:
        devices = self.devices()
        header = ["op"] + [f"nodes {d}" for d in devices] + [f"eager runs {d}" for d in devices]
        rows = [
            [op] + [str(self.nodes.get((op, d), 0)) for d in devices] + [str(self.eager.get((op, d), 0)) for d in devices]
            for op in self.ops(include_all)
        ]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
        lines.append("  ".join("-" * w for w in widths))
        lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
        on, total = self.compute_nodes(device_type)
        share = f"{100.0 * on / total:.1f}%" if total else "n/a"
        lines.append("")
        lines.append(f"compute nodes on {device_type}: {on} of {total} ({share})")
        fallbacks = self.fallbacks(device_type)
        lines.append(f"ops that ran elsewhere: {', '.join(fallbacks) if fallbacks else 'none'}")
        pipeline = sum(self.pipeline.values())
        if pipeline:
            lines.append(f"tf.data input-pipeline nodes (always on the host, not counted above): {pipeline}")
        return "\n".join(lines)

    def to_json(self, device_type: str) -> dict:
        on, total = self.compute_nodes(device_type)
        return {
            "device_type": device_type,
            "nodes": [{"op": op, "device": d, "count": n} for (op, d), n in sorted(self.nodes.items())],
            "eager": [{"op": op, "device": d, "count": n} for (op, d), n in sorted(self.eager.items())],
            "pipeline": [{"op": op, "device": d, "count": n} for (op, d), n in sorted(self.pipeline.items())],
            "compute_nodes_on_device": on,
            "compute_nodes": total,
            "fallbacks": self.fallbacks(device_type),
        }


# Run inside the child: switch the placement log on, then run the script as __main__.
CHILD = """
import runpy, sys
import tensorflow as tf
tf.debugging.set_log_device_placement(True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def run(script_argv: list[str], coverage: Coverage) -> int:
    env = dict(os.environ)
    user_level = env.get("TF_CPP_MIN_LOG_LEVEL")
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # the placement log is INFO
    env["TF_CPP_VMODULE"] = ",".join(filter(None, [env.get("TF_CPP_VMODULE"), "placer=1"]))
    show_info = user_level == "0"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, *script_argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        bufsize=1,
    )

    lock = threading.Lock()

    def pump(stream, sink, is_stderr):
        for line in stream:
            with lock:
                placement = coverage.feed(line)
            if placement:
                continue
            if is_stderr and not show_info and LOG_LINE.match(line) and line[0] == "I":
                continue  # INFO we switched on for the placement log
            sink.write(line)
            sink.flush()

    threads = [
        threading.Thread(target=pump, args=(child.stdout, sys.stdout, False), daemon=True),
        threading.Thread(target=pump, args=(child.stderr, sys.stderr, True), daemon=True),
    ]
    for t in threads:
        t.start()
    code = child.wait()
    for t in threads:
        t.join()
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfwasm coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    parser.add_argument("--all", action="store_true", help="list bookkeeping ops (arguments, constants, control flow) too")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    args = parser.parse_args(argv)
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("name the script to run: python -m tfwasm coverage -- SCRIPT [ARGS...]")
    device_type = os.environ.get("TFWASM_DEVICE_TYPE", "WASM")
    coverage = Coverage()
    code = run(script, coverage)
    print(f"\n== tfwasm coverage of {' '.join(script)} (exit status {code})")
    print(coverage.report(device_type, args.all))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(coverage.to_json(device_type), f, indent=1)
    return code
