"""Holistic Trace Analysis (HTA, Meta's ``HolisticTraceAnalysis`` package) on ``torch.profiler`` traces: where each
rank's GPU time went. :func:`trace_breakdown` reads one run's traces (a :class:`ProfileSummary`, one trace file, a
folder of them or a list, one per rank) and returns a :class:`TraceBreakdown`: per rank, the share of the profiled
time the GPU computed, moved memory or communicated, or sat idle, the idle time split as HTA splits it (waiting for
the host to queue work, gaps between back-to-back kernels, other waits such as events), how much communication
overlapped computation, and the kernel types' shares. HTA reads GPU kernels only: a trace recorded without a GPU is
refused with the reason (``ProfileSummary.attribution`` splits a CPU step's time).

HTA is optional (``pip install HolisticTraceAnalysis``, the ``gpulab[hta]`` extra); it is imported on the first call.
The traces are parsed in this process: HTA's own front end (``TraceAnalysis``) forks a pool of parsers, and a fork of
a notebook's kernel whose threads hold locks can hang. HTA's log lines and warnings are kept quiet for the call, and
the logging and warning settings are left as they were.

Example:
    >>> trace_breakdown("no-such-folder")
    Traceback (most recent call last):
    ...
    FileNotFoundError: traces 'no-such-folder': no such file or folder; give gl.profile(...)'s summary, its trace_path, or a folder of one run's traces (one per rank)
"""
from __future__ import annotations

import contextlib
import gzip
import json
import logging
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from .._check import flag, install_hint, positive
from .._format import TableView

__all__ = ["RankTime", "TraceBreakdown", "trace_breakdown"]

_DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")      # what a GPU ran, as kineto names it in the trace


@dataclass(frozen=True)
class RankTime:
    """One rank's GPU time over its profiled steps, in seconds: ``span_s`` from its first kernel to its last, split into
    ``compute_s`` (computing kernels), ``non_compute_s`` (memory copies and sets, communication) and ``idle_s`` (no
    kernel running); the idle time of its streams split into ``host_wait_s`` (the host had queued nothing), ``kernel_wait_s``
    (gaps between back-to-back kernels, under HTA's ``consecutive_kernel_delay``) and ``other_wait_s`` (waits on events,
    other streams or communication). ``comm_overlap``: the share of its communication time during which it also
    computed (None: no communication kernels)."""

    rank: int
    span_s: float
    idle_s: float
    compute_s: float
    non_compute_s: float
    host_wait_s: float
    kernel_wait_s: float
    other_wait_s: float
    comm_overlap: float | None = None

    def share(self, part: str) -> float:
        """``"idle"``, ``"compute"`` or ``"non_compute"`` as a share of the span; ``"host_wait"``, ``"kernel_wait"``
        or ``"other_wait"`` as a share of the streams' idle time (0 when they were never idle)."""
        if part in ("idle", "compute", "non_compute"):
            return getattr(self, f"{part}_s") / self.span_s if self.span_s > 0 else 0.0
        if part in ("host_wait", "kernel_wait", "other_wait"):
            waits = self.host_wait_s + self.kernel_wait_s + self.other_wait_s
            return getattr(self, f"{part}_s") / waits if waits > 0 else 0.0
        raise ValueError(f"part must be one of 'idle', 'compute', 'non_compute', 'host_wait', 'kernel_wait', "
                         f"'other_wait', got {part!r}")

    def reading(self) -> str:
        """What this rank's split says, in one sentence rendered from its numbers."""
        parts = {"idle": self.share("idle"), "computing": self.share("compute"),
                 "copying memory or communicating": self.share("non_compute")}
        top = max(parts, key=parts.get)
        head = f"rank {self.rank}: the GPU was {top} {parts[top]:.0%} of its profiled time"
        if top != "idle":
            if top == "computing":
                return head + ": the kernels themselves are the time; make them faster (16-bit math, fusion, larger ones)"
            return head + ": copies and collectives are the time; overlap them with computation or move fewer bytes"
        waits = {"host_wait": ("waiting for the host to queue work: the CPU side (data, Python, launches) sets the pace; "
                               "profile the host's phases"),
                 "kernel_wait": ("in gaps between back-to-back kernels: many tiny kernels; fuse them (torch.compile) or "
                                 "replay them as a CUDA graph"),
                 "other_wait": "waiting on events, other streams or communication: look for syncs and collectives"}
        why = max(waits, key=self.share)
        return head + f", {self.share(why):.0%} of its streams' idle time " + waits[why]


@dataclass(frozen=True, repr=False)
class TraceBreakdown(TableView):
    """HTA's split of one run's GPU time, rank by rank (:func:`trace_breakdown`): ``ranks`` (:class:`RankTime`), the
    kernel types' total time over the ranks (``kernel_types``: (type, seconds, share)) and the longest kernels
    (``top_kernels``: (type, name, seconds over the ranks)). HTA's kernel types are ``COMPUTATION``,
    ``COMMUNICATION``, ``MEMORY`` and, for the time both ran at once, ``COMPUTATION overlapping COMMUNICATION``.
    ``to_dataframe()`` gives one row per rank."""

    files: Mapping[int, str]
    ranks: tuple[RankTime, ...]
    kernel_types: tuple[tuple[str, float, float], ...] = ()
    top_kernels: tuple[tuple[str, str, float], ...] = ()
    title: str = "Holistic Trace Analysis: where the GPU's time went"

    def rank(self, rank: int = 0) -> RankTime:
        """The :class:`RankTime` of ``rank``."""
        for r in self.ranks:
            if r.rank == rank:
                return r
        raise KeyError(f"rank {rank!r} is not in these traces (ranks {[r.rank for r in self.ranks]})")

    @property
    def reading(self) -> str:
        """Each rank's :meth:`RankTime.reading`, one line each."""
        return "\n".join(r.reading() for r in self.ranks)

    def to_dataframe(self) -> Any:
        import pandas as pd

        rows = [{"rank": r.rank, "span_s": r.span_s, "idle_share": r.share("idle"), "compute_share": r.share("compute"),
                 "non_compute_share": r.share("non_compute"), "host_wait_share_of_idle": r.share("host_wait"),
                 "kernel_wait_share_of_idle": r.share("kernel_wait"), "other_wait_share_of_idle": r.share("other_wait"),
                 "comm_overlap": r.comm_overlap} for r in self.ranks]
        return pd.DataFrame(rows).set_index("rank")

    def _columns(self) -> tuple[Sequence[str], list[Sequence[str]], str]:
        header = ["rank", "span", "computing", "copies/comm", "idle", "idle: host wait", "idle: between kernels",
                  "idle: other", "comm overlapped"]
        rows = [[str(r.rank), f"{r.span_s * 1e3:.3g} ms", f"{r.share('compute'):.0%}", f"{r.share('non_compute'):.0%}",
                 f"{r.share('idle'):.0%}", f"{r.share('host_wait'):.0%}", f"{r.share('kernel_wait'):.0%}",
                 f"{r.share('other_wait'):.0%}", "no comm" if r.comm_overlap is None else f"{r.comm_overlap:.0%}"]
                for r in self.ranks]
        kinds = ", ".join(f"{kind.lower()} {share:.0%}" for kind, _, share in self.kernel_types)
        footer = (f"kernel time by type: {kinds}. " if kinds else "") + self.reading
        return header, rows, footer


def trace_breakdown(traces: Any, *, include_last_step: bool = True, kernel_gap_us: float = 30.0) -> TraceBreakdown:
    """Holistic Trace Analysis of one run's ``torch.profiler`` traces, one per rank: ``traces`` is a
    :class:`~gpulab.profiling.ProfileSummary` (its ``trace_path``), a trace file (``.json`` or ``.json.gz``), a
    folder of them or a list. Each trace's rank is read from its ``distributedInfo`` (0 if absent); two traces of the
    same rank are refused. ``include_last_step``: keep the last ``ProfilerStep`` (HTA leaves it out by default, as
    it may be cut short; :func:`gpulab.profile` records every step whole). ``kernel_gap_us``: gaps between
    back-to-back kernels shorter than this are launch gaps, not idleness of another cause (HTA's
    ``consecutive_kernel_delay``, in microseconds as the trace counts them)."""
    flag("include_last_step", include_last_step)
    positive("kernel_gap_us", kernel_gap_us, allow_zero=True, unit="microseconds")
    files = {r: str(p) for r, p in _rank_files(traces).items()}
    Trace, Breakdown, Communication = _import_hta()
    logger, saved_level = logging.getLogger("hta"), logging.getLogger("hta").level
    try:
        logger.setLevel(logging.ERROR)
        with warnings.catch_warnings(), _wide_correlations():
            warnings.simplefilter("ignore")
            t = Trace(trace_files=files, trace_dir=str(Path(next(iter(files.values()))).parent))
            t.load_traces(include_last_profiler_step=include_last_step, use_multiprocessing=False)
            temporal = Breakdown.get_temporal_breakdown(t, visualize=False)
            idle = {r: Breakdown.get_idle_time_breakdown(t, int(kernel_gap_us), r, None, False, False, False)[0]
                    for r in files}
            kinds, top = Breakdown.get_gpu_kernel_breakdown(t, False, 0.8, 10, True, "")
            overlap = Communication.get_comm_comp_overlap(t, False) if _has_comm(kinds) else None
    except Exception as e:
        raise RuntimeError(f"Holistic Trace Analysis could not read {sorted(files.values())}: "
                           f"{type(e).__name__}: {e}") from e
    finally:
        logger.setLevel(saved_level)
    return TraceBreakdown(files=files,
                          ranks=tuple(_rank_time(r, temporal, idle[r], overlap) for r in sorted(files)),
                          kernel_types=_kinds(kinds), top_kernels=_top(top))


def _import_hta() -> tuple[Any, Any, Any]:
    """HTA's trace loader and the two analyzers :func:`trace_breakdown` calls, or one ImportError with the install."""
    try:
        from hta.analyzers.breakdown_analysis import BreakdownAnalysis
        from hta.analyzers.communication_analysis import CommunicationAnalysis
        from hta.common.trace import Trace
    except ImportError as e:
        raise ImportError(f"gl.profiling.trace_breakdown needs Holistic Trace Analysis, which is not installed: "
                          f"{install_hint('hta')} ({e})") from e
    return Trace, BreakdownAnalysis, CommunicationAnalysis


@contextlib.contextmanager
def _wide_correlations() -> Iterator[None]:
    """HTA 0.5 links each launch to its kernel by writing row indices into a column copied from the ``correlation``
    column, which its parser has narrowed to the smallest integer type holding the correlation ids (int8 for a trace
    with fewer than 128 launches, int16 under 32,768). Under pandas 3 writing a larger index there raises ("Invalid
    value ... for dtype 'int8'"; pandas 2 widened the column with a warning): HTA's issue #91. For the call, the two
    columns are widened to int64 before HTA links them; HTA's function is put back after."""
    import hta.common.trace as trace_module

    original = trace_module.transform_correlation_to_index

    def widened(df: Any, symbol_table: Any) -> Any:
        for column in ("index", "correlation"):
            if column in df.columns:
                df[column] = df[column].astype("int64")
        return original(df, symbol_table)

    trace_module.transform_correlation_to_index = widened
    try:
        yield
    finally:
        trace_module.transform_correlation_to_index = original


def _rank_files(traces: Any) -> dict[int, Path]:
    """rank -> trace file of ``traces``, each checked: it exists, is a JSON trace, and holds what a GPU ran."""
    where = getattr(traces, "trace_path", traces) if not isinstance(traces, (str, os.PathLike)) else traces
    if hasattr(traces, "trace_path") and where is None:
        raise ValueError(f"profile {getattr(traces, 'label', '')!r} wrote no trace file: profile with "
                         "gl.profile(..., trace=True) (the default)")
    if isinstance(where, (str, os.PathLike)):
        if not str(where).strip():
            raise ValueError(f"traces must name a trace file or a folder of traces, got {str(where)!r}")
        p = Path(where)
        if p.is_dir():
            paths = sorted(q for q in p.iterdir() if q.name.endswith((".json", ".json.gz")))
            if not paths:
                raise ValueError(f"traces {str(where)!r}: the folder holds no .json or .json.gz trace")
        elif p.exists():
            paths = [p]
        else:
            raise FileNotFoundError(f"traces {str(where)!r}: no such file or folder; give gl.profile(...)'s summary, "
                                    "its trace_path, or a folder of one run's traces (one per rank)")
    elif isinstance(where, Sequence) and where and all(isinstance(q, (str, os.PathLike)) for q in where):
        paths = [Path(q) for q in where]
    else:
        raise TypeError(f"traces must be a gl.profile summary, a trace file, a folder of traces or a list of trace "
                        f"files, got {traces!r}")
    out: dict[int, Path] = {}
    for p in paths:
        rank, device_events = _scan(p)
        if not device_events:
            raise ValueError(f"traces {str(p)!r} hold no GPU kernels (recorded without a GPU): Holistic Trace Analysis "
                             "splits a GPU's time; on a CPU, read the profile's attribution (ProfileSummary.attribution)")
        if rank in out:
            raise ValueError(f"traces {str(out[rank])!r} and {str(p)!r} are both rank {rank}: give one run's traces, "
                             "one per rank")
        out[rank] = p
    return out


def _scan(path: Path) -> tuple[int, int]:
    """(rank, events a GPU ran) of one trace file; a clear error for a file that is not a trace."""
    if not path.name.endswith((".json", ".json.gz")):
        raise ValueError(f"{path} is not a torch.profiler trace (a .json or .json.gz file)")
    try:
        with (gzip.open(path, "rt") if path.name.endswith(".gz") else open(path)) as f:
            doc = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"trace {str(path)!r}: no such file") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a readable torch.profiler trace: {type(e).__name__}: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path} is not a torch.profiler trace: it has no traceEvents list")
    info = doc.get("distributedInfo") or {}
    rank = info.get("rank", 0) if isinstance(info, dict) else 0
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise ValueError(f"{path}: distributedInfo.rank is {rank!r}, not a rank")
    n = sum(1 for e in doc["traceEvents"] if isinstance(e, dict) and e.get("cat") in _DEVICE_CATS)
    return rank, n


def _has_comm(kinds: Any) -> bool:
    """Whether any rank ran a collective (alone, or as ``COMPUTATION overlapping COMMUNICATION``)."""
    return bool((kinds["kernel_type"].astype(str).str.contains("COMMUNICATION") & (kinds["sum"] > 0)).any())


def _rank_time(rank: int, temporal: Any, idle: Any, overlap: Any) -> RankTime:
    """One rank's :class:`RankTime` from HTA's frames (HTA keeps the trace's microseconds)."""
    row = temporal.loc[temporal["rank"] == rank].iloc[0]
    us = {c: float(row[f"{c}_time(us)"]) for c in ("kernel", "idle", "compute", "non_compute")}
    us = {c: v if math.isfinite(v) else 0.0 for c, v in us.items()}
    waits = {c: float(idle.loc[idle["idle_category"] == c, "idle_time"].sum()) / 1e6
             for c in ("host_wait", "kernel_wait", "other")}
    comm = None
    if overlap is not None:
        hit = overlap.loc[overlap["rank"] == rank, "comp_comm_overlap_pctg"]
        comm = float(hit.iloc[0]) / 100.0 if len(hit) else None
        comm = comm if comm is not None and math.isfinite(comm) else None      # NaN: this rank ran no collective
    return RankTime(rank=rank, span_s=us["kernel"] / 1e6, idle_s=us["idle"] / 1e6, compute_s=us["compute"] / 1e6,
                    non_compute_s=us["non_compute"] / 1e6, host_wait_s=waits["host_wait"],
                    kernel_wait_s=waits["kernel_wait"], other_wait_s=waits["other"], comm_overlap=comm)


def _kinds(kinds: Any) -> tuple[tuple[str, float, float], ...]:
    return tuple((str(k), float(s) / 1e6, float(p) / 100.0)
                 for k, s, p in zip(kinds["kernel_type"], kinds["sum"], kinds["percentage"]))


def _top(top: Any) -> tuple[tuple[str, str, float], ...]:
    if top is None or not len(top):
        return ()
    column = "sum (us)" if "sum (us)" in top.columns else "sum"
    summed = top.groupby(["kernel_type", "name"], as_index=False)[column].sum().sort_values(column, ascending=False)
    return tuple((str(k), str(n), float(s) / 1e6) for k, n, s in zip(summed["kernel_type"], summed["name"],
                                                                       summed[column]))
