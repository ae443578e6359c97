"""Lesson 04's demonstrations: what 16-bit floats can hold, why fp16 needs loss scaling, matmul speed by dtype, Keras policies.

- :func:`float_formats` - range and precision of fp32, bf16 and fp16, side by side.
- :func:`gradient_underflow` - one batch's gradients in fp32, in fp16 autocast without loss scaling, and
  with a GradScaler: how many gradient values fp16 flushes to zero, and how the scaler keeps them.
- :func:`matmul_sweep` - matmul throughput across sizes (aligned or not), measured in interleaved rounds.
- :func:`keras_cnn` and :func:`keras_step_times` - the lesson's CNN in Keras, and its step time under
  each Keras mixed precision policy measured in a fresh process (for variables read at TF import).

Example:
    >>> from gpulab import course
    >>> float(course.float_formats().loc["fp16", "largest"])
    65504.0
"""
from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..._check import checked
from ..._format import html_table, text_table

__all__ = ['float_formats', 'UnderflowReport', 'gradient_underflow', 'keras_cnn', 'keras_step_times', 'matmul_sweep', 'FP16_SMALLEST_SUBNORMAL', 'FP16_ROUNDS_TO_ZERO', 'FP16_SMALLEST_NORMAL', 'FP16_MAX']


# IEEE half precision: 5 exponent bits, 10 mantissa bits.
FP16_SMALLEST_SUBNORMAL = 2.0**-24   # ~5.96e-8: fp16's smallest positive value
FP16_ROUNDS_TO_ZERO = 2.0**-25       # ~2.98e-8: half of it; round-to-nearest-even sends |x| <= this to 0
FP16_SMALLEST_NORMAL = 2.0**-14      # ~6.1e-5: below this, fp16 keeps fewer than 10 mantissa bits
FP16_MAX = 65504.0                   # anything larger becomes inf

_FORMATS = (("fp32", "float32", 8, 23), ("bf16", "bfloat16", 8, 7), ("fp16", "float16", 5, 10))


def float_formats() -> Any:
    """fp32, bf16 and fp16 side by side as a pandas DataFrame: bits, largest value, smallest normal and
    subnormal value, and the relative spacing of numbers near 1 (machine epsilon).

    Example:
        >>> df = float_formats()
        >>> float(df.loc["fp16", "largest"])
        65504.0
        >>> bool(df.loc["bf16", "exponent bits"] == df.loc["fp32", "exponent bits"])
        True
    """
    import pandas as pd

    rows = []
    for name, _dtype, exp_bits, mant_bits in _FORMATS:
        bias = 2 ** (exp_bits - 1) - 1
        smallest_normal = 2.0 ** (1 - bias)
        largest = (2 - 2.0**-mant_bits) * 2.0**bias
        rows.append({"format": name, "bits": 1 + exp_bits + mant_bits, "exponent bits": exp_bits,
                     "mantissa bits": mant_bits, "largest": largest, "smallest normal": smallest_normal,
                     "smallest subnormal": smallest_normal * 2.0**-mant_bits, "epsilon": 2.0**-mant_bits,
                     "decimal digits": round(mant_bits * math.log10(2) + math.log10(2), 1)})
    return pd.DataFrame(rows).set_index("format")

# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class UnderflowReport:
    """One batch's gradients computed three ways and compared with fp32.

    ``lost_fraction``: share of gradient values that fp32 gets as non-zero but the variant returns as
    exactly 0 (flushed to zero). ``relative_error``: ``||g - g_fp32|| / ||g_fp32||``.
    ``below_fp16_subnormal``: share of the non-zero fp32 values below fp16's smallest subnormal, 2^-24;
    ``rounds_to_zero_fp16``: share at or below half of it, 2^-25, which fp16 rounds to 0 (the others below
    2^-24 round up to 2^-24).
    ``reference_abs`` holds the absolute fp32 gradient values (for :meth:`plot`).
    """

    device: str
    loss_weight: float
    loss_scale: float
    parameters: int
    lost_fraction: dict[str, float]
    relative_error: dict[str, float]
    overflow: dict[str, bool]
    below_fp16_subnormal: float      # share of fp32 gradient values below 2**-24 (fp16 cannot hold them exactly)
    rounds_to_zero_fp16: float       # share at or below 2**-25: fp16 rounds them to 0 (nearest, ties to even)
    reference_abs: Any = field(default=None, repr=False, compare=False)

    @property
    def variants(self) -> list[str]:
        return list(self.lost_fraction)

    def _rows(self) -> list[tuple[str, str, str, str]]:
        return [(v, f"{self.lost_fraction[v]:.1%}", f"{self.relative_error[v]:.2g}",
                 "yes" if self.overflow[v] else "no") for v in self.variants]

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame({"lost (flushed to 0)": self.lost_fraction, "relative error vs fp32": self.relative_error,
                             "inf/NaN": self.overflow})

    def _caption(self) -> str:
        return (f"Gradients of one batch vs fp32 on {self.device}: loss x {self.loss_weight:g}, "
                f"GradScaler scale {self.loss_scale:g}; {self.rounds_to_zero_fp16:.1%} of the fp32 values are at or "
                f"below 2^-25 (half fp16's smallest number, 2^-24) and round to 0 in fp16")

    def __repr__(self) -> str:
        return self._caption() + "\n" + text_table(("variant", "lost (flushed to 0)", "relative error", "inf/NaN"),
                                                   self._rows())

    def _repr_html_(self) -> str:
        return html_table(("variant", "lost (flushed to 0)", "relative error vs fp32", "inf/NaN"), self._rows(),
                          caption=self._caption())

    def plot(self, ax: Any = None) -> Any:
        """Histogram of the fp32 gradient magnitudes (log2), with fp16's limits and the same values after
        multiplying by the loss scale. Returns the matplotlib Axes."""
        import matplotlib.pyplot as plt
        import numpy as np

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3.2))
        vals = np.asarray(self.reference_abs, dtype=np.float64)
        vals = vals[vals > 0]
        logs = np.log2(vals)
        shift = math.log2(self.loss_scale)
        lo = math.floor(min(logs.min(), -30))
        hi = math.ceil(max(logs.max() + shift, 17))
        bins = np.arange(lo, hi + 1)
        ax.hist(logs, bins=bins, color="#888888", alpha=0.8, label="fp32 gradients")
        ax.hist(logs + shift, bins=bins, color="#2a7ab9", alpha=0.6, label=f"x loss scale {self.loss_scale:g}")
        ax.axvspan(lo, -25, color="#d62728", alpha=0.12, label="becomes 0 in fp16 (<= 2^-25)")
        ax.axvspan(-25, -14, color="#ff7f0e", alpha=0.10, label="fp16 subnormal: fewer digits")
        ax.axvspan(math.log2(FP16_MAX), hi, color="#9467bd", alpha=0.12, label="becomes inf in fp16")
        ax.set_xlabel("log2 |gradient value|")
        ax.set_ylabel("count")
        ax.set_title("Where the gradients fall in fp16's range")
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=3, frameon=False)
        ax.figure.tight_layout()
        return ax


def gradient_underflow(model: Any, batch: tuple[Any, Any], *, loss_weight: float = 1.0,
                       loss_scale: float = 2.0**16, loss_fn: Callable[[Any, Any], Any] | None = None
                       ) -> UnderflowReport:
    """Compute one batch's parameter gradients three ways and report what fp16 loses:

    1. ``fp32``: no autocast (the reference);
    2. ``fp16, no scaler``: ``torch.autocast(dtype=float16)``, plain ``loss.backward()``;
    3. ``fp16 + GradScaler``: the same, with ``torch.amp.GradScaler(init_scale=loss_scale)`` scaling the
       loss before backward and unscaling the gradients afterwards (as in training).

    ``loss_weight`` multiplies the loss in all three, standing in for the small losses and gradients
    of real networks (a loss averaged over many tokens, a small auxiliary term, a late stage of
    training). The model's parameters and buffers are restored afterwards. On CPU fp16 autocast is
    slow: use a small model and batch.

    Example:
        >>> import torch, gpulab as gl
        >>> from gpulab import course
        >>> torch.manual_seed(0) and None
        >>> r = course.gradient_underflow(course.models.mlp(hidden=64), course.models.example_batch("mlp", 8), loss_weight=1e-5)
        >>> r.lost_fraction["fp16, no scaler"] > r.lost_fraction["fp16 + GradScaler"]
        True
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    for name, value in (("loss_weight", loss_weight), ("loss_scale", loss_scale)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if not isinstance(batch, (tuple, list)) or len(batch) != 2:
        raise TypeError("batch must be (inputs, targets)")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("gradient_underflow needs a model with trainable parameters")
    loss_fn = loss_fn or F.cross_entropy
    x, y = batch
    device_type = params[0].device.type
    saved = copy.deepcopy(model.state_dict())

    def grads(cast: bool, scaler: Any = None) -> list[Any]:
        model.zero_grad(set_to_none=True)
        ctx = torch.autocast(device_type, dtype=torch.float16) if cast else contextlib.nullcontext()
        with ctx:
            out = model(x)
        loss = loss_fn(out.float(), y) * loss_weight
        if scaler is None:
            loss.backward()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(torch.optim.SGD(params, lr=0.0))   # divides by the scale, as GradScaler.step would
        got = [(p.grad.detach().float().clone() if p.grad is not None else torch.zeros_like(p, dtype=torch.float32))
               for p in params]
        model.zero_grad(set_to_none=True)
        return got

    try:
        ref = grads(cast=False)
        variants = {"fp16, no scaler": grads(cast=True),
                    "fp16 + GradScaler": grads(cast=True, scaler=torch.amp.GradScaler(device_type, init_scale=loss_scale))}
    finally:
        model.load_state_dict(saved)
    ref_flat = torch.cat([g.flatten() for g in ref])
    nonzero = ref_flat != 0
    lost, err, overflow = {"fp32": 0.0}, {"fp32": 0.0}, {"fp32": not bool(torch.isfinite(ref_flat).all())}
    ref_norm = float(ref_flat.norm()) or 1.0
    for name, gs in variants.items():
        flat = torch.cat([g.flatten() for g in gs])
        finite = bool(torch.isfinite(flat).all())
        overflow[name] = not finite
        lost[name] = float(((flat == 0) & nonzero).sum()) / max(int(nonzero.sum()), 1)
        err[name] = float((flat - ref_flat).norm()) / ref_norm if finite else math.inf
    ref_abs = ref_flat.abs()
    below = float((ref_abs[nonzero] < FP16_SMALLEST_SUBNORMAL).float().mean()) if bool(nonzero.any()) else 0.0
    to_zero = float((ref_abs[nonzero] <= FP16_ROUNDS_TO_ZERO).float().mean()) if bool(nonzero.any()) else 0.0
    return UnderflowReport(str(params[0].device), float(loss_weight), float(loss_scale), int(ref_flat.numel()),
                           lost, err, overflow, below, to_zero, ref_abs[nonzero].numpy(force=True).astype(np.float32))


# ----------------------------------------------------------------------------------------------
def keras_cnn(classes: int = 10, width: int = 32, input_shape: tuple[int, int, int] = (32, 32, 3)) -> Any:
    """The Keras twin of :func:`course.models.small_cnn` (channels-last images): two conv blocks and a
    dense head. Build it *after* ``keras.mixed_precision.set_global_policy(...)``: layers take the
    policy when they are created. The final softmax is ``dtype="float32"`` under any policy, as the
    TensorFlow mixed precision guide recommends, so the probabilities and the loss stay in fp32.

    Example:
        >>> model = keras_cnn()                                   # doctest: +SKIP
        >>> model.layers[-1].compute_dtype                        # doctest: +SKIP
        'float32'
    """
    for name, value in (("classes", classes), ("width", width)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    import keras

    L = keras.layers
    return keras.Sequential([
        keras.Input(input_shape),
        L.Conv2D(width, 3, padding="same"), L.BatchNormalization(momentum=0.9), L.ReLU(), L.MaxPooling2D(),
        L.Conv2D(2 * width, 3, padding="same"), L.BatchNormalization(momentum=0.9), L.ReLU(), L.MaxPooling2D(),
        L.Flatten(), L.Dense(classes), L.Activation("softmax", dtype="float32"),
    ], name="keras_cnn")


_KERAS_TIMING_SCRIPT = r"""
import json, statistics, sys, time
import numpy as np
import keras
from gpulab import course
policies, batch_size, runs = json.loads(sys.argv[1])
rng = np.random.default_rng(0)
x = rng.standard_normal((batch_size, 32, 32, 3), dtype=np.float32)
y = rng.integers(0, 10, batch_size)
models = {}
for p in policies:                      # a layer takes the global policy when it is created
    keras.mixed_precision.set_global_policy(p)
    m = course.keras_cnn()
    m.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    m.train_on_batch(x, y); m.train_on_batch(x, y)      # trace and warm up
    models[p] = m
times = {p: [] for p in policies}
for i in range(runs):                   # interleaved: background load slows every policy alike
    for p in policies[i % len(policies):] + policies[:i % len(policies)]:
        t0 = time.perf_counter(); models[p].train_on_batch(x, y); times[p].append(time.perf_counter() - t0)
print("GPULAB_RESULT " + json.dumps({p: statistics.median(t) for p, t in times.items()}))
"""


def keras_step_times(policies: tuple[str, ...] = ("float32", "mixed_bfloat16"), *, batch_size: int = 128,
                     runs: int = 5, env: dict[str, str] | None = None, timeout_s: float = 300) -> dict[str, float]:
    """Median ``train_on_batch`` time (seconds) of :func:`keras_cnn` under each Keras dtype policy, measured
    in a fresh Python process with ``env`` added to this process's environment.

    A fresh process is the only way to see the effect of variables TensorFlow reads once at import, such
    as ``TF_ENABLE_ONEDNN_OPTS`` (the course kernel sets it to 0). Steps of the policies are interleaved.

    Example:
        >>> keras_step_times(("float32",), runs=2, env={"TF_ENABLE_ONEDNN_OPTS": "1"})   # doctest: +SKIP
        {'float32': 0.03}
    """
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    if isinstance(policies, str) or not policies or not all(isinstance(p, str) for p in policies):
        raise TypeError(f"policies must be a tuple of Keras policy names, got {policies!r}")
    known = {"float32", "mixed_float16", "mixed_bfloat16", "float16", "bfloat16"}
    unknown = [p for p in policies if p not in known]
    if unknown:
        raise ValueError(f"unknown Keras policies {unknown}: choose from {sorted(known)}")
    for name, value in (("batch_size", batch_size), ("runs", runs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    full_env = dict(os.environ)
    full_env.update({str(k): str(v) for k, v in (env or {}).items()})
    root = str(Path(__file__).resolve().parents[3])   # so the child imports this gpulab
    full_env["PYTHONPATH"] = root + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    full_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    out = subprocess.run([sys.executable, "-c", _KERAS_TIMING_SCRIPT, json.dumps([list(policies), batch_size, runs])],
                         env=full_env, capture_output=True, text=True, timeout=timeout_s)
    lines = [line for line in out.stdout.splitlines() if line.startswith("GPULAB_RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the Keras timing process failed (exit {out.returncode}): {out.stderr.strip()[-800:]}")
    return {k: float(v) for k, v in json.loads(lines[-1].removeprefix("GPULAB_RESULT ")).items()}


# ----------------------------------------------------------------------------------------------
@checked(device="device")
def matmul_sweep(sizes: Sequence[int], dtypes: Sequence[str] = ("float32",), device: Any = None, *,
                 rounds: int = 5, min_run_time: float = 0.03) -> Any:
    """Best throughput of ``n x n`` matmuls for each size and dtype, in GFLOP/s, as a DataFrame (one row
    per ``n``, one column per dtype, plus ``multiple of 8`` / ``multiple of 64`` flags).

    The sizes are measured in ``rounds`` interleaved passes and the fastest run of each kept, so a burst of
    background load cannot make one size look slow (measuring them one after another can). Use it to see
    whether aligned shapes (multiples of 8, 64) run faster on your hardware.

    Example:
        >>> df = matmul_sweep([63, 64], rounds=1, min_run_time=0.01)
        >>> list(df.index), bool((df["float32"] > 0).all())
        ([63, 64], True)
    """
    import pandas as pd

    from ...limits import measure_matmul

    sizes = list(sizes)
    if not sizes or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in sizes):
        raise ValueError(f"sizes must be positive whole numbers, got {sizes!r}")
    if isinstance(dtypes, str) or not dtypes:
        raise TypeError(f"dtypes must be a list of dtype names such as ['float32', 'bfloat16'], got {dtypes!r}")
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be a positive whole number, got {rounds!r}")
    best: dict[tuple[int, str], float] = {}
    jobs = [(n, dt) for dt in dtypes for n in sizes]
    for r in range(rounds):
        shift = r % len(jobs)
        for n, dt in jobs[shift:] + jobs[:shift]:
            m = measure_matmul(n, dt, device=device, min_run_time=min_run_time, warmup=1)
            best[(n, dt)] = max(best.get((n, dt), 0.0), m.flops / m.min_s / 1e9)
    df = pd.DataFrame({dt: [best[(n, dt)] for n in sizes] for dt in dtypes}, index=pd.Index(sizes, name="n"))
    df["multiple of 8"] = [n % 8 == 0 for n in sizes]
    df["multiple of 64"] = [n % 64 == 0 for n in sizes]
    return df
