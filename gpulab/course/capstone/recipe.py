"""The capstone's PyTorch loop: the seed's MNIST training loop as written, and every change the course
taught as one switch on a :class:`Recipe`, so one function trains any combination and says what it did.

The seed loop (an MLP 784-500-10, batch 32, a ``DataLoader`` whose dataset converts each image with
``ToTensor``, Adam at lr 1e-3, ``loss.item()`` every 100 steps) is ``Recipe()``. The switches: batch size
and learning rate; where the data lives ("per-sample" through a DataLoader, "host" tensors, "device"
tensors, or "disk" files through a DataLoader); DataLoader workers and pinned memory; autocast precision
(bf16, or fp16 with a GradScaler); TF32; Adam's implementation; ``torch.compile``.

Example:
    >>> from gpulab import course
    >>> d = course.digits(n_train=256, n_test=64, download=False)
    >>> r = course.train_recipe(course.Recipe(batch_size=64, data="host"), d, epochs=2)
    >>> r.samples_per_epoch, 0.0 <= r.test_accuracy <= 1.0, r.samples_per_s > 0
    (256, True, True)
"""
from __future__ import annotations

import contextlib
import math
import numbers
import time
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Iterator, Literal

from ..._check import checked, path_arg, whole
from ...compiling import keep_subnormals
from .data import Batches as _Batches, check_pixels, digits_on_disk, features
from .data import _grey  # noqa: F401
from ..compilers.guard import CompileGuard
from .digits import Digits
from .recipe_run import RecipeRun, _quarter_spread  # noqa: F401

__all__ = ["Recipe", "RecipeRun", "train_recipe", "recipe_stepper", "seed_model", "digits_on_disk"]

Data = Literal["per-sample", "host", "device", "disk"]
Precision = Literal["fp32", "bf16", "fp16"]
OptimizerImpl = Literal["default", "foreach", "fused"]
Schedule = Literal["constant", "cosine"]
WARMUP_SHARE = 0.05     # the "cosine" schedule's linear warm-up: this share of the run's steps


@dataclass(frozen=True)
class Recipe:
    """How to train the seed's MLP. ``Recipe()`` is the seed loop as written.

    data: "per-sample" (a DataLoader over a dataset that makes a PIL image and runs ``ToTensor`` per
        sample, like ``torchvision.datasets.MNIST``), "host" (the whole set converted once to a float tensor in
        host memory, batches sliced from it and copied), "device" (that tensor copied to the device once) or
        "disk" (image files read by ``ImageFolder`` through a DataLoader).
    workers / pin_memory: DataLoader worker processes, and page-locked host memory with ``non_blocking``
        copies (CUDA only; "host" data is gathered once per epoch into a pinned tensor).
    precision: autocast to "bf16", or "fp16" with a GradScaler; "fp32" is no autocast.
    tf32: fp32 matmuls on TF32 tensor cores (Ampere and newer GPUs).
    optimizer: Adam's "default" implementation (torch picks), "foreach" or "fused".
    compile: ``torch.compile`` the model (the first epoch pays for compilation; timing skips it). Dynamo is reset
        for each compiled recipe, and a first step that ran eager (the recompile limit hit) raises RuntimeError.
    cuda_graphs: compile with ``mode="reduce-overhead"``: the forward and backward kernels are recorded once as
        CUDA graphs and replayed with one launch each (a CUDA GPU only; implies ``compile``).
    log_every: read the loss with ``.item()`` every this many steps, as the seed does (a host-device sync).
    schedule: "constant" (the seed's Adam at ``lr`` throughout) or "cosine": a linear warm-up over the first 5%
        of the run's steps to ``lr``, then half a cosine down to zero at the last step
        (:func:`course.cosine_factor`). Larger batches make fewer updates per epoch; the decay lets those few land
        near a minimum, which keeps the seed's accuracy in the same epochs.
    """

    batch_size: int = 32
    lr: float = 1e-3
    data: Data = "per-sample"
    workers: int = 0
    pin_memory: bool = False
    precision: Precision = "fp32"
    tf32: bool = False
    optimizer: OptimizerImpl = "default"
    compile: bool = False
    cuda_graphs: bool = False
    log_every: int = 100
    schedule: Schedule = "constant"

    def __post_init__(self) -> None:
        for name, low in (("batch_size", 1), ("workers", 0), ("log_every", 1)):   # NumPy integers stored as int
            object.__setattr__(self, name, whole(name, getattr(self, name), low=low))
        if isinstance(self.lr, bool) or not isinstance(self.lr, numbers.Real) or not 0 < self.lr < 10:
            raise ValueError(f"lr must be a positive learning rate below 10, got {self.lr!r}")
        if not isinstance(self.lr, (int, float)):                 # a NumPy float: stored as a Python float
            object.__setattr__(self, "lr", float(self.lr))
        for name, value, allowed in (("data", self.data, ("per-sample", "host", "device", "disk")),
                                     ("precision", self.precision, ("fp32", "bf16", "fp16")),
                                     ("optimizer", self.optimizer, ("default", "foreach", "fused")),
                                     ("schedule", self.schedule, ("constant", "cosine"))):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        for name in ("pin_memory", "tf32", "compile", "cuda_graphs"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, got {getattr(self, name)!r}")

    def params(self) -> dict[str, Any]:
        """The recipe as a flat dict (what experiment trackers log as parameters)."""
        return asdict(self)

    def describe(self) -> str:
        """One line: batch, lr, data path, precision and the switches that are on."""
        on = [name for name in ("pin_memory", "tf32", "compile", "cuda_graphs") if getattr(self, name)]
        parts = [f"batch {self.batch_size}", f"lr {self.lr:.3g}" + (" cosine" if self.schedule == "cosine" else ""),
                 f"data {self.data}", self.precision, f"Adam {self.optimizer}"]
        if self.workers:
            parts.append(f"{self.workers} workers")
        return ", ".join(parts + on)


def seed_model() -> Any:
    """The seed's network: 784 -> 500 -> ReLU -> 10."""
    from ..lesson.models import mlp

    return mlp(784, 500, 10, layers=1)


def _optimizer(recipe: Recipe, params: Any) -> Any:
    import torch

    kw = {"foreach": True} if recipe.optimizer == "foreach" else {"fused": True} if recipe.optimizer == "fused" else {}
    return torch.optim.Adam(params, lr=recipe.lr, **kw)


def _tf32(recipe: Recipe, dev: Any) -> Any:
    if not recipe.tf32:
        return contextlib.nullcontext()
    from ..machine.tf32 import tf32, tf32_supported

    if not tf32_supported(dev):
        raise ValueError(f"tf32=True needs a CUDA GPU of compute capability 8.0 or newer; {dev} has none: "
                         "use Recipe(tf32=False)")
    return tf32(True)


@contextlib.contextmanager
def keep_rng(dev: Any = None) -> Iterator[None]:
    """Leave the caller's random number generators as they were: torch's CPU generator (and ``dev``'s when it is a
    CUDA device), Python's ``random`` and NumPy's global generator are restored on the way out, also on an error.

    Example:
        >>> import random, torch
        >>> before = torch.get_rng_state(), random.getstate()
        >>> with keep_rng():
        ...     _ = torch.manual_seed(1), torch.rand(3), random.random()
        >>> torch.equal(torch.get_rng_state(), before[0]), random.getstate() == before[1]
        (True, True)
    """
    import random
    import sys

    import torch

    devices = []
    if dev is not None and torch.device(dev).type == "cuda":
        index = torch.device(dev).index
        devices = [torch.cuda.current_device() if index is None else index]
    np_mod = sys.modules.get("numpy")
    py_state = random.getstate()
    np_state = np_mod.random.get_state() if np_mod is not None else None
    try:
        with torch.random.fork_rng(devices=devices, device_type="cuda"):
            yield
    finally:
        random.setstate(py_state)
        if np_state is not None:
            np_mod.random.set_state(np_state)


def _seeded_model(seed: int, dev: Any) -> Any:
    """The seed model initialised from ``seed`` (as ``torch.manual_seed(seed)`` would), on ``dev``, with the caller's
    generators left as they were."""
    import torch

    with keep_rng(dev):
        torch.default_generator.manual_seed(seed)    # the CPU generator alone: the weights are made on the CPU
        if dev.type == "cuda":
            with torch.cuda.device(dev):
                torch.cuda.manual_seed(seed)
        return seed_model().to(dev)


class _Trainer:
    """The seed model, its optimizer and the recipe's data path on one device, and one training step."""

    def __init__(self, recipe: Recipe, data: Digits, device: Any, seed: int, disk_root: str | Path | None,
                 epochs: int = 3) -> None:
        import torch

        from ...system import device as pick_device
        from ..lesson.loop import TrainConfig, make_scaler

        if not isinstance(recipe, Recipe):
            raise TypeError(f"recipe must be a course.Recipe, got {type(recipe).__name__}")
        if not isinstance(data, Digits):
            raise TypeError(f"data must be course.digits(...), got {type(data).__name__}")
        seed = whole("seed", seed, low=0)
        self.recipe = recipe
        check_pixels(data.test_x, "data.test_x")
        self.dev = dev = pick_device(None if device is None else str(device))
        self.model = _seeded_model(seed, dev)
        self.optimizer = _optimizer(recipe, self.model.parameters())
        if recipe.cuda_graphs and dev.type != "cuda":
            raise ValueError(f"cuda_graphs=True records CUDA graphs: it needs a CUDA GPU, and {dev} is not one: use "
                             "Recipe(cuda_graphs=False)")
        # each compiled recipe compiles afresh (Dynamo reset), and its first step must have run compiled
        lever = "cuda_graphs (torch.compile mode='reduce-overhead')" if recipe.cuda_graphs else "compile"
        self.compile_guard = (CompileGuard(f"Recipe({recipe.describe()}), its {lever} lever")
                              if recipe.compile or recipe.cuda_graphs else None)
        self.run_model = (torch.compile(self.model, mode="reduce-overhead") if recipe.cuda_graphs
                          else torch.compile(self.model) if recipe.compile else self.model)
        self.scaler = make_scaler(TrainConfig(precision=recipe.precision), dev.type)
        dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[recipe.precision]
        self.autocast = (lambda: torch.autocast(dev.type, dtype=dtype)) if dtype is not None else contextlib.nullcontext
        self.batches = _Batches(recipe, data, dev, seed, Path(disk_root) if disk_root else None)
        self.lr_factor = None                     # the schedule, resolved once: step -> multiplier of recipe.lr
        if recipe.schedule == "cosine":
            from ..training.batching import cosine_factor

            total = epochs * self.batches.steps_per_epoch()
            self.lr_factor = partial(cosine_factor, total_steps=total,
                                     warmup_steps=min(total - 1, int(WARMUP_SHARE * total)))
        self.steps_done = 0

    def step(self, x: Any, y: Any) -> Any:
        if self.compile_guard is not None and not self.compile_guard.checked:    # compiled, or a RuntimeError
            return self.compile_guard.first_step(self._step, x, y)
        return self._step(x, y)

    def _step(self, x: Any, y: Any) -> Any:
        import torch
        import torch.nn.functional as F

        if self.lr_factor is not None:
            lr = self.recipe.lr * self.lr_factor(self.steps_done)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
        self.steps_done += 1
        if self.recipe.cuda_graphs:     # a new training iteration: the graphs' previous outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        with self.autocast():
            loss = F.cross_entropy(self.run_model(x), y)
        self.optimizer.zero_grad()
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss


@checked(device="device")
def recipe_stepper(recipe: Recipe, data: Digits, *, device: Any = None, seed: int = 0) -> Any:
    """One training step of ``recipe`` per call (its data path included, epoch after epoch), returning the batch
    size: what :func:`gpulab.benchmark_interleaved` times to compare two recipes under the same conditions.

    Example:
        >>> from gpulab import course
        >>> step = recipe_stepper(course.Recipe(batch_size=16, data="host"), course.digits(64, 8, download=False))
        >>> [step() for _ in range(5)]
        [16, 16, 16, 16, 16]
    """
    t = _Trainer(recipe, data, device, seed, None)
    state: dict[str, Any] = {"it": iter(())}

    def step() -> int:
        x, y = _next_batch(t, state)
        with _tf32(recipe, t.dev):
            t.step(x, y)
        return int(y.shape[0])
    return step


@checked(device="device")
def train_recipe(recipe: Recipe, data: Digits, *, epochs: int = 3, device: Any = None, seed: int = 0,
                 run: Any = None, disk_root: str | Path | None = None) -> RecipeRun:
    """Train the seed's MLP on ``data`` for ``epochs`` epochs the way ``recipe`` says; return a
    :class:`RecipeRun`. Throughput comes from the epochs after the first (the device synchronised at each
    epoch's end); test accuracy from the whole test set after each epoch (outside its clock), the last one's
    is ``test_accuracy``.

    Pixels may be uint8 (0-255, divided by 255) or floats already in [0, 1] (used as they are); floats outside
    [0, 1] are a ``ValueError``. The same ``seed`` gives the same run, and the caller's random generators (torch,
    Python's, NumPy's) are left as they were. DataLoader workers are shut down on the way out, also when the
    loop is interrupted.

    A loss that becomes NaN or infinite (read every ``log_every`` steps and at each epoch's end) stops training:
    the result is ``diverged`` (``diverged_at_step``, test accuracy NaN, a note saying what to change).

    ``run`` (an open :func:`gpulab.tracking.track` run) receives the losses the loop reads (``loss``, at
    their step), each epoch's time and throughput, and the test accuracy; a diverged run gets its finite values
    and the parameter ``diverged_at_step``.
    """
    epochs = whole("epochs", epochs)
    if run is not None and not callable(getattr(run, "log_metrics", None)):
        raise TypeError(f"run must be an open gl.tracking.track(...) run (or None), got {run!r:.60}")
    if disk_root is not None:
        path_arg("disk_root", disk_root)
    t = _Trainer(recipe, data, device, seed, disk_root, epochs)
    try:
        with keep_rng(t.dev), keep_subnormals():       # compile=True on torch 2.5 would flush them for good
            return _train(t, data, epochs, run)
    finally:
        t.batches.close()


def _diverged_note(recipe: Recipe, step: int, value: float) -> str:
    fixes = [f"lower the learning rate (lr={recipe.lr:g})"]
    if recipe.precision == "fp16":
        fixes.append("turn off fp16 autocast (precision='bf16' or 'fp32')")
    if recipe.schedule == "constant":
        fixes.append("turn on the warm-up (schedule='cosine')")
    return f"diverged at step {step}: loss is {value} \u2014 " + " or ".join(fixes)


def _train(t: _Trainer, data: Digits, epochs: int, run: Any) -> RecipeRun:
    import torch
    import torch.nn.functional as F

    from ...memory.accounting import _optimizer_state_tensors, _tensor_bytes
    from ...roofline import count_flops
    from ...telemetry.energy import EnergyMeter
    from ...timing import synchronize
    from ..lesson.runs import _step_memory

    recipe = t.recipe
    dev, model, run_model, optimizer, autocast, batches = (t.dev, t.model, t.run_model, t.optimizer, t.autocast,
                                                           t.batches)
    cuda = dev.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats(dev)
    times: list[float] = []
    meter, energies = EnergyMeter(dev.type if dev.index is None else str(dev)), []   # each epoch's, from its counter
    chunks: list[tuple[float, ...]] = []
    chunk = max(1, batches.steps_per_epoch() // 4)
    losses: list[tuple[int, float]] = []
    accuracies: list[float] = []                          # the test accuracy after each finished epoch
    step = per_epoch = 0
    diverged: int | None = None
    with _tf32(recipe, dev):
        for epoch in range(epochs):
            synchronize(dev)
            meter.start()
            t0 = tc = time.perf_counter()
            seen = chunk_seen = 0
            quarters: list[float] = []
            for i, (x, y) in enumerate(batches.epoch(), start=1):
                loss = t.step(x, y)
                step += 1
                seen += int(y.shape[0])
                chunk_seen += int(y.shape[0])
                if step % recipe.log_every == 0:          # the seed's print(loss.item()): a sync
                    losses.append((step, float(loss.item())))
                    if not math.isfinite(losses[-1][1]):
                        diverged = step
                        break
                    if run is not None:
                        run.log_metrics({"loss": losses[-1][1]}, step=step)
                if epoch > 0 and i % chunk == 0:          # quarter epochs: how steady the timed epochs ran
                    synchronize(dev)
                    now = time.perf_counter()
                    quarters.append(chunk_seen / (now - tc))
                    tc, chunk_seen = now, 0
            synchronize(dev)
            elapsed = time.perf_counter() - t0            # before the counter's read, which is not the epoch's
            energies.append(meter.stop())
            if diverged is not None:                      # an unfinished epoch: neither timed nor counted
                break
            times.append(elapsed)
            per_epoch = seen
            accuracies.append(_accuracy(run_model, data, dev, autocast))   # after the epoch's clock: not timed
            if epoch > 0:
                chunks.append(tuple(quarters))
            if run is not None:
                run.log_metrics({"epoch_time_s": times[-1], "samples_per_s": seen / times[-1],
                                 "epoch_test_accuracy": accuracies[-1]}, step=epoch)
            if not math.isfinite(float(loss.item())):     # after the timing: a read of a loss already computed
                diverged = step
                break
        if not losses or losses[-1][0] != step:
            losses.append((step, float(loss.item())))
        accuracy = math.nan if diverged is not None else accuracies[-1]
        # memory: the CUDA allocator's peak over the whole run; elsewhere what stays resident (weights,
        # optimizer state, data held on the device) plus what one more step allocates at its peak
        if cuda:
            peak, method = int(torch.cuda.max_memory_allocated(dev)), "cuda-allocator"
        else:
            x, y = next(iter(batches.epoch()))
            resident = _tensor_bytes([*model.parameters(), *_optimizer_state_tensors(optimizer), *batches.resident()])
            optimizer.zero_grad(set_to_none=True)      # so the backward below allocates its gradients
            with _step_memory(dev) as grown:
                with autocast():
                    F.cross_entropy(model(x), y).backward()
            optimizer.zero_grad()
            peak, method = int(resident + grown["bytes"]), "tracked-tensors"
    flops = count_flops(lambda: F.cross_entropy(model(x[:1]), y[:1]).backward())
    model.zero_grad()
    notes = (_diverged_note(recipe, diverged, losses[-1][1]),) if diverged is not None else ()
    energies = energies[:len(times)]
    if diverged is None:        # GPU epochs too short for NVML's counter: charged a block of the same steps run alone
        from ..lesson.step_energy import charge_short_windows

        energies = list(charge_short_windows(energies, _steps_alone(t)))
    unread = next((e.reason for e in energies if not e.measured), None)
    result = RecipeRun(recipe, str(dev), epochs, per_epoch or data.n_train, tuple(times), tuple(losses), accuracy, peak,
                       float(flops), method, tuple(chunks), notes=notes, diverged_at_step=diverged,
                       epoch_joules=tuple(e.joules for e in energies), energy_reason=unread,
                       energy_source=next((e.source for e in energies if e.measured), ""),
                       epoch_accuracies=tuple(accuracies))
    if run is not None:
        final = {"test_accuracy": accuracy, "samples_per_s_timed": result.samples_per_s,
                 **({"spread_pct": result.spread_pct} if result.spread_pct is not None else {})}
        run.log_metrics({k: v for k, v in final.items() if math.isfinite(v)}, step=epochs)
        if diverged is not None:
            run.log_params({"diverged_at_step": diverged})
    return result


def _steps_alone(t: _Trainer) -> Any:
    """The trained recipe's step, batch after batch and epoch after epoch, at learning rate 0 (the same work; the
    weights stay as trained): what a block charged to epochs too short for the GPU's energy counter runs."""
    state: dict[str, Any] = {"it": iter(())}

    def step() -> None:
        if t.lr_factor is not None or any(g["lr"] for g in t.optimizer.param_groups):
            t.lr_factor = None
            for group in t.optimizer.param_groups:
                group["lr"] = 0.0
        x, y = _next_batch(t, state)
        with _tf32(t.recipe, t.dev):
            t.step(x, y)
    return step


def _accuracy(model: Any, d: Digits, dev: Any, autocast: Any) -> float:
    import torch

    was = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        x, y = features(d.test_x, "data.test_x"), d.test_y
        for i in range(0, d.n_test, 2048):
            with autocast():
                out = model(x[i:i + 2048].to(dev))
            correct += int((out.argmax(1).cpu() == y[i:i + 2048]).sum())
    model.train(was)
    return correct / d.n_test


def with_changes(recipe: Recipe, **changes: Any) -> Recipe:
    """``recipe`` with some fields changed (validated)."""
    return replace(recipe, **changes)


def _next_batch(t: Any, state: dict[str, Any]) -> Any:
    """The trainer's next batch, starting a new epoch when one ends (its copies done before its buffers refill)."""
    try:
        return next(state["it"])
    except StopIteration:
        from ...timing import synchronize

        synchronize(t.dev)
        state["it"] = t.batches.epoch()
        return next(state["it"])
