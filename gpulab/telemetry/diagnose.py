"""Telemetry -> verdict: the course's bottleneck rules as code, each finding with its evidence.

Sampled evidence first: a rule that reads samples needs at least ``MIN_SAMPLES`` good ones of its device (10:
one second at the default 0.1 s interval); with fewer, the verdict is ``"inconclusive"`` and says how long to
run. Readings that failed (psutil or NVML errors, ``trace.failed_samples``) are named in a finding, a warning
from ``FAILED_SHARE`` of a device's readings on. Phases are timed, not sampled, so the data-wait rule holds on
a run of any length.

GPU rules (NVML rows present):
- GPU busy >= 70% of the time -> healthy;
- GPU mostly idle and host CPU high -> input-bound (more DataLoader workers, preprocessing on GPU/DALI);
- GPU mostly idle and host CPU low -> overhead-bound: per-step Python, launch cost, small batches or host
  syncs; the Monitor cannot tell which of those, ``gl.profile(step).verdict`` can;
- peak memory under half the card -> the batch can grow;
- clocks slowed by heat or hardware protection for a noticeable share of the run -> a "throttled" warning;
  clocks held at the card's power cap -> a "power-capped" note (how a card runs at its power limit, not a fault).
Host rules (always; the only ones without NVML, which never yields a GPU verdict):
- phases named "data..."/"load..."/"input..." >= 30% of the whole run (unmarked time counts) -> input-bound;
  unmarked time >= 30% of the run -> an "unmarked-time" note (mark it, or profile the step);
- host CPU saturated, idle or partly busy: what the cores do (math, data, Python overhead, waiting) host
  metrics cannot tell; ``gl.profile(step).verdict`` names the cause.

Example:
    >>> import pandas as pd
    >>> from gpulab.telemetry.trace import Trace
    >>> f = pd.DataFrame({"t_s": [0.1 * i for i in range(12)], "device": "host", "source": "host",
    ...                   "cpu_util_pct": 98.0, "process_cpu_pct": 96.0})
    >>> diagnose(Trace(f, 0.1, duration_s=1.2)).verdict
    'host-saturated'
    >>> short = diagnose(Trace(f.head(3), 0.1, duration_s=0.3))     # the first 0.3 s only
    >>> short.verdict, short.findings[0].message
    ('inconclusive', 'only 3 good host samples: too few to conclude (at least 10 needed)')
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .._format import html_table
from .._links import see
from .._spans import covered

__all__ = ["HEALTHY_UTIL_PCT", "HIGH_CPU_PCT", "LOW_CPU_PCT", "MIN_SAMPLES", "FAILED_SHARE", "Finding", "Verdict",
           "diagnose"]

HEALTHY_UTIL_PCT = 70.0   # GPU busy at least this share of the time: healthy
HIGH_CPU_PCT = 75.0       # host CPU (all cores) this busy: the host is the limit
LOW_CPU_PCT = 40.0
DATA_SHARE = 0.30         # this share of the whole run waiting for data: input-bound
UNMARKED_SHARE = 0.30     # this share of the run outside any phase: the Monitor cannot say where it went
THROTTLE_SHARE = 0.05
LOW_MEMORY_SHARE = 0.5
MIN_SAMPLES = 10          # good samples of a device before a rule reads its metrics
FAILED_SHARE = 0.10       # this share of a device's readings failed: a warning (below it: a note)


@dataclass(frozen=True)
class Finding:
    level: Literal["ok", "info", "warning"]
    code: str
    message: str
    evidence: str
    advice: str = ""


@dataclass(frozen=True)
class Verdict:
    """The main finding (``verdict``) and every finding with its evidence."""

    verdict: str
    findings: tuple[Finding, ...]
    source: str  # "nvml+host" or "host"

    @property
    def _from(self) -> str:
        return self.source if "profiler" in self.source else f"{self.source} telemetry"

    @property
    def codes(self) -> list[str]:
        return [f.code for f in self.findings]

    def _rows(self) -> list[tuple[str, str, str, str]]:
        mark = {"ok": "[ok]", "info": "[i]", "warning": "[!]"}
        return [(mark[f.level], f.message, f.evidence, f.advice) for f in self.findings]

    def __repr__(self) -> str:
        head = f"Verdict: {self.verdict} (from {self._from})"
        lines = [head]
        for m, msg, ev, adv in self._rows():
            lines.append(f"{m} {msg}\n    evidence: {ev}" + (f"\n    try: {adv}" if adv else ""))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        return html_table(("", "finding", "evidence", "what to try"), self._rows(),
                          caption=f"Verdict: {self.verdict} (from {self._from})")


def _spans(trace: Any) -> list[tuple[str, float, float]]:
    """Each mark as (name, start, end); a point mark lasts until the next mark (as ``Trace.phase_seconds``)."""
    marks = sorted(trace.marks, key=lambda m: m.start_s)
    return [(m.name, m.start_s, m.end_s if m.end_s is not None
             else (marks[i + 1].start_s if i + 1 < len(marks) else trace.duration_s)) for i, m in enumerate(marks)]


def _covered_s(spans: list[tuple[float, float]], run_s: float) -> float:
    """Seconds of ``[0, run_s]`` inside at least one span (overlapping or nested spans counted once)."""
    return covered(spans, 0.0, run_s)


def _data_share(trace: Any) -> tuple[float, float, str] | None:
    """(data share, unmarked share, evidence), both shares of the whole run; None without phases."""
    spans = _spans(trace)
    run_s = trace.duration_s if trace.duration_s > 0 else max((e for _, _, e in spans), default=0.0)
    if not spans or run_s <= 0:
        return None
    per = {k: _covered_s([(a, b) for n, a, b in spans if n == k], run_s) for k in dict.fromkeys(n for n, _, _ in spans)}
    data = _covered_s([(a, b) for n, a, b in spans if n.lower().startswith(("data", "load", "input"))], run_s)
    unmarked = max(0.0, run_s - _covered_s([(a, b) for _, a, b in spans], run_s))
    detail = ", ".join(f"{k} {v:.1f} s ({v / run_s:.0%})" for k, v in per.items())
    detail += f", unmarked {unmarked:.1f} s ({unmarked / run_s:.0%}) of a {run_s:.1f} s run"
    return data / run_s, unmarked / run_s, detail


def _cpu_by_phase(trace: Any, host: Any) -> str:
    """Mean host CPU within each named phase, e.g. "CPU by phase: data 50%, compute 98%"."""
    if host is None or "cpu_util_pct" not in host or not trace.marks:
        return ""
    parts: dict[str, list[float]] = {}
    for name, start, end in _spans(trace):
        sel = host.loc[start:end, "cpu_util_pct"].dropna()   # a first reading has no CPU window yet
        if len(sel):
            parts.setdefault(name, []).append(float(sel.mean()))
    return "CPU by phase: " + ", ".join(f"{k} {sum(v) / len(v):.0f}%" for k, v in parts.items()) if parts else ""


def _sampling_findings(trace: Any) -> list[Finding]:
    """Readings that failed, per device, with the first error."""
    failed = dict(getattr(trace, "failed_by_device", {}) or {})
    total = int(getattr(trace, "failed_samples", 0) or 0)
    if total and not failed:
        failed = {"(unknown device)": total}
    out = []
    for device, n in failed.items():
        good = trace.samples(device) if device in getattr(trace, "devices", ()) else 0
        share = n / (n + good) if n + good else 1.0
        out.append(Finding("warning" if share >= FAILED_SHARE else "info", "failed-samples",
                           f"{n} of {n + good} {device} readings failed ({share:.0%}): the findings below rest on "
                           f"the {good} that succeeded",
                           f"first error: {trace.first_error or 'not recorded'}",
                           "psutil fails on processes or /proc entries it may not read (containers, other users' "
                           "processes), NVML on a GPU that is reset or lost; run `python -m gpulab doctor`"))
    return out


def _too_few(trace: Any, device: str, n: int) -> Finding:
    """The sampled rules of ``device`` are skipped: fewer than MIN_SAMPLES good samples."""
    need_s = MIN_SAMPLES * trace.interval_s
    failing = getattr(trace, "failed_by_device", {}).get(device, 0)
    return Finding("info", "too-few-samples",
                   f"only {n} good {device} samples: too few to conclude (at least {MIN_SAMPLES} needed)",
                   f"{n} samples every {trace.interval_s:g} s over {trace.duration_s:.1f} s"
                   + (f"; {failing} more failed" if failing else ""),
                   f"monitor a run of at least {need_s:.3g} s ({MIN_SAMPLES} samples at interval={trace.interval_s:g}"
                   " s), longer if readings fail; several training steps, not the first ones only")


def _clock_findings(g: str, f: Any) -> list[Finding]:
    """Thermal and hardware slowdowns (a warning) and time at the power cap (a note), from the reason masks when
    the trace has them (a trace recorded when the power cap still counted as a slowdown is judged again)."""
    from .gpu import POWER_CAP_MASK, SLOWDOWN_MASK, slowdown_names

    has = lambda col: col in f and f[col].notna().any()   # noqa: E731
    known = f["throttle_reasons"].dropna().astype(int) if has("throttle_reasons") else None
    if known is not None:
        thr = float((known & SLOWDOWN_MASK).astype(bool).mean())
        capped = float((known & POWER_CAP_MASK).astype(bool).mean())
    else:
        thr, capped = float(f["throttled"].fillna(False).astype(bool).mean()) if "throttled" in f else 0.0, 0.0
    out = []
    if thr >= THROTTLE_SHARE:
        reasons = sorted({n for m in (known if known is not None else ()) for n in slowdown_names(int(m))})
        out.append(Finding("warning", "throttled", f"{g} clocks were slowed by heat or hardware protection "
                           f"{thr:.0%} of the time", "reasons: " + (", ".join(reasons) or "unknown"),
                           "check cooling and airflow, and nvidia-smi -q -d PERFORMANCE for the cause"))
    if capped >= THROTTLE_SHARE:
        ev = "reason: sw_power_cap"
        ev += f"; SM clock mean {f['sm_clock_mhz'].mean():.0f} MHz" if has("sm_clock_mhz") else ""
        ev += f"; power mean {f['power_w'].mean():.0f} W" if has("power_w") else ""
        out.append(Finding("info", "power-capped", f"{g} ran at its power cap {capped:.0%} of the time: the clocks "
                           "its power budget allows, as the card is designed to run", ev,
                           "nothing to fix: a card's power limit is part of its speed"))
    return out


def diagnose(trace: Any) -> Verdict:
    """Apply the rules to a :class:`~gpulab.telemetry.trace.Trace`."""
    findings: list[Finding] = []
    too_few: list[Finding] = []
    host = trace.device_frame("host") if "host" in trace.devices else None
    host_failed = (getattr(trace, "failed_by_device", None) or {}).get("host", 0)
    if (host is not None or host_failed) and (0 if host is None else len(host)) < MIN_SAMPLES:
        too_few.append(_too_few(trace, "host", 0 if host is None else len(host)))
        host = None                       # no claim about the host from a handful of samples
    cpu = float(host["cpu_util_pct"].mean()) if host is not None and "cpu_util_pct" in host else None
    proc = float(host["process_cpu_pct"].mean()) if host is not None and "process_cpu_pct" in host else None
    shares = _data_share(trace)
    share, unmarked, phase_detail = shares if shares is not None else (None, 0.0, "")
    by_phase = _cpu_by_phase(trace, host)
    if by_phase:
        phase_detail = f"{phase_detail}; {by_phase}"
    cpu_ev = f"host CPU mean {cpu:.0f}% of all cores" if cpu is not None else "no host CPU samples"
    if by_phase:
        cpu_ev += f" ({by_phase})"
    gpus = trace.gpus
    verdict = None

    for g in gpus:
        f = trace.device_frame(g)
        if len(f) < MIN_SAMPLES:
            too_few.append(_too_few(trace, g, len(f)))
            continue
        if "gpu_util_pct" not in f:
            findings.append(Finding("info", "gpu-util-missing", f"{g}: NVML gave no utilisation",
                                    "the metric is not supported on this GPU or mode (e.g. MIG)"))
            continue
        util = float(f["gpu_util_pct"].mean())
        ev = f"{g} busy {util:.0f}% of the time (mean of {len(f)} samples); {cpu_ev}"
        if util >= HEALTHY_UTIL_PCT:
            findings.append(Finding("ok", "healthy", f"{g} is kept busy", ev,
                                    "next: raise the work per kernel (mixed precision, larger batch) and check "
                                    "tensor activity, since 100% busy can still be a poorly used GPU"))
            verdict = verdict or "healthy"
        elif cpu is not None and cpu >= HIGH_CPU_PCT:
            findings.append(Finding("warning", "input-bound", f"{g} waits while the host CPU is saturated", ev,
                                    "more DataLoader workers (num_workers), pin_memory, cache decoded data, "
                                    "or move decoding/augmentation to the GPU (DALI)"))
            verdict = verdict or "input-bound"
        elif cpu is None:
            findings.append(Finding("warning", "gpu-idle", f"{g} idles; too few host samples to tell whether it "
                                    "waits for input or for per-step overhead", ev,
                                    "monitor a longer run; gl.profile(step).verdict names the cause"))
            verdict = verdict or "inconclusive"
        else:
            findings.append(Finding("warning", "overhead-bound",
                                    f"{g} idles while the host is not busy either: per-step Python, launch cost, "
                                    "small batches or host syncs; the Monitor cannot tell which of those, "
                                    "gl.profile(step).verdict can", ev,
                                    "by cause: vectorise per-item Python, larger batches, fewer host syncs (.item(), "
                                    ".cpu(), printing in the loop), CUDA graphs or torch.compile for launch cost"))
            verdict = verdict or "overhead-bound"
        if "mem_used_bytes" in f and "mem_total_bytes" in f:
            peak = float(f["mem_used_bytes"].max() / f["mem_total_bytes"].max())
            if peak < LOW_MEMORY_SHARE:
                findings.append(Finding("info", "memory-headroom", f"{g} memory peaked at {peak:.0%} of the card",
                                        f"peak {f['mem_used_bytes'].max() / 2**30:.1f} GiB of "
                                        f"{f['mem_total_bytes'].max() / 2**30:.1f} GiB",
                                        "the batch can grow (gl.find_max_batch_size)"))
        findings += _clock_findings(g, f)

    if share is not None and share >= DATA_SHARE:
        findings.append(Finding("warning", "data-wait", f"{share:.0%} of the run went to loading data",
                                phase_detail, "overlap loading with compute: DataLoader workers, prefetching, "
                                "tf.data AUTOTUNE, or DALI"))
        verdict = verdict or "input-bound"
    elif share is not None:
        findings.append(Finding("ok", "data-wait", f"data loading took {share:.0%} of the run", phase_detail))
        if unmarked >= UNMARKED_SHARE:
            findings.append(Finding("info", "unmarked-time", f"{unmarked:.0%} of the run is unmarked: the Monitor "
                                    "cannot say where it went", phase_detail,
                                    "mark it with mon.mark(...) or mon.phase(...), or profile the step with "
                                    "gl.profile(step)"))

    if not gpus:
        note = "No GPU telemetry (NVML not available): this verdict comes from host metrics only."
        proc_ev = f"{cpu_ev}; this process {proc:.0f}%" if proc is not None else cpu_ev
        if cpu is None and too_few:
            pass                          # too few samples: said below, no host claim
        elif cpu is None:
            findings.append(Finding("info", "no-samples", "nothing was sampled", note))
            verdict = verdict or "no-samples"
        elif cpu >= HIGH_CPU_PCT:
            findings.append(Finding("info", "host-saturated", f"the host CPU is busy ({cpu:.0f}% of all cores)",
                                    proc_ev, "host metrics alone cannot tell whether the cores do useful math, "
                                    "prepare data, or run Python overhead: gl.profile(step).attribution shows where "
                                    "the step's time goes (by phase and operator class, and outside every operator) "
                                    "and gl.profile(step).verdict names the cause, with the step's share of the "
                                    "machine's measured compute and memory ceilings"))
            verdict = verdict or "host-saturated"
        elif cpu <= LOW_CPU_PCT:
            findings.append(Finding("warning", "host-idle", f"the host CPU is mostly idle ({cpu:.0f}% of all cores)",
                                    proc_ev, "the work waits (I/O, sleep, locks, a GPU) or runs on one thread; "
                                    "host metrics cannot tell these apart: gl.profile(step) shows where the step's "
                                    "time goes, torch.get_num_threads() how many threads the math may use"))
            verdict = verdict or "host-idle"
        else:
            findings.append(Finding("info", "host-partly-busy", f"the host CPU is partly busy ({cpu:.0f}% of all "
                                    "cores)", cpu_ev, f"part of the run is serial or waiting (Amdahl's law: "
                                    f"{see('amdahl')}); host metrics cannot say which part: gl.profile(step).attribution shows "
                                    "where the step's time goes and gl.profile(step).verdict names the cause"))
            verdict = verdict or "host-partly-busy"
        findings.append(Finding("info", "no-gpu-telemetry", "GPU verdicts need NVML", note))
    if too_few and verdict is None:
        verdict = "inconclusive"
    findings = _sampling_findings(trace) + too_few + findings
    return Verdict(verdict or "unknown", tuple(findings), "nvml+host" if gpus else "host")
