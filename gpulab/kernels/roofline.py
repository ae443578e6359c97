"""Kernels on the roofline: where each kernel sits (FLOPs per byte it moves), what a GPU's datasheet predicts
for it, and - when it ran compiled on a GPU - what it achieved as a share of the measured ceilings.

Example:
    >>> from gpulab.kernels import KernelWork, kernel_roofline
    >>> t = kernel_roofline([KernelWork("add", flops=1e6, bytes_moved=12e6)], gpu="T4")
    >>> t.rows[0].bound, round(t.rows[0].predicted_s * 1e6, 1)          # 12 MB at 320 GB/s
    ('memory', 37.5)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .._format import fmt_bytes, fmt_rate, fmt_seconds, html_table, text_table

__all__ = ["KernelWork", "KernelPoint", "KernelRoofline", "kernel_roofline"]


@dataclass(frozen=True)
class KernelWork:
    """One kernel's work per launch: ``flops`` and ``bytes_moved`` (count them, or use
    :func:`gpulab.kernels.traffic`), with its :class:`gpulab.Measurement` when it was timed."""

    label: str
    flops: float
    bytes_moved: float
    measurement: Any = None

    def __post_init__(self) -> None:
        from .._check import positive, text
        from ..timing import Measurement

        text("label", self.label, empty=False)
        positive("flops", self.flops, allow_zero=True, unit="FLOPs per launch")
        positive("bytes_moved", self.bytes_moved, unit="bytes per launch")
        if self.measurement is not None and not isinstance(self.measurement, Measurement):
            raise TypeError(f"measurement must be a gl.Measurement (gl.kernels.bench_kernel's) or None, got "
                            f"{self.measurement!r:.60}")


@dataclass(frozen=True)
class KernelPoint:
    """A kernel placed on the roofline of ``gpu`` (datasheet) and, when measured compiled, on this machine's."""

    label: str
    flops: float
    bytes_moved: float
    intensity: float                  # FLOPs per byte
    bound: str                        # "memory" or "compute" on the datasheet roofline of the GPU
    predicted_s: float                # max(flops / fp32 peak, bytes / bandwidth) at the GPU's datasheet figures
    measured_s: float | None          # median per launch, compiled on a GPU only (None when simulated)
    bandwidth_share: float | None     # achieved bytes/s as a share of the measured (capped) bandwidth ceiling
    flops_share: float | None


@dataclass(frozen=True)
class KernelRoofline:
    """Kernels on the roofline of ``gpu`` (datasheet figures) and of this machine (measured ceilings)."""

    gpu: str
    peak_flops: float
    bandwidth_bytes_per_s: float
    rows: tuple[KernelPoint, ...]
    note: str

    def _cells(self) -> list[tuple[str, ...]]:
        pct = lambda x: "N/A" if x is None else f"{x:.0%}"   # noqa: E731
        return [(p.label, f"{p.intensity:.3g}", fmt_bytes(p.bytes_moved), p.bound, fmt_seconds(p.predicted_s),
                 fmt_seconds(p.measured_s), pct(p.bandwidth_share), pct(p.flops_share)) for p in self.rows]

    def _header(self) -> list[str]:
        return ["kernel", "FLOP/byte", "moved", f"bound on {self.gpu}", f"predicted on {self.gpu}", "measured here",
                "% of bandwidth", "% of FLOP/s"]

    def __repr__(self) -> str:
        return text_table(self._header(), self._cells()) + f"\n{self.note}"

    def _repr_html_(self) -> str:
        return html_table(self._header(), self._cells(), caption=self.note)

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([p.__dict__ for p in self.rows]).set_index("label")

    def plot(self, ax: Any = None) -> Any:
        """The kernels on the datasheet roofline of the GPU (and, for measured kernels, at their achieved FLOP/s);
        kernels without FLOPs have no place on a log-log plot and are left out."""
        from ..plots import plot_roofline

        points = []
        for p in self.rows:
            if p.intensity <= 0:                       # no FLOPs: nowhere on a log-log roofline
                continue
            if p.measured_s:
                points.append((f"{p.label} (measured)", p.intensity, p.flops / p.measured_s))
            else:
                points.append((f"{p.label} (predicted)", p.intensity,
                               min(self.peak_flops, p.intensity * self.bandwidth_bytes_per_s)))
        ax = plot_roofline(self.peak_flops, self.bandwidth_bytes_per_s, points, label=f"{self.gpu} fp32",
                           gpus=(), ax=ax, source="datasheet")
        ax.set_title(f"Kernels on the {self.gpu} roofline (fp32 datasheet figures)")
        return ax


def kernel_roofline(kernels: Sequence[KernelWork], *, gpu: str = "T4", limits: Any = None) -> KernelRoofline:
    """Place ``kernels`` on the fp32 roofline of ``gpu`` (datasheet figures from :func:`gpulab.gpu_spec`), and,
    for kernels timed compiled on a GPU, their achieved bandwidth and FLOP/s as shares of ``limits``
    (:func:`gpulab.machine_limits`; a ceiling a kernel beats is raised to that kernel's rate, with a note).

    Example:
        >>> t = kernel_roofline([KernelWork("matmul 1024", 2 * 1024**3, 3 * 4 * 1024**2)], gpu="A100 40GB SXM")
        >>> t.rows[0].bound
        'compute'
    """
    from ..limits import ceiling_for
    from ..reference import gpu_spec

    if isinstance(kernels, (str, bytes)) or not isinstance(kernels, (list, tuple)):
        raise TypeError(f"kernels must be a list of KernelWork, got {kernels!r:.60}")
    kernels = list(kernels)
    if not kernels:
        raise ValueError("kernels is empty: kernel_roofline needs at least one KernelWork")
    for k in kernels:
        if not isinstance(k, KernelWork):
            raise TypeError(f"kernels must be KernelWork items, got {type(k).__name__}")
    try:
        spec = gpu_spec(gpu)
    except (KeyError, TypeError) as e:
        raise ValueError(f"gpu={gpu!r}: {e.args[0] if e.args else e}") from None
    if limits is not None and not (hasattr(limits, "bandwidth_bytes_per_s") and callable(getattr(limits, "peak_flops", None))):
        raise TypeError(f"limits must be gl.machine_limits()'s MachineLimits or None, got {limits!r:.60}")
    peak, bw = spec.fp32_flops, spec.bandwidth_bytes_per_s
    compiled = {k.label: k.measurement for k in kernels if k.measurement is not None
                and getattr(k.measurement, "device", "cpu").startswith("cuda")
                and "(interpreter)" not in k.measurement.label and "(simulator)" not in k.measurement.label}
    notes = [f"predicted: max(FLOPs / {fmt_rate(peak, 'FLOP/s')}, bytes / {fmt_rate(bw, 'B/s')}) - the {spec.name} "
             f"datasheet ({spec.source})"]
    bw_cap = flop_cap = None
    if compiled and limits is not None:
        bw_cap, n1 = ceiling_for(limits.bandwidth_bytes_per_s,
                                 [(lbl, m.bytes_per_s) for lbl, m in compiled.items()], "B/s")
        flop_cap, n2 = ceiling_for(limits.peak_flops(), [(lbl, m.flops_per_s) for lbl, m in compiled.items()])
        notes += [n for n in (n1, n2) if n]
    if len(compiled) < len(kernels):
        notes.append("measured: only for kernels compiled on a GPU - an interpreter's or simulator's time is not "
                     "kernel speed")
    rows = []
    for k in kernels:
        m = compiled.get(k.label)
        meas = m.median_s if m is not None else None
        bshare = (min(1.0, m.bytes_per_s / bw_cap) if m is not None and bw_cap and m.bytes_per_s else None)
        fshare = (min(1.0, m.flops_per_s / flop_cap) if m is not None and flop_cap and m.flops_per_s else None)
        intensity = k.flops / k.bytes_moved
        rows.append(KernelPoint(k.label, float(k.flops), float(k.bytes_moved), intensity,
                                "compute" if intensity >= peak / bw else "memory",
                                max(k.flops / peak, k.bytes_moved / bw), meas, bshare, fshare))
    return KernelRoofline(spec.name, peak, bw, tuple(rows), "; ".join(notes))
