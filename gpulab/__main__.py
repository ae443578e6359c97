"""Command line: ``python -m gpulab doctor [--json]``, ``python -m gpulab limits``, ``python -m gpulab version``.

``doctor`` exits 0 when nothing is at level "error" (a healthy CPU-only machine included), 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Sequence

from . import __version__


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpulab", description="gpulab: make ML fast on GPUs")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("doctor", help="check the machine and the ML stack; suggest fixes")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.add_argument("--frameworks", default="torch,tensorflow,dali",
                   help="comma-separated frameworks to probe (default: torch,tensorflow,dali)")
    lim = sub.add_parser("limits", help="measure this device's peak matmul FLOP/s and copy bandwidth")
    lim.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: best available)")
    sub.add_parser("version", help="print gpulab's version")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "doctor":
        from .system import doctor

        fws = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
        try:
            report = doctor(frameworks=fws)
        except ValueError as e:
            parser.error(str(e))
        print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else repr(report))
        return 0 if report.healthy else 1
    if args.command == "limits":
        from .limits import machine_limits

        print(repr(machine_limits(args.device)))
        return 0
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
