"""One notebook of the check, in a process of its own: ``python -m gpulab.preflight.child PATH --timeout S --result F``.

It runs the notebook with :func:`gpulab.preflight.run.run_notebook`, writes the kernel's process group to
``F.pgids`` as soon as the kernel runs (so the check can end it whatever happens here) and the outcome to ``F``
(JSON). ``SIGTERM`` and ``SIGINT`` stop the notebook: the kernel is shut down and the outcome says "interrupted".

Example:
    >>> from gpulab.preflight.child import parse_args
    >>> parse_args(["00_x.ipynb", "--timeout", "60", "--result", "r.json"]).timeout
    60.0
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

__all__ = ["parse_args", "main"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m gpulab.preflight.child", description=__doc__.split("\n\n")[0])
    p.add_argument("path", help="the notebook to run")
    p.add_argument("--timeout", type=float, required=True, help="seconds for the whole notebook")
    p.add_argument("--cell-timeout", type=float, default=300.0, help="seconds for one cell")
    p.add_argument("--result", required=True, help="where the outcome goes (JSON)")
    p.add_argument("--save-to", default=None, help="where the executed notebook goes")
    p.add_argument("--kernel-name", default=None, help="the Jupyter kernel (default: the notebook's own)")
    return p.parse_args(argv)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Run one notebook; exit 0 when it passed, 1 otherwise (the outcome file says why)."""
    args = parse_args(argv)
    from .run import Outcome, run_notebook

    result = Path(args.result)
    pgids = Path(args.result + ".pgids")

    def kernel_started(group: int) -> None:
        pgids.write_text(f"{group}\n", encoding="utf-8")

    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    path = Path(args.path)
    try:
        outcome = run_notebook(path, args.timeout, cell_timeout_s=args.cell_timeout,
                               save_to=None if args.save_to is None else Path(args.save_to),
                               kernel_name=args.kernel_name,
                               on_kernel=kernel_started)
    except KeyboardInterrupt:                    # stopped before nbclient could take it as its own
        outcome = Outcome(path.name, "interrupted", 0.0, "stopped by Ctrl-C or a kill before the kernel ran")
    result.write_text(json.dumps(outcome.to_dict()) + "\n", encoding="utf-8")
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
