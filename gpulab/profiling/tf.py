"""TensorFlow profiler runs into a TensorBoard log directory."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .._check import whole
from .._format import fmt_seconds, html_table, text_table

__all__ = ['TFProfile', 'tf_profile']


# TensorFlow
@dataclass(frozen=True)
class TFProfile:
    """A TensorFlow profiler run: the TensorBoard log directory, the files written, and the busiest
    host events read back from the trace (when the trace format could be read)."""

    logdir: str
    files: tuple[str, ...]
    steps: int
    top: tuple[tuple[str, int, float], ...]   # (event name, count, total seconds)

    @property
    def command(self) -> str:
        return f"tensorboard --logdir {self.logdir}"

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.top, columns=["event", "count", "total_s"]).set_index("event")

    def _foot(self) -> str:
        return (f"Open with: pip install tensorboard-plugin-profile, then `{self.command}` -> Profile tab "
                "(trace viewer, op stats, input-pipeline analyzer).")

    def __repr__(self) -> str:
        rows = [(n[:60], str(c), fmt_seconds(t / self.steps)) for n, c, t in self.top[:8]]
        return (f"TensorFlow profile of {self.steps} steps in {self.logdir} ({len(self.files)} files)\n"
                + text_table(("host event", "count", "time/step (incl. children)"), rows) + "\n" + self._foot())

    def _repr_html_(self) -> str:
        rows = [(n[:60], str(c), fmt_seconds(t / self.steps)) for n, c, t in self.top[:8]]
        return html_table(("host event", "count", "time/step (incl. children)"), rows,
                          caption=f"TensorFlow profile of {self.steps} steps in {self.logdir}", footer=self._foot())


def _xplane_top(path: str, n: int = 20) -> tuple[tuple[str, int, float], ...]:
    """Aggregate the host plane of an ``.xplane.pb`` trace: (name, count, seconds) by total time."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # pragma: no cover - layout of TF's protobufs moved
        return ()
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    agg: dict[str, list[float]] = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        meta = {k: v.display_name or v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for ev in line.events:
                name = meta.get(ev.metadata_id, str(ev.metadata_id))
                a = agg.setdefault(name, [0, 0.0])
                a[0] += 1
                a[1] += ev.duration_ps / 1e12
    top = sorted(agg.items(), key=lambda kv: kv[1][1], reverse=True)[:n]
    return tuple((k, int(v[0]), float(v[1])) for k, v in top)


def tf_profile(fn: Callable[[], Any], steps: int = 5, warmup: int = 1,
               logdir: str | os.PathLike[str] = "traces/tf") -> TFProfile:
    """Run ``fn`` (one TensorFlow/Keras training step) ``warmup`` times, then ``steps`` times under
    ``tf.profiler.experimental`` with one ``Trace`` per step, writing a TensorBoard log to ``logdir``.

    Example (TensorFlow takes seconds to import, so the doctest only checks the argument guard):
        >>> import gpulab as gl
        >>> gl.profiling.tf_profile("not a step")
        Traceback (most recent call last):
        ...
        TypeError: tf_profile needs a callable running one step, got str
    """
    if not callable(fn):
        raise TypeError(f"tf_profile needs a callable running one step, got {type(fn).__name__}")
    whole("steps", steps)
    whole("warmup", warmup, low=0)
    from .._tf import import_tensorflow

    tf = import_tensorflow()

    for _ in range(warmup):
        fn()
    logdir = str(logdir)
    before = set(Path(logdir).rglob("*")) if Path(logdir).exists() else set()
    tf.profiler.experimental.start(logdir)
    try:
        for i in range(steps):
            with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
                fn()
    finally:
        tf.profiler.experimental.stop()
    files = sorted(str(p) for p in set(Path(logdir).rglob("*")) - before if p.is_file())
    planes = [p for p in files if p.endswith(".xplane.pb")]
    top = _xplane_top(planes[-1]) if planes else ()
    return TFProfile(logdir, tuple(files), steps, top)
