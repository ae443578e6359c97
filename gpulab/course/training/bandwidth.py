"""Lesson 02's host-to-device bandwidth sweep: copies of growing size, pageable and pinned, against ceilings.

:func:`transfer_sweep` times one copy per size and kind of host memory with the measuring function it is given
(``gl.transfer.measure_transfer``), and returns a :class:`TransferSweep`: a table of time and payload
bandwidth per copy, each as a share of the ceilings (on a CUDA device the published rate of its PCIe link, read from
NVML where it can be, else the published links no copy exceeded; elsewhere the same copy far beyond the caches), and
a plot of bandwidth against size.

Example:
    >>> import gpulab as gl
    >>> sweep = transfer_sweep(gl.transfer.measure_transfer, [4096, 65536], device="cpu", min_run_time=0.02,
    ...                        ceilings={"host copy": 10e9})
    >>> [(p.nbytes, p.pinned) for p in sweep.points]
    [(4096, False), (65536, False)]
    >>> sweep.best_bytes_per_s(65536) > 0
    True
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from ..._check import checked, positive, whole
from ..._format import TableView, fmt_bytes, fmt_number
from ...reference import published

__all__ = ["TransferPoint", "TransferSweep", "transfer_sweep", "default_ceilings", "pcie_link_ceiling"]

MiB = 2**20


@dataclass(frozen=True)
class TransferPoint:
    """One timed copy size and kind of host memory. ``best_bytes_per_s`` is the payload over the fastest run
    (the one least disturbed by other programs); ``measurement`` is what the measuring function returned.

    Example:
        >>> import gpulab as gl
        >>> p = transfer_sweep(gl.transfer.measure_transfer, [4096], device="cpu", min_run_time=0.02,
        ...                    ceilings={"host copy": 10e9}).points[0]
        >>> p.nbytes, p.pinned, p.min_s <= p.median_s
        (4096, False, True)
    """

    nbytes: int
    pinned: bool
    median_s: float
    min_s: float
    best_bytes_per_s: float
    noisy: bool
    measurement: Any


@dataclass(frozen=True, repr=False)
class TransferSweep(TableView):
    """Copies of several sizes, pageable (and pinned), with their share of each ceiling (immutable).

    Example:
        >>> import gpulab as gl
        >>> sweep = transfer_sweep(gl.transfer.measure_transfer, [4096], device="cpu", min_run_time=0.02,
        ...                        ceilings={"host copy": 10e9})
        >>> repr(sweep).splitlines()[0], sweep.pinned_speedup(4096)
        ('Copy bandwidth vs size (host copy, no GPU)', None)
    """

    points: tuple[TransferPoint, ...]
    ceilings: tuple[tuple[str, float], ...]      # (name, bytes per second)
    device: str
    title: str = "Copy bandwidth vs size"
    link: str = ""          # where the ceilings came from: the PCIe link NVML read, inferred from the copies, none

    @property
    def sizes_bytes(self) -> tuple[int, ...]:
        return tuple(sorted({p.nbytes for p in self.points}))

    def point(self, nbytes: int, pinned: bool = False) -> TransferPoint:
        for p in self.points:
            if p.nbytes == nbytes and p.pinned == pinned:
                return p
        have = sorted({(p.nbytes, p.pinned) for p in self.points})
        raise KeyError(f"no copy of {nbytes} bytes with pinned={pinned} in this sweep; it has (bytes, pinned) {have}")

    def measurement(self, nbytes: int, pinned: bool = False) -> Any:
        """The measurement of the copy of ``nbytes`` from pageable (or ``pinned``) host memory."""
        return self.point(nbytes, pinned).measurement

    def best_bytes_per_s(self, nbytes: int, pinned: bool = False) -> float:
        """Payload bytes per second of the fastest run of that copy."""
        return self.point(nbytes, pinned).best_bytes_per_s

    def pinned_speedup(self, nbytes: int) -> float | None:
        """Pageable time / pinned time (fastest runs) at ``nbytes``; None when pinned memory was not measured."""
        if not any(p.pinned for p in self.points):
            return None
        return self.point(nbytes).min_s / self.point(nbytes, pinned=True).min_s

    def to_dataframe(self) -> Any:
        """One row per copy: bytes, pinned, median_s, best_s, best_bytes_per_s, noisy, and ``share_of_<name>``
        (a fraction) per ceiling."""
        import pandas as pd

        rows = []
        for p in self.points:
            row = {"bytes": p.nbytes, "pinned": p.pinned, "median_s": p.median_s, "best_s": p.min_s,
                   "best_bytes_per_s": p.best_bytes_per_s, "noisy": p.noisy}
            row.update({f"share_of_{name}": p.best_bytes_per_s / c for name, c in self.ceilings})
            rows.append(row)
        return pd.DataFrame(rows)

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["size", "host memory", "median (us)", "best (us)", "best (GB/s)"]
        header += [f"% of {name}" for name, _ in self.ceilings]
        rows = []
        for p in self.points:
            r = [fmt_bytes(p.nbytes) + (" *" if p.noisy else ""), "pinned" if p.pinned else "pageable",
                 fmt_number(p.median_s * 1e6), fmt_number(p.min_s * 1e6), fmt_number(p.best_bytes_per_s / 1e9)]
            r += [f"{100 * p.best_bytes_per_s / c:.0f}%" for _, c in self.ceilings]
            rows.append(r)
        ceilings = ", ".join(f"{name} {fmt_number(c / 1e9)} GB/s" for name, c in self.ceilings)
        notes = [f"payload per copy on {self.device}; best = fastest run (least disturbed)", f"ceilings: {ceilings}"]
        notes += [f"link: {self.link}"] if self.link else []
        if any(p.noisy for p in self.points):
            notes.append("* noisy: re-run before trusting small differences")
        return header, rows, "; ".join(notes)

    def plot(self, ax: Any = None) -> Any:
        """Payload GB/s (best run) against copy size, one line per kind of host memory, the ceilings dashed;
        returns the matplotlib Axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 3.6))
        sizes = self.sizes_bytes
        for pinned in sorted({p.pinned for p in self.points}):
            part = sorted((p for p in self.points if p.pinned == pinned), key=lambda p: p.nbytes)
            ax.plot([p.nbytes for p in part], [p.best_bytes_per_s / 1e9 for p in part], "o-",
                    label="pinned" if pinned else "pageable")
        for name, c in self.ceilings:
            ax.axhline(c / 1e9, ls="--", lw=1, color="gray")
            ax.annotate(name, (sizes[0], c / 1e9), va="bottom", fontsize=8, color="gray")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [fmt_bytes(n) for n in sizes])
        ax.minorticks_off()
        ax.set_xlabel("bytes per copy")
        ax.set_ylabel("GB/s (payload, best run)")
        ax.set_ylim(bottom=0)                                 # rates from 0: a dip reads as its true size
        ax.set_title(self.title)
        ax.legend()
        ax.figure.tight_layout()
        return ax


def _kind(device: Any) -> str:
    t = getattr(device, "type", None)
    return t if isinstance(t, str) else str(device).split(":")[0]


def _cuda_index(device: Any) -> int:
    index = None if isinstance(device, str) else getattr(device, "index", None)     # a torch.device's
    if index is None and ":" in str(device):
        index = int(str(device).split(":", 1)[1])
    if index is None:
        import torch

        try:
            index = torch.cuda.current_device()
        except (RuntimeError, AssertionError):      # CUDA not initialisable here: NVML's first visible GPU
            index = 0
    return int(index)


def pcie_link_ceiling(device: Any) -> tuple[str, float] | str:
    """The PCIe link of the CUDA ``device`` read from NVML (the generation and width it can run at, the GPU's and the
    slot's lower) as ``(name, bytes per second per direction)``: the published x16 rate of that generation, scaled to
    its lanes. Where NVML gives no link (no NVML, a MIG slice, a virtual GPU) or gpulab has no published rate for
    its generation, a text saying why.

    Example:
        >>> pcie_link_ceiling("cpu")
        'not available on a cpu device: no GPU, no PCIe link to read'
    """
    kind = _kind(device)
    if kind != "cuda":
        return f"not available on a {kind} device: no GPU, no PCIe link to read"
    from ...telemetry import nvml

    link = nvml.pcie_link(_cuda_index(device))
    if link is None:
        st = nvml.status()
        return ("NVML read no PCIe link for this GPU" if st.available else f"NVML is not available ({st.error})")
    if link.generation not in (3, 4, 5):
        return f"NVML read {link}, a generation gpulab has no published rate for"
    x16 = published(f"pcie-gen{link.generation}-x16").low * 1e9
    return f"PCIe Gen{link.generation} x{link.width} (NVML)", x16 * link.width / 16


def _link_text(device: Any, read: tuple[str, float] | str) -> str:
    if isinstance(read, tuple):
        from ...telemetry import nvml

        return f"read from NVML: {nvml.pcie_link(_cuda_index(device))}"
    return read


@checked(device="devspec")
def default_ceilings(measure: Callable[..., Any], device: Any, *, ceiling_bytes: int = 256 * MiB,
                     min_run_time: float = 0.3) -> dict[str, float]:
    """The ceilings a copy to ``device`` is read against, in bytes per second: on a CUDA device the published
    per-direction rate of its PCIe link where NVML reads the link (:func:`pcie_link_ceiling`), else the rates of
    PCIe Gen3, Gen4 and Gen5 x16 links (T4; A100 PCIe and L4; H100); elsewhere the same single-threaded copy at
    ``ceiling_bytes`` (far beyond the CPU's caches), timed now with ``measure``, fastest run.

    Example:
        >>> ceilings = default_ceilings(None, "cuda")      # no NVML here: the published links
        >>> "PCIe Gen3 x16" not in ceilings or round(ceilings["PCIe Gen3 x16"] / 1e9, 2) == 15.75
        True
    """
    if _kind(device) == "cuda":
        read = pcie_link_ceiling(device)
        if isinstance(read, tuple):
            return {read[0]: read[1]}
        return {f"PCIe {g} x16": published(f"pcie-{g.lower()}-x16").low * 1e9 for g in ("Gen3", "Gen4", "Gen5")}
    if not callable(measure):
        raise TypeError(f"measure must be a function like gl.transfer.measure_transfer, got {measure!r}")
    m = measure(whole("ceiling_bytes", ceiling_bytes), device=device, min_run_time=min_run_time)
    return {"host copy ceiling": m.bytes_moved / m.min_s}


def _fit_ceilings(ceilings: dict[str, float], fastest: float, kind: str) -> dict[str, float]:
    """Default ceilings no copy of the sweep exceeds (a share of a ceiling is never above 100%): on CUDA the links
    slower than a copy that was measured are not this card's link and are dropped (the fastest link stays); on
    other devices, when a copy small enough to stay in the CPU's caches beat the copy from memory, the ceiling
    is the fastest copy measured."""
    if kind == "cuda":
        kept = {name: c for name, c in ceilings.items() if c >= fastest}
        return kept or dict([max(ceilings.items(), key=lambda item: item[1])])
    if all(c >= fastest for c in ceilings.values()):
        return ceilings
    return {"fastest copy measured": fastest}


@checked(device="device")
def transfer_sweep(measure: Callable[..., Any], sizes_bytes: Sequence[int], *, device: Any = None,
                   pinned: Sequence[bool] | None = None, ceilings: Mapping[str, float] | None = None,
                   min_run_time: float = 0.15, title: str | None = None) -> TransferSweep:
    """Time a copy of every size in ``sizes_bytes`` from pageable and (on CUDA) pinned host memory to ``device``.

    Args:
        measure: ``measure(nbytes, pinned=..., device=..., min_run_time=...)`` returning a measurement with
            ``median_s``, ``min_s``, ``bytes_moved`` (the payload) and ``noisy``: ``gl.transfer.measure_transfer``.
        device: where the copies go (default: the lesson's device, :func:`gpulab.device`).
        pinned: which kinds of host memory to time; default ``(False, True)`` on CUDA, ``(False,)`` elsewhere
            (pinned memory is a service of the CUDA driver).
        ceilings: name -> bytes per second to read each copy against; default :func:`default_ceilings`, keeping
            only ceilings that no copy of the sweep exceeds (links slower than a measured copy are not this card's;
            on a CPU, copies that stay in the caches can beat the copy from memory: then the fastest copy is the
            ceiling).

    Example:
        >>> import gpulab as gl
        >>> sweep = transfer_sweep(gl.transfer.measure_transfer, [4096, 65536], device="cpu", min_run_time=0.02,
        ...                        ceilings={"host copy": 10e9})
        >>> sweep.sizes_bytes, [name for name, _ in sweep.ceilings]
        ((4096, 65536), ['host copy'])
    """
    if not callable(measure):
        raise TypeError(f"measure must be a function like gl.transfer.measure_transfer, got {measure!r}")
    if isinstance(sizes_bytes, (str, bytes)) or not isinstance(sizes_bytes, Sequence) or not sizes_bytes:
        raise ValueError(f"sizes_bytes must be a non-empty list of byte counts, got {sizes_bytes!r}")
    sizes = [whole("sizes_bytes entry", n) for n in sizes_bytes]
    if len(set(sizes)) != len(sizes):
        raise ValueError(f"sizes_bytes has repeated sizes: {sizes}")
    positive("min_run_time", min_run_time, unit="seconds")
    if device is None:
        from ...system import device as best_device

        device = best_device()
    kind = _kind(device)
    kinds = tuple(pinned) if pinned is not None else ((False, True) if kind == "cuda" else (False,))
    if not kinds or any(not isinstance(k, bool) for k in kinds) or len(set(kinds)) != len(kinds):
        raise ValueError(f"pinned must list True and/or False once each, got {pinned!r}")
    chosen = ceilings is None
    read = pcie_link_ceiling(device)
    if chosen:
        ceilings = default_ceilings(measure, device)
    if not isinstance(ceilings, Mapping):
        raise TypeError(f"ceilings must map a name to bytes per second, got {ceilings!r}")
    for name, c in ceilings.items():
        positive(f"ceilings[{name!r}]", c, unit="bytes per second")
    points = []
    for p in kinds:
        for n in sizes:
            m = measure(n, pinned=p, device=device, min_run_time=min_run_time)
            if not m.min_s > 0:
                raise ValueError(f"measure returned a fastest run of {m.min_s!r} s for {n} bytes: not a time")
            moved = getattr(m, "bytes_moved", None) or n
            best = moved / m.min_s
            points.append(TransferPoint(n, p, float(m.median_s), float(m.min_s), best, bool(getattr(m, "noisy", False)),
                                        m))
    if chosen:
        ceilings = _fit_ceilings(dict(ceilings), max(p.best_bytes_per_s for p in points), kind)
    where = f"host to {kind}" if kind != "cpu" else "host copy, no GPU"
    link = _link_text(device, read)
    if chosen and kind == "cuda" and not isinstance(read, tuple):
        link += "; the ceiling is inferred instead: the slowest published link no copy exceeded"
    return TransferSweep(tuple(points), tuple((str(k), float(v)) for k, v in ceilings.items()), str(device),
                         title or f"Copy bandwidth vs size ({where})", link)
