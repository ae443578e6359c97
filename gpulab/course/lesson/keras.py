"""Starting TensorFlow and Keras in a lesson: one call instead of the same lines in every notebook.

:func:`start_keras` imports TensorFlow through :func:`gpulab._tf.import_tensorflow` (Triton first: TensorFlow
loaded before Triton crashes PyTorch's compiler later), asks TensorFlow to take GPU memory only as it needs it
(where there is a GPU, so that PyTorch can share it), quiets TensorFlow's logs, seeds Python, NumPy and
TensorFlow, and sets Keras' global dtype policy. It does not start TensorFlow's devices, so logical devices (e.g.
``gpulab.distributed.mirrored_strategy(cpu_devices=2)``) can still be configured afterwards. When PyTorch has
already used the GPU in this process, the blocks its caching allocator keeps (after a sweep or
``find_max_batch_size``, often most of the card) go back to the driver first
(``gpulab.memory.recover_memory``: garbage collected, ``torch.cuda.empty_cache()``), so TensorFlow does not start on
a card that looks full (an out-of-memory error, or "failed to create cublas handle"). Tensors the notebook still
references stay: delete the ones it no longer needs before (``gl.memory.recover_memory(globals(), [...])``).

Example:
    >>> start_keras(policy="mixed_fp8")
    Traceback (most recent call last):
    ...
    ValueError: policy must be one of 'float32', 'mixed_float16', 'mixed_bfloat16', got 'mixed_fp8'
"""
from __future__ import annotations

import html
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Literal

from ..._format import fmt_bytes
from ..._tf import import_tensorflow

__all__ = ["KerasSetup", "start_keras", "release_torch_cache", "POLICIES"]

POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
Policy = Literal["float32", "mixed_float16", "mixed_bfloat16"]


@dataclass(frozen=True, repr=False)
class KerasSetup:
    """What :func:`start_keras` did: the modules to use (``tf``, ``keras``) and the facts it set, read once.

    Example:
        >>> import types
        >>> KerasSetup(types.ModuleType("tf"), types.ModuleType("keras"), "2.21.0", "3.15.1", (), None,
        ...            "float32", 0).banner
        'TensorFlow 2.21.0, Keras 3.15.1: CPU only (TensorFlow sees no GPU); policy float32; seed 0'
    """

    tf: ModuleType = field(compare=False)
    keras: ModuleType = field(compare=False)
    tensorflow_version: str
    keras_version: str
    gpus: tuple[str, ...]            # physical GPUs TensorFlow can see (names like "/physical_device:GPU:0")
    memory_growth: bool | None       # None: no GPU to grow on
    policy: str
    seed: int | None
    notes: tuple[str, ...] = ()

    @property
    def banner(self) -> str:
        where = f"{len(self.gpus)} GPU(s)" if self.gpus else "CPU only (TensorFlow sees no GPU)"
        growth = {True: ", GPU memory on demand", False: ", GPU memory taken at start", None: ""}[self.memory_growth]
        seed = "not seeded" if self.seed is None else f"seed {self.seed}"
        return (f"TensorFlow {self.tensorflow_version}, Keras {self.keras_version}: {where}{growth}; "
                f"policy {self.policy}; {seed}")

    def __repr__(self) -> str:
        return "\n".join((self.banner, *self.notes))

    def _repr_html_(self) -> str:
        notes = "".join(f"<br><small>{html.escape(n)}</small>" for n in self.notes)
        return f'<div style="border-left:4px solid #e8710a;padding:4px 8px">{html.escape(self.banner)}{notes}</div>'


def start_keras(*, seed: int | None = 0, policy: Policy = "float32", memory_growth: bool = True,
                quiet: bool = True) -> KerasSetup:
    """Import TensorFlow (Triton first) and Keras, set them up for a lesson, and return a :class:`KerasSetup`.

    Args:
        seed: seeds Python, NumPy and TensorFlow (``keras.utils.set_random_seed``); None leaves them alone.
        policy: Keras' global dtype policy, for layers built afterwards (``"mixed_bfloat16"``, ``"mixed_float16"``).
        memory_growth: let TensorFlow take GPU memory as it needs it instead of nearly all of every GPU at start,
            so PyTorch in the same process finds room. Possible only before TensorFlow has set up its GPUs: if it
            already has, ``notes`` says so (restart the kernel). No effect without a GPU.
        quiet: TensorFlow's C++ logs at errors only (``TF_CPP_MIN_LOG_LEVEL=3`` unless already set; read when
            TensorFlow is first imported) and its Python logger at ERROR (e.g. MirroredStrategy's all-reduce logs).

    Use the returned modules: ``ks = start_keras(); tf, keras = ks.tf, ks.keras``.

    Example:
        >>> start_keras(seed="0")          # checked before TensorFlow is imported
        Traceback (most recent call last):
        ...
        TypeError: seed must be a whole number or None, got '0'
        >>> ks = start_keras(seed=0, policy="mixed_bfloat16")   # doctest: +SKIP
        >>> ks.keras.mixed_precision.global_policy().name        # doctest: +SKIP
        'mixed_bfloat16'
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise TypeError(f"seed must be a whole number or None, got {seed!r}")
    if seed is not None and seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed!r}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(map(repr, POLICIES))}, got {policy!r}")
    for name, value in (("memory_growth", memory_growth), ("quiet", quiet)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False, got {value!r}")

    notes: list[str] = []
    chosen = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower()
    grow = memory_growth and chosen != "false"                 # "false" in the environment: the learner's choice
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if grow and "tensorflow" not in sys.modules:
        os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"     # read when TensorFlow sets up a GPU
    released = release_torch_cache()
    if released is not None:
        notes.append(released)
    tf = import_tensorflow()
    import keras

    if quiet:
        tf.get_logger().setLevel("ERROR")
    physical = tf.config.list_physical_devices("GPU")         # listing does not start the devices
    growth: bool | None = None
    if physical:
        try:
            if grow:
                for gpu in physical:
                    tf.config.experimental.set_memory_growth(gpu, True)
            growth = grow or os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true"
        except RuntimeError:        # the GPUs are set up already: too late in this process
            growth = bool(tf.config.experimental.get_memory_growth(physical[0]))
            notes.append("TensorFlow had already set up its GPUs, so memory growth could not be turned on: restart "
                         "the kernel and call start_keras() before any other TensorFlow code")
    keras.mixed_precision.set_global_policy(policy)
    if seed is not None:
        keras.utils.set_random_seed(seed)
    if policy == "mixed_float16":
        notes.append("mixed_float16: compile() wraps the optimizer in a LossScaleOptimizer (Keras' GradScaler)")
    return KerasSetup(tf, keras, tf.__version__, keras.__version__, tuple(d.name for d in physical), growth, policy,
                      seed, tuple(notes))


def release_torch_cache() -> str | None:
    """Return the GPU memory PyTorch's caching allocator holds but no tensor uses to the driver, so that another
    framework in this process (TensorFlow) finds it free; a sentence saying how much, or None when PyTorch has not
    used a GPU here (PyTorch is not imported, nor is CUDA started, by this call).

    Example:
        >>> release_torch_cache() is None or release_torch_cache().startswith("PyTorch")
        True
    """
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return None
    from ...memory import recover_memory

    before = int(torch.cuda.memory_reserved())
    recover_memory(clear_exception=False, clear_outputs=False)      # gc.collect(), torch.cuda.empty_cache()
    after, live = int(torch.cuda.memory_reserved()), int(torch.cuda.memory_allocated())
    return (f"PyTorch's CUDA cache returned to the driver before TensorFlow: {fmt_bytes(before - after)} "
            f"({fmt_bytes(live)} still in live PyTorch tensors)")
