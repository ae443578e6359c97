"""Loader runs side by side (images/s, speedup, data-wait share, share of the compute-only limit, published figure), and a check that two loaders deliver the same batches."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Sequence

from .._check import checked, mapping, per_label, rows_arg, table_rows
from .._format import NA, TableView, fmt_number, html_table
from ..limits import ceiling_for
from ..reference import Published
from ..reference import published as _published
from .measure import LoaderRun

__all__ = ['LoaderComparison', 'compare_loaders', 'BatchCheck', 'check_batches']


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class LoaderComparison(TableView):
    """Loader runs side by side (immutable): images/s, speedup vs ``baseline``, data-wait share, CPU
    utilisation, and - with ``limits`` (per row: the throughput of that row's training step on data already
    in memory, ``None`` where unknown) - the share of that limit each loader reaches; published figures
    beside their rows."""

    runs: tuple[LoaderRun, ...]
    baseline: str
    title: str = "Input pipelines"
    limits: Mapping[str, float | None] = field(default_factory=dict)
    published: Mapping[str, Published] = field(default_factory=dict)

    def __post_init__(self) -> None:
        labels = table_rows(self.runs, LoaderRun, "gl.measure_loader", self.baseline, self.published, name="runs")
        object.__setattr__(self, "limits", per_label("limit_items_per_s", dict(self.limits) or None, labels))

    def run(self, label: str) -> LoaderRun:
        for r in self.runs:
            if r.label == label:
                return r
        raise KeyError(f"no run {label!r}; labels: {[r.label for r in self.runs]}")

    def speedup(self, label: str) -> float:
        """This run's images/s divided by the baseline's (>1 is faster)."""
        return self.run(label).items_per_s / self.run(self.baseline).items_per_s

    def _raised(self, limit: float) -> tuple[float | None, str | None]:
        same = [(r.label, r.items_per_s) for r in self.runs if self.limits.get(r.label) == limit]
        return ceiling_for(limit, same, "images/s", "the same step on data already in memory")

    def limit(self, label: str) -> float | None:
        """The compute-only limit of this row, raised to the fastest loader measured against it when one ran
        faster (the limit was measured in other rounds; see :attr:`limit_notes`): shares never exceed 100%."""
        limit = self.limits.get(label)
        return None if limit is None else self._raised(limit)[0]

    @property
    def limit_notes(self) -> tuple[str, ...]:
        notes = (self._raised(v)[1] for v in sorted({v for v in self.limits.values() if v is not None}))
        return tuple(n.replace("ceiling raised", "compute-only limit raised") for n in notes if n)

    def fraction_of_limit(self, label: str) -> float | None:
        """images/s as a share of the compute-only limit (None without a limit); never above 1."""
        limit = self.limit(label)
        return None if limit is None else self.run(label).items_per_s / limit

    @property
    def fastest(self) -> str:
        return max(self.runs, key=lambda r: r.items_per_s).label

    def to_dataframe(self) -> Any:
        import pandas as pd

        rows = []
        for r in self.runs:
            d = r.to_dict()
            d["speedup"] = self.speedup(r.label)
            d["fraction_of_limit"] = self.fraction_of_limit(r.label)
            pub = self.published.get(r.label)
            d["published"] = str(pub) if pub else None
            rows.append(d)
        return pd.DataFrame(rows).set_index("label")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["loader", "images/s", f"vs {self.baseline}", "data wait", "CPU (all cores)"]
        show_limit = any(v is not None for v in self.limits.values())
        header += ["% of compute-only limit"] if show_limit else []
        header += ["published"] if self.published else []
        rows = []
        for r in self.runs:
            row = [r.label, fmt_number(round(r.items_per_s)), f"{self.speedup(r.label):.2f}x",
                   f"{r.data_wait_share:.0%}", f"{r.cpu_util_pct:.0f}%"]
            if show_limit:
                frac = self.fraction_of_limit(r.label)
                row.append(NA if frac is None else f"{frac:.0%}")
            if self.published:
                p = self.published.get(r.label)
                row.append(f"{p.figure} ({p.hardware}; {p.source})" if p else "")
            rows.append(row)
        notes = [f"{self.runs[0].cores} logical CPUs; data wait = share of the time the step waited for its batch; "
                 "CPU = this process and its loader workers"]
        by_limit: dict[int, list[str]] = {}
        for label, v in self.limits.items():
            if v is not None:
                by_limit.setdefault(round(v), []).append(label)
        if len(by_limit) == 1:
            notes.append("compute-only limit = the same step on batches already in memory: "
                         f"{fmt_number(next(iter(by_limit)))} images/s")
        elif by_limit:   # different steps (e.g. PyTorch and Keras): say which limit each row is measured against
            notes.append("compute-only limit = the same step on batches already in memory: " + ", ".join(
                f"{fmt_number(v)} images/s ({'; '.join(labels)})" for v, labels in sorted(by_limit.items())))
        notes += list(self.limit_notes)
        cut = [f"{r.label} (by {r.stopped_by})" for r in self.runs if r.stopped_by is not None]
        if cut:
            notes.append(f"stopped by a limit before the epochs asked for were done: {', '.join(cut)}; figures cover "
                         "the batches run")
        busy = [r.label for r in self.runs if r.others_cpu_pct is not None and r.others_cpu_pct > 10]
        if busy:
            notes.append(f"other programs used >10% of the CPU during: {', '.join(busy)} (slower, noisier)")
        return header, rows, "; ".join(notes)

    def plot(self, ax: Any = None) -> Any:
        """Time per image split into data wait and compute, one bar per loader; returns the Axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 0.6 + 0.45 * len(self.runs)))
        labels = [r.label for r in self.runs]
        wait = [1e3 * r.data_wait_s / r.items for r in self.runs]
        comp = [1e3 * r.compute_s / r.items for r in self.runs]
        ax.barh(labels, comp, color="#2a7ab9", label="compute")
        ax.barh(labels, wait, left=comp, color="#e08a2c", label="waiting for data")
        for y, r in enumerate(self.runs):
            ax.annotate(f" {r.items_per_s:,.0f} img/s", (wait[y] + comp[y], y), va="center", fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("milliseconds per image (lower is faster)")
        ax.legend(fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, frameon=False, borderaxespad=0.2)
        ax.set_title(self.title, loc="left")
        ax.set_xlim(0, max(w + c for w, c in zip(wait, comp)) * 1.35)
        ax.figure.tight_layout()
        return ax


def _figure(label: str, key: Any) -> Published:
    try:
        return _published(key)
    except (KeyError, TypeError) as e:
        raise ValueError(f"published[{label!r}]: {e.args[0] if e.args else e}") from None


@checked(title="text")
def compare_loaders(runs: Sequence[LoaderRun], baseline: str | None = None, *, title: str = "Input pipelines",
                    limit_items_per_s: float | Mapping[str, float] | None = None,
                    published: Mapping[str, str | Published] | None = None) -> LoaderComparison:
    """Build a :class:`LoaderComparison`; ``baseline`` defaults to the first run. ``limit_items_per_s`` is
    the training step's throughput on data already in memory (one number, or one per label when rows train
    different steps, e.g. PyTorch and Keras); ``published`` maps a row label to a key of
    :func:`gpulab.published` (or a :class:`~gpulab.reference.Published`).

    Example:
        >>> from gpulab.data import measure_loader
        >>> a = measure_loader([([0] * 4, [0] * 4)] * 3, label="a", warmup_batches=0)
        >>> compare_loaders([a]).speedup("a")
        1.0
    """
    rs = rows_arg("runs", runs, LoaderRun, "gl.measure_loader")
    pubs = {k: (v if isinstance(v, Published) else _figure(k, v))
            for k, v in mapping("published", published or {}, example="{'DALI': 'dali-streampetr-2gpu'}").items()}
    labels = [getattr(r, "label", "") for r in rs]
    return LoaderComparison(rs, baseline if baseline is not None else labels[0], title,
                            per_label("limit_items_per_s", limit_items_per_s, labels), pubs)


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class BatchCheck:
    """Do two loaders deliver the same thing? Shapes, dtypes, value ranges, labels and pixel difference of
    one batch from each (same files, same order, no augmentation)."""

    names: tuple[str, str]
    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    dtypes: tuple[str, str]
    ranges: tuple[tuple[float, float], tuple[float, float]]
    labels_equal: bool
    label_dtypes: tuple[str, str]
    max_abs_diff: float
    mean_abs_diff: float
    atol: float

    @property
    def ok(self) -> bool:
        same_range = all(abs(a - b) <= max(self.atol, 0.05 * abs(a)) for a, b in zip(*self.ranges))
        return (self.shapes[0] == self.shapes[1] and self.dtypes[0] == self.dtypes[1] and self.labels_equal
                and self.label_dtypes[0] == self.label_dtypes[1] and same_range and self.mean_abs_diff <= self.atol)

    def _rows(self) -> list[tuple[str, str, str]]:
        a, b = self.names
        fmt_range = lambda r: f"[{r[0]:.3f}, {r[1]:.3f}]"
        return [("shape", str(self.shapes[0]), str(self.shapes[1])), ("dtype", *self.dtypes),
                ("value range", fmt_range(self.ranges[0]), fmt_range(self.ranges[1])),
                ("label dtype", *self.label_dtypes),
                ("labels", "equal" if self.labels_equal else "DIFFERENT", ""),
                ("pixels", f"mean |diff| {self.mean_abs_diff:.2e}", f"max |diff| {self.max_abs_diff:.2e}")]

    def __repr__(self) -> str:
        from .._format import text_table

        verdict = "equivalent" if self.ok else "NOT equivalent"
        return (f"BatchCheck {self.names[0]} vs {self.names[1]}: {verdict} (mean |diff| tolerance {self.atol:g})\n"
                + text_table(("", *self.names), self._rows()))

    def _repr_html_(self) -> str:
        verdict = "equivalent" if self.ok else "NOT equivalent"
        caption = f"{self.names[0]} vs {self.names[1]}: {verdict} (mean |diff| tolerance {self.atol:g})"
        return html_table(("", *self.names), self._rows(), caption=caption)


def _numpy(x: Any) -> Any:
    import numpy as np

    if hasattr(x, "detach"):
        x = x.detach().cpu()
    if hasattr(x, "numpy"):
        x = x.numpy()
    return np.asarray(x)


def check_batches(a: tuple[Any, Any], b: tuple[Any, Any], names: tuple[str, str] = ("a", "b"), *,
                  atol: float = 0.02) -> BatchCheck:
    """Compare two ``(images, labels)`` batches (torch, TensorFlow or numpy): shape, dtype, value range,
    labels, and the mean absolute pixel difference (``<= atol`` to pass; exact decoders give ~0, different
    resize implementations a little more).

    Example:
        >>> import numpy as np
        >>> x = np.zeros((2, 3, 4, 4), np.float32)
        >>> check_batches((x, [0, 1]), (x + 0.001, [0, 1])).ok
        True
    """
    import math

    import numpy as np

    if isinstance(atol, bool) or not isinstance(atol, (int, float)) or not math.isfinite(atol) or atol < 0:
        raise ValueError(f"atol must be a finite mean pixel difference >= 0 (e.g. 0.02), got {atol!r}")
    for name, pair in (("a", a), ("b", b)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise TypeError(f"{name} must be one batch as an (images, labels) pair, got {type(pair).__name__} "
                            f"{pair!r:.60}")
    if not isinstance(names, (tuple, list)) or len(names) != 2 or not all(isinstance(n, str) for n in names):
        raise TypeError(f"names must be two texts naming the loaders, e.g. ('torchvision', 'DALI'), got {names!r}")
    xa, ya = _numpy(a[0]), _numpy(a[1]).reshape(-1)
    xb, yb = _numpy(b[0]), _numpy(b[1]).reshape(-1)
    same_shape = xa.shape == xb.shape
    diff = np.abs(xa.astype(np.float64) - xb.astype(np.float64)) if same_shape else np.array([np.inf])
    return BatchCheck(names=tuple(names), shapes=(tuple(xa.shape), tuple(xb.shape)),
                      dtypes=(str(xa.dtype), str(xb.dtype)),
                      ranges=((float(xa.min()), float(xa.max())), (float(xb.min()), float(xb.max()))),
                      labels_equal=ya.shape == yb.shape and bool(np.array_equal(ya, yb)),
                      label_dtypes=(str(ya.dtype), str(yb.dtype)), max_abs_diff=float(diff.max()),
                      mean_abs_diff=float(diff.mean()), atol=float(atol))
