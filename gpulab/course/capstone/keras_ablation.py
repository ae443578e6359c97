"""The capstone's Keras ablation: the seed's ``model.fit`` loop, then each change the course taught, kept if it helps.

The seed's Keras twin of the PyTorch loop (``Sequential``: 784 -> Dense 500 ReLU -> Dense 10; Adam at lr 1e-3;
``model.fit(x_train, y_train, batch_size=32)`` on NumPy arrays; ``compile()``'s defaults) is ``KerasRecipe()``.
Its switches: batch size and learning rate; the input ("arrays" as the seed passes them, or a ``tf.data``
pipeline that caches, shuffles, batches and prefetches); Keras' mixed precision policy; and XLA. The seed's
``jit_compile="auto"`` is kept as written: Keras 3 resolves it on TensorFlow to XLA only when TensorFlow sees a GPU
(``Trainer._resolve_auto_jit_compile`` in ``keras/src/trainers/trainer.py``: no GPU -> False; a
``tf.distribute`` strategy or op determinism -> False; else True), so the XLA change is tried only on a CPU.

:func:`train_keras_recipe` trains one recipe, :func:`keras_changes` lists the changes for the device and
:func:`keras_ablation` runs them with :func:`course.ablate`.

Example:
    >>> from gpulab import course
    >>> course.KerasRecipe().describe()
    'batch 32, lr 0.001, data arrays, float32, jit_compile auto'
    >>> course.KerasRecipe(policy="bf16")
    Traceback (most recent call last):
    ...
    ValueError: policy must be one of ('float32', 'mixed_bfloat16', 'mixed_float16'), got 'bf16'
    >>> [c.label for c in course.keras_changes(device="cpu")][:2]
    ['batch 256, lr x2.8 (square-root rule)', 'tf.data: cache, shuffle, batch, prefetch']
"""
from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, Mapping

from ..._check import checked, whole
from ..._format import fmt_bytes, fmt_number, fmt_seconds, html_table, text_table
from .ablation import Ablation, Change, ablate
from .ablation_table import _fraction
from .digits import Digits, to_features

__all__ = ["KerasRecipe", "KerasRun", "train_keras_recipe", "keras_changes", "keras_ablation"]

KerasData = Literal["arrays", "tf.data"]
KerasPolicy = Literal["float32", "mixed_bfloat16", "mixed_float16"]
_POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")
_CEILING_DTYPE = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}

# The seed MLP's matmul FLOPs for one sample's forward and backward pass, counted like torch.utils.flop_counter
# (2 per multiply-add; biases, ReLU and the loss are not matmuls): forward 2*(784*500 + 500*10); backward the
# weight gradients of both layers (the same again) and the gradient into the hidden layer (2*500*10); no gradient
# is computed into the input images.
_SEED_FLOPS_PER_SAMPLE = 2 * (784 * 500 + 500 * 10) * 2 + 2 * 500 * 10


@dataclass(frozen=True)
class KerasRecipe:
    """How to train the seed's Keras MLP. ``KerasRecipe()`` is the seed as written.

    data: "arrays" (``model.fit`` on the NumPy arrays; Keras slices and shuffles them) or "tf.data" (a
        ``tf.data.Dataset`` from the arrays with ``.cache()``, ``.shuffle(n)``, ``.batch()`` and
        ``.prefetch(tf.data.AUTOTUNE)``).
    policy: Keras' dtype policy for the model ("mixed_bfloat16", "mixed_float16": the last Dense stays float32,
        and ``compile()`` wraps Adam in a ``LossScaleOptimizer`` for mixed_float16).
    jit_compile: ``compile()``'s argument: "auto" (the seed's default: XLA only when TensorFlow sees a GPU), True
        (XLA) or False.
    """

    batch_size: int = 32
    lr: float = 1e-3
    data: KerasData = "arrays"
    policy: KerasPolicy = "float32"
    jit_compile: bool | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        whole("batch_size", self.batch_size)
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not 0 < self.lr < 10:
            raise ValueError(f"lr must be a positive learning rate below 10, got {self.lr!r}")
        if self.data not in ("arrays", "tf.data"):
            raise ValueError(f"data must be one of ('arrays', 'tf.data'), got {self.data!r}")
        if self.policy not in _POLICIES:
            raise ValueError(f"policy must be one of {_POLICIES}, got {self.policy!r}")
        if self.jit_compile != "auto" and not isinstance(self.jit_compile, bool):
            raise TypeError(f"jit_compile must be True, False or 'auto', got {self.jit_compile!r}")

    def params(self) -> dict[str, Any]:
        """The recipe as a flat dict (what experiment trackers log as parameters)."""
        return asdict(self)

    def describe(self) -> str:
        """One line: batch, lr, input, policy and XLA."""
        return (f"batch {self.batch_size}, lr {self.lr:.3g}, data {self.data}, {self.policy}, "
                f"jit_compile {self.jit_compile}")


@dataclass(frozen=True, repr=False)
class KerasRun:
    """What :func:`train_keras_recipe` did: per-epoch wall times, each epoch's loss and accuracy as ``fit``
    reported them, test accuracy, peak memory (GPU only) and the work per sample. ``xla`` is what
    ``jit_compile`` resolved to; ``loss_scaling`` whether ``compile()`` wrapped the optimizer."""

    recipe: KerasRecipe
    device: str
    epochs: int
    samples_per_epoch: int
    epoch_times_s: tuple[float, ...]
    history: tuple[tuple[float, float], ...]      # (loss, accuracy) per epoch, from fit's logs
    test_accuracy: float | None
    peak_memory_bytes: int | None                # None: not measured (TensorFlow reports it only for GPUs)
    flops_per_sample: float
    xla: bool
    loss_scaling: bool
    chunk_rates: tuple[tuple[float, ...], ...] = ()   # per timed epoch: samples/s of each quarter of it
    notes: tuple[str, ...] = ()
    # what the ablation's energy column says for a Keras run (a class constant, not a field)
    energy_reason = "the Keras runs are not measured with the device's energy counter"

    @property
    def timed_epochs_s(self) -> tuple[float, ...]:
        """The epochs timing uses: all but the first (tracing, XLA compilation), if any remain."""
        return self.epoch_times_s[1:] or self.epoch_times_s

    @property
    def samples_per_s(self) -> float:
        """Samples per second over the timed epochs (median epoch)."""
        return self.samples_per_epoch / statistics.median(self.timed_epochs_s)

    @property
    def spread_pct(self) -> float | None:
        """How much the timed epochs disagreed, in %: (slowest - fastest) / median timed epoch; None with fewer
        than two timed epochs. (Keras' batch callbacks run on a background thread, late by a varying amount, so
        quarter-epoch rates - ``chunk_rates`` - are shown but not used here.)"""
        t = self.epoch_times_s[1:]
        return 100.0 * (max(t) - min(t)) / statistics.median(t) if len(t) >= 2 else None

    @property
    def startup_s(self) -> float | None:
        """How much longer the first epoch took than a timed one: tracing the step, and XLA's compile."""
        return None if len(self.epoch_times_s) < 2 else self.epoch_times_s[0] - statistics.median(self.timed_epochs_s)

    @property
    def achieved_flops(self) -> float:
        return self.flops_per_sample * self.samples_per_s

    def _rows(self) -> list[tuple[str, str]]:
        extra = [f"XLA {'on' if self.xla else 'off'}"] + (["loss scaling"] if self.loss_scaling else [])
        rows = [("recipe", f"{self.recipe.describe()} ({', '.join(extra)})"), ("device", self.device),
                ("epochs", f"{self.epochs} x {self.samples_per_epoch:,} samples; "
                           + ", ".join(fmt_seconds(t) for t in self.epoch_times_s)),
                ("throughput", f"{fmt_number(self.samples_per_s)} samples/s"
                               + (f" (spread {self.spread_pct:.0f}%)" if self.spread_pct is not None else "")),
                ("first epoch", "N/A" if self.startup_s is None else f"+{fmt_seconds(self.startup_s)} (tracing"
                                + (", XLA compile)" if self.xla else ")")),
                ("test accuracy", "not measured" if self.test_accuracy is None else f"{self.test_accuracy:.1%}"),
                ("peak memory", fmt_bytes(self.peak_memory_bytes))]
        return rows + [("note", n) for n in self.notes]

    def __repr__(self) -> str:
        return "KerasRun\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Keras training run")


def _start() -> tuple[Any, str]:
    """TensorFlow and Keras imported quietly (:func:`course.start_keras`), and the global policy found before."""
    from ..lesson.keras import start_keras

    keras = sys.modules.get("keras")
    before = keras.mixed_precision.global_policy().name if keras is not None else "float32"
    ks = start_keras(seed=None)              # sets the global policy to float32: put the learner's back
    ks.keras.mixed_precision.set_global_policy(before)
    backend = ks.keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(f"the Keras capstone runs Keras on TensorFlow, but Keras uses {backend!r}: unset "
                           "KERAS_BACKEND (or set it to 'tensorflow') and restart the kernel")
    return ks, before


def _timer(keras: Any, steps: int, n: int, batch_size: int, log: Any) -> Any:
    chunk = max(1, steps // 4)

    class EpochTimer(keras.callbacks.Callback):
        # on_train_batch_end runs on Keras' callback thread (async_safe): after the step's logs are read, so
        # after the step ran, without making fit wait on every step as a synchronous batch callback would
        async_safe = True

        def __init__(self) -> None:
            super().__init__()
            self.times: list[float] = []
            self.ticks: list[tuple[int, int, float]] = []
            self.starts: list[float] = []
            self.history: list[tuple[float, float]] = []
            self.epoch = 0

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch = epoch
            self.starts.append(time.perf_counter())

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if self.epoch > 0 and (batch + 1) % chunk == 0:
                self.ticks.append((self.epoch, batch, time.perf_counter()))

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self.times.append(time.perf_counter() - self.starts[-1])
            logs = logs or {}
            self.history.append((float(logs.get("loss", float("nan"))), float(logs.get("accuracy", float("nan")))))
            log(epoch, self.times[-1], self.history[-1])

        def chunk_rates(self) -> tuple[tuple[float, ...], ...]:
            per_epoch = []
            for epoch in range(1, len(self.starts)):
                marks = sorted((b, t) for e, b, t in self.ticks if e == epoch)
                prev_b, prev_t = -1, self.starts[epoch]
                rates = []
                for b, t in marks:
                    done = min((b + 1) * batch_size, n) - min((prev_b + 1) * batch_size, n)
                    if t > prev_t:
                        rates.append(done / (t - prev_t))
                    prev_b, prev_t = b, t
                per_epoch.append(tuple(rates))
            return tuple(per_epoch)

    return EpochTimer()


def train_keras_recipe(recipe: KerasRecipe, data: Digits, *, epochs: int = 3, seed: int = 0,
                       run: Any = None) -> KerasRun:
    """Train the seed's Keras MLP on ``data`` for ``epochs`` epochs the way ``recipe`` says; return a
    :class:`KerasRun`. Throughput comes from the epochs after the first (timed from ``on_epoch_begin`` to
    ``on_epoch_end``; the first pays for tracing and XLA); test accuracy from ``model.evaluate`` on the test set.

    Every call starts from a cleared Keras session, sets the recipe's dtype policy and the seed, and puts the
    global policy back afterwards. ``fit`` runs with ``verbose=0`` (the seed's progress bar is left out).
    ``run`` (an open :func:`gpulab.tracking.track` run) receives each epoch's loss, accuracy, time and
    throughput (step = epoch) and the test accuracy.

    Example:
        >>> from gpulab import course
        >>> course.train_keras_recipe(course.KerasRecipe(), "digits")
        Traceback (most recent call last):
        ...
        TypeError: data must be course.digits(...), got str
    """
    if not isinstance(recipe, KerasRecipe):
        raise TypeError(f"recipe must be a course.KerasRecipe, got {type(recipe).__name__}")
    if not isinstance(data, Digits):
        raise TypeError(f"data must be course.digits(...), got {type(data).__name__}")
    whole("epochs", epochs)
    whole("seed", seed, low=0)
    ks, before = _start()
    tf, keras = ks.tf, ks.keras
    x, y = to_features(data.train_x).numpy(), data.train_y.numpy()
    x_test, y_test = to_features(data.test_x).numpy(), data.test_y.numpy()
    n, bs = int(x.shape[0]), recipe.batch_size
    gpus = tf.config.list_physical_devices("GPU")
    notes: list[str] = []
    try:
        # a fresh graph per run (it resets the policy and the seed too); on a GPU, Python's garbage collector runs
        # as well, so the last run's variables are freed before this run's peak memory is measured
        keras.backend.clear_session(free_memory=bool(gpus))
        keras.mixed_precision.set_global_policy(recipe.policy)
        keras.utils.set_random_seed(seed)
        mixed = recipe.policy != "float32"
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(500, activation="relu"),
                                  keras.layers.Dense(10, dtype="float32" if mixed else None)])
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=recipe.lr),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                      jit_compile=recipe.jit_compile)
        xla = bool(model.jit_compile)
        scaling = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)

        def log(epoch: int, seconds: float, hist: tuple[float, float]) -> None:
            if run is not None:      # a diverged loss (NaN) is shown in the run's history, not logged
                values = {"loss": hist[0], "accuracy": hist[1], "epoch_time_s": seconds, "samples_per_s": n / seconds}
                run.log_metrics({k: v for k, v in values.items() if math.isfinite(v)}, step=epoch)

        timer = _timer(keras, -(-n // bs), n, bs, log)
        if gpus:
            tf.config.experimental.reset_memory_stats("GPU:0")
        if recipe.data == "arrays":
            model.fit(x, y, batch_size=bs, epochs=epochs, verbose=0, callbacks=[timer])
        else:
            ds = (tf.data.Dataset.from_tensor_slices((x, y)).cache().shuffle(n, seed=seed).batch(bs)
                  .prefetch(tf.data.AUTOTUNE))
            model.fit(ds, epochs=epochs, verbose=0, callbacks=[timer], shuffle=False)   # the dataset shuffles
        peak = int(tf.config.experimental.get_memory_info("GPU:0")["peak"]) if gpus else None
        if not gpus:
            notes.append("peak memory not measured: TensorFlow reports its allocator's peak only for GPUs")
        accuracy = float(model.evaluate(x_test, y_test, batch_size=1024, verbose=0, return_dict=True)["accuracy"])
    finally:
        keras.mixed_precision.set_global_policy(before)
    result = KerasRun(recipe, "GPU:0" if gpus else "CPU:0", epochs, n, tuple(timer.times), tuple(timer.history),
                      accuracy, peak, float(_SEED_FLOPS_PER_SAMPLE), xla, scaling, timer.chunk_rates(), tuple(notes))
    if run is not None:
        run.log_metrics({"test_accuracy": accuracy, "samples_per_s_timed": result.samples_per_s,
                         **({"spread_pct": result.spread_pct} if result.spread_pct is not None else {})}, step=epochs)
    return result


@checked(device="devspec")
def keras_changes(*, device: Any = None, batch_size: int = 256, n_train: int | None = None,
                  lr_rule: Literal["linear", "sqrt"] = "sqrt") -> list[Change]:
    """The changes lesson 12 tries on the Keras seed, in order, for ``device`` ("cpu" or "cuda"; default: the
    lessons' device). A change the seed's defaults already make there (XLA on a GPU) is listed with the reason.

    ``batch_size``: the first change's batch, with the learning rate scaled from the seed's by ``lr_rule``:
    "linear" (Goyal et al. 2017: x8 for 256) or "sqrt" (x2.8, the PyTorch side's rule for Adam; on 8,000 images
    and 3 epochs its test accuracy varies less from seed to seed, ~0.4 points against ~1-1.4). The last change
    tries 4x, then 2x, the batch reached so far, with the learning rate scaled by the square root (past 256,
    linear scaling gives Adam rates that need warm-up), and only sizes that leave an epoch of ``n_train`` images
    at least 8 steps."""
    from ...precision import choose_precision
    from ...system import device_kind
    from ..training.batching import scale_lr

    whole("batch_size", batch_size)
    if n_train is not None:
        whole("n_train", n_train)
    if lr_rule not in ("linear", "sqrt"):
        raise ValueError(f"lr_rule must be 'linear' or 'sqrt', got {lr_rule!r}")
    factor = batch_size / 32 if lr_rule == "linear" else (batch_size / 32) ** 0.5
    kind = device_kind() if device is None else str(device).split(":")[0]
    if kind not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'cpu' or 'cuda' (or None: the lessons' device), got {device!r}")
    prec = choose_precision()
    here = (kind == "cuda") == prec.device.startswith("cuda")        # asked about this machine's device
    policy = prec.keras_policy if here else "mixed_bfloat16"
    why = prec.reason if here else "16-bit matmuls with float32 weights (choose_precision() decides on the device)"

    def bigger(r: KerasRecipe) -> list[tuple[str, Mapping[str, Any]]]:
        sizes = [b for b in (4 * r.batch_size, 2 * r.batch_size) if n_train is None or b <= n_train // 8]
        return [(f"batch {b}, lr x{(b / r.batch_size) ** 0.5:.1f}",
                 {"batch_size": b, "lr": scale_lr(r.lr, r.batch_size, b, rule="sqrt")}) for b in sizes]

    return [
        Change(f"batch {batch_size}, lr x{factor:.2g} ({'linear' if lr_rule == 'linear' else 'square-root'} rule)",
               lambda r: {"batch_size": batch_size, "lr": scale_lr(r.lr, r.batch_size, batch_size, rule=lr_rule)},
               why="fewer, larger steps pay Keras' per-step cost less often; the learning rate scaled with the "
                   "batch"),
        Change("tf.data: cache, shuffle, batch, prefetch", {"data": "tf.data"},
               why="a tf.data pipeline that prepares the next batch while the step runs"),
        Change(f"mixed precision ({policy})", {"policy": policy}, why=why),
        Change("XLA (jit_compile=True)", {"jit_compile": True}, available=kind != "cuda", one_off=True,
               why_not="the seed's jit_compile='auto' already compiles with XLA when TensorFlow sees a GPU"),
        Change("larger batch", bigger, why="4x, else 2x, the batch so far, lr scaled by the square root",
               why_not="neither 2x nor 4x the batch leaves an epoch 8 steps"),
        Change(f"mixed precision ({policy}), again on the recipe reached", {"policy": policy},
               why="16-bit matmuls gain more on larger matrices: tried again if a later change (XLA, a larger batch) "
                   "was kept", retry_of=f"mixed precision ({policy})"),
    ]


def _ceiling(device: str) -> Any:
    from ...limits import machine_limits

    def ceiling(recipe: KerasRecipe) -> tuple[str, float] | None:
        # measured once per process; a dtype the device's defaults leave out is measured when first used
        name = _CEILING_DTYPE[recipe.policy]
        return name, machine_limits(device, dtypes=[name]).peak_flops(name)
    return ceiling


def keras_ablation(data: Digits, *, epochs: int = 3, batch_size: int = 256, track: Mapping[str, Any] | None = None,
                   accuracy_tolerance: float = 0.01, lr_rule: Literal["linear", "sqrt"] = "sqrt",
                   accuracy_seeds: int = 2) -> Ablation:
    """Train the Keras seed, then each of :func:`keras_changes` in turn, all for ``epochs`` epochs on ``data``;
    keep a change when it is faster beyond the noise and at least as accurate as the seed's accuracy floor: the
    lowest test accuracy the seed reached over its own seed and ``accuracy_seeds`` more, less ``accuracy_tolerance``
    (its seed-to-seed spread is about a point here, so one run alone would be a lottery).

    The share of the ceiling divides by this machine's measured matmul peak (:func:`gpulab.limits.machine_limits`,
    measured with PyTorch) in the policy's compute dtype. ``track``: keyword arguments of
    :func:`gpulab.tracking.track` (e.g. ``{"experiment": "capstone-keras", "root": "runs"}``). ``lr_rule``: how the
    first change scales the learning rate (see :func:`keras_changes`).
    """
    if not isinstance(data, Digits):
        raise TypeError(f"data must be course.digits(...), got {type(data).__name__}")
    whole("epochs", epochs)
    whole("accuracy_seeds", accuracy_seeds, low=0)
    whole("batch_size", batch_size)
    _fraction("accuracy_tolerance", accuracy_tolerance)
    if lr_rule not in ("linear", "sqrt"):
        raise ValueError(f"lr_rule must be 'linear' or 'sqrt', got {lr_rule!r}")
    if track is not None and not isinstance(track, Mapping):
        raise TypeError(f"track must be a dict such as {{'root': 'runs', 'experiment': 'capstone-keras'}}, got "
                        f"{type(track).__name__} {track!r:.60}")
    ks, _ = _start()
    gpu = bool(ks.tf.config.list_physical_devices("GPU"))
    device = "cuda" if gpu else "cpu"
    changes = keras_changes(device=device, batch_size=batch_size, n_train=data.n_train, lr_rule=lr_rule)
    table = ablate(lambda r, run: train_keras_recipe(r, data, epochs=epochs, run=run), KerasRecipe(), changes,
                   apply=lambda r, f: replace(r, **f), describe=KerasRecipe.describe, params=KerasRecipe.params,
                   ceiling=_ceiling(device), title=f"Keras: the seed loop, one change at a time ({device})",
                   accuracy_tolerance=accuracy_tolerance, track=track, device=device, epochs=epochs,
                   rerun=lambda r, seed: train_keras_recipe(r, data, epochs=epochs, seed=seed).test_accuracy,
                   accuracy_seeds=accuracy_seeds)
    notes = [f"{data.n_train:,} training images ({data.source}), test accuracy on {data.n_test:,}",
             f"the seed's jit_compile='auto' is XLA {'on' if gpu else 'off'} here (Keras turns XLA on only when "
             f"TensorFlow sees a GPU)"]
    if not gpu:
        notes.append("peak memory not measured: TensorFlow reports its allocator's peak only for GPUs")
    return replace(table, notes=tuple(notes))
