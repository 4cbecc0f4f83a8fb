"""``python -m tfwasm {sweep,coverage,pass verify} ...``"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = (
        "usage: python -m tfwasm sweep [options]       compare every WASM kernel with TensorFlow's CPU device\n"
        "       python -m tfwasm coverage [options] -- SCRIPT [ARGS...]\n"
        "                                              run SCRIPT, report which ops ran on WASM and which on CPU\n"
        "       python -m tfwasm pass verify PASS.wasm [GRAPH.pb ...] [--report R.json]\n"
        "                                              run graphs before and after a pass in TensorFlow, compare\n"
        "Run a command with --help for its options."
    )
    if not argv or argv[0] in ("-h", "--help"):
        print(usage)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "sweep":
        from tfwasm import sweep

        return sweep.main(rest)
    if command == "coverage":
        from tfwasm import coverage

        return coverage.main(rest)
    if command == "pass" and rest[:1] == ["verify"]:
        from tfwasm import verify

        return verify.main(rest[1:])
    print(f"tfwasm: unknown command {command!r}\n{usage}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
