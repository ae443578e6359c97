"""Command line: ``python -m gpulab doctor [--json]``, ``python -m gpulab limits``, ``python -m gpulab devicequery``,
``python -m gpulab version``.

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
    mon = sub.add_parser("monitor", help="print GPU (NVML) or host metrics every interval; Ctrl-C to stop")
    mon.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    mon.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    mon.add_argument("--csv", default=None, help="write every sample to this CSV file at the end")
    dq = sub.add_parser("devicequery", help="the GPU's execution model (SMs, threads, shared memory, L2, clocks, "
                                            "bus) beside published GPUs, like CUDA's deviceQuery")
    dq.add_argument("--device", default=None, help="cuda, cuda:1 or cpu (default: the current CUDA device, if any)")
    dq.add_argument("--compare", default="T4,A100 40GB SXM,H100 SXM",
                    help="comma-separated published GPUs to show beside it (default: T4,A100 40GB SXM,H100 SXM)")
    sub.add_parser("version", help="print gpulab's version")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    if args.command == "version":
        print(__version__)
        return 0
    if args.command == "doctor":
        from .diagnosis import doctor

        fws = tuple(f.strip() for f in args.frameworks.split(",") if f.strip())
        try:
            report = doctor(frameworks=fws)
        except ValueError as e:
            parser.error(str(e))
        print(json.dumps(report.to_dict(), indent=2, default=str) if args.json else repr(report))
        return 0 if report.healthy else 1
    if args.command == "monitor":
        return _monitor(args.interval, args.duration, args.csv)
    if args.command == "devicequery":
        from .devicequery import device_query

        try:
            report = device_query(args.device, compare=tuple(n.strip() for n in args.compare.split(",") if n.strip()))
        except (ValueError, TypeError) as e:
            parser.error(str(e))
        print(repr(report))
        return 0
    if args.command == "limits":
        from .limits import machine_limits

        print(repr(machine_limits(args.device)))
        return 0
    return 2  # pragma: no cover


def _monitor(interval: float, duration: float | None, csv: str | None) -> int:
    """A terminal view like ``nvidia-smi dmon``: one line per device and sample."""
    import time

    from .telemetry import Monitor

    def line(rows: list[dict]) -> None:
        for r in rows:
            if r["device"] == "host":
                text = f"cpu {r['cpu_util_pct']:5.1f}%  proc {r['process_cpu_pct']:5.1f}%  rss {r['rss_bytes'] / 2**20:8.1f} MiB"
            else:
                cell = lambda k, f: "    -" if r.get(k) is None else format(r[k], f)
                mem = "    -" if r.get("mem_used_bytes") is None else f"{r['mem_used_bytes'] / 2**30:5.1f}"
                text = (f"util {cell('gpu_util_pct', '5.1f')}%  mem {mem} GiB  power {cell('power_w', '6.1f')} W  "
                        f"temp {cell('temp_c', '4.0f')} C  sm {cell('sm_clock_mhz', '5.0f')} MHz"
                        + ("  THROTTLED" if r.get("throttled") else ""))
            print(f"{r['t_s']:8.1f}s  {r['device']:<5} {text}", flush=True)

    mon = Monitor(interval=interval, on_sample=line)
    print(f"gpulab monitor: every {interval:g} s; Ctrl-C to stop", flush=True)
    mon.start()
    try:
        end = None if duration is None else time.monotonic() + duration
        while end is None or time.monotonic() < end:
            time.sleep(0.05)
    except KeyboardInterrupt:
        pass
    finally:
        trace = mon.stop()
    if csv:
        print(f"wrote {trace.to_csv(csv)} ({len(trace.frame)} rows)")
    for n in trace.notes:
        print("note:", n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
