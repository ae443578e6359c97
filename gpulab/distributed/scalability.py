"""How data parallelism should scale: all-reduce time, measured vs published scaling, tf.distribute on CPU."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .._check import checked, mapping, positive, whole
from .._format import TableView, fmt_number

__all__ = ['allreduce_seconds', 'PublishedScaling', 'Scaling', 'scaling', 'mirrored_strategy']


def allreduce_seconds(nbytes: float, link_bytes_per_s: float, workers: int = 2) -> float:
    """Time a ring all-reduce of ``nbytes`` needs on links of ``link_bytes_per_s`` (per direction):
    each worker sends and receives ``2 (n - 1) / n`` times the buffer (1x at 2 workers, 1.75x at 8, towards 2x).
    This is the bandwidth term only: each of the ``2 (n - 1)`` ring steps also pays a latency, which dominates for
    small buffers (a few MB and less), where the time grows with n.

    Example: ResNet-50's 25.6 M fp32 gradients (102 MB) between 2 GPUs over PCIe Gen3 (~16 GB/s)
        >>> round(allreduce_seconds(25.6e6 * 4, 16e9, workers=2) * 1e3, 1)
        6.4
    """
    positive("nbytes", nbytes, allow_zero=True, unit="bytes")
    positive("link_bytes_per_s", link_bytes_per_s, unit="bytes per second")
    whole("workers", workers)
    return 2 * (workers - 1) / workers * nbytes / link_bytes_per_s


@dataclass(frozen=True)
class PublishedScaling:
    """A published scaling figure with the number of workers it refers to (relative to its own baseline)."""

    figure: Any          # a gpulab.reference.Published: unit "x" (speedup) or "% scaling efficiency"
    workers: int

    @property
    def speedup(self) -> float | None:
        return self.figure.low if self.figure.unit == "x" else None

    @property
    def efficiency(self) -> float:
        return self.figure.low / self.workers if self.figure.unit == "x" else self.figure.low / 100


@dataclass(frozen=True, repr=False)
class Scaling(TableView):
    """Throughput for several worker counts, its speedup over the baseline and the scaling efficiency
    (speedup divided by the growth in workers), with published figures as extra rows."""

    labels: tuple[str, ...]
    workers: tuple[int, ...]
    items_per_s: tuple[float, ...]
    baseline: str
    published: tuple[PublishedScaling, ...] = ()
    title: str = "Data-parallel scaling"

    def _index(self, label: str) -> int:
        if label not in self.labels:
            raise KeyError(f"no row {label!r}; rows: {list(self.labels)}")
        return self.labels.index(label)

    def speedup(self, label: str) -> float:
        """Throughput of ``label`` over the baseline's."""
        return self.items_per_s[self._index(label)] / self.items_per_s[self._index(self.baseline)]

    def efficiency(self, label: str) -> float:
        """Speedup over the growth in workers: 1.0 is perfect scaling."""
        i, b = self._index(label), self._index(self.baseline)
        return self.speedup(label) / (self.workers[i] / self.workers[b])

    def to_dataframe(self) -> Any:
        import pandas as pd

        rows = [{"run": k, "workers": n, "items/s": v, "speedup": self.speedup(k), "efficiency": self.efficiency(k),
                 "source": "measured here"} for k, n, v in zip(self.labels, self.workers, self.items_per_s)]
        rows += [{"run": p.figure.hardware, "workers": p.workers, "items/s": None, "speedup": p.speedup,
                  "efficiency": p.efficiency, "source": f"{p.figure.source} ({p.figure.date})"} for p in self.published]
        return pd.DataFrame(rows).set_index("run")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        rows = [[k, str(n), fmt_number(v), f"{self.speedup(k):.2f}x", f"{self.efficiency(k):.0%}", "measured here"]
                for k, n, v in zip(self.labels, self.workers, self.items_per_s)]
        rows += [[p.figure.hardware, str(p.workers), "", "" if p.speedup is None else f"{p.speedup:.2f}x",
                  f"{p.efficiency:.0%}", f"{p.figure.source} ({p.figure.date})"] for p in self.published]
        return (["run", "workers", "items/s", "speedup", "efficiency", "source"], rows,
                "efficiency = speedup / (workers / baseline workers); published: workers relative to their baseline")


@checked(title="text")
def scaling(runs: Mapping[str, tuple[int, float]], baseline: str, published: Mapping[str, int] | None = None,
            title: str = "Data-parallel scaling") -> Scaling:
    """A :class:`Scaling` table from ``{label: (workers, items_per_s)}``. ``published`` maps keys of
    :func:`gpulab.published` figures (a speedup in ``"x"`` or a ``"% scaling efficiency"``) to the number of
    workers the figure is for, relative to its own baseline.

    Example:
        >>> t = scaling({"1 GPU": (1, 100.0), "2 GPUs": (2, 180.0)}, baseline="1 GPU",
        ...             published={"ddp-resnet50-dgxa100-tf32": 8})
        >>> round(t.speedup("2 GPUs"), 2), round(t.efficiency("2 GPUs"), 2), round(t.published[0].efficiency, 3)
        (1.8, 0.9, 0.965)
    """
    mapping("runs", runs, example="{'1 GPU': (1, 950.0), '2 GPUs': (2, 1800.0)}")
    if baseline not in runs:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {list(runs)}")
    for k, run in runs.items():
        if not isinstance(run, (tuple, list)) or len(run) != 2:
            raise TypeError(f"runs[{k!r}] must be (workers, items_per_s), got {run!r}")
        whole(f"runs[{k!r}] workers", run[0])
        positive(f"runs[{k!r}] items_per_s", run[1])
    mapping("published", published or {}, example="{'ddp-resnet50-dgxa100-tf32': 8}")
    from ..reference import published as get

    rows = []
    for key, n in (published or {}).items():
        fig = get(key)
        if fig.unit not in ("x", "% scaling efficiency"):
            raise ValueError(f"published figure {key!r} is in {fig.unit!r}, not a speedup ('x') or a scaling efficiency")
        rows.append(PublishedScaling(fig, whole(f"workers of {key!r}", n)))
    return Scaling(tuple(runs), tuple(n for n, _ in runs.values()), tuple(float(v) for _, v in runs.values()),
                   baseline, tuple(rows), title)


# ---------------------------------------------------------------------------------------------- TensorFlow

def mirrored_strategy(cpu_devices: int = 2) -> Any:
    """``tf.distribute.MirroredStrategy`` over every GPU TensorFlow sees, or, without GPUs, over ``cpu_devices``
    logical CPU devices carved out of the one physical CPU (same code path: one replica per device, gradients
    all-reduced). Call before TensorFlow runs any operation: logical devices cannot be added afterwards.

    With Keras 3, build *and* ``compile()`` the model inside ``strategy.scope()``.
    """
    whole("cpu_devices", cpu_devices)
    from .._tf import import_tensorflow

    tf = import_tensorflow()

    if tf.config.list_physical_devices("GPU"):
        return tf.distribute.MirroredStrategy()
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_devices)
    except RuntimeError:
        pass  # already initialised: use what exists, if it is enough
    logical = [d.name for d in tf.config.list_logical_devices("CPU")]
    if len(logical) < cpu_devices:
        raise RuntimeError(f"TensorFlow already started with {len(logical)} CPU device(s); logical devices must be "
                           "configured before the first TensorFlow operation. Restart the kernel and call "
                           "mirrored_strategy() first.")
    return tf.distribute.MirroredStrategy(devices=logical[:cpu_devices])
