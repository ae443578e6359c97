"""GPU memory settings that must be chosen before the GPU starts, and the parts of an out-of-memory message they
explain: PyTorch's ``PYTORCH_CUDA_ALLOC_CONF`` (``expandable_segments``, ``max_split_size_mb``), the "allowed" part
of a capped CUDA message, and TensorFlow's memory growth, logical memory limit and OOM message.

- :func:`alloc_conf` writes the ``PYTORCH_CUDA_ALLOC_CONF`` value; :func:`allocator_probe` runs a fragmenting
  allocation pattern in a fresh Python with it (the variable is read once, when CUDA initialises, so a running
  notebook cannot change it); without CUDA it says so and runs nothing.
- :func:`allowed_bytes` reads "X allowed;" from a CUDA out-of-memory message, present when
  ``torch.cuda.set_per_process_memory_fraction`` capped the allocator.
- :func:`tf_limit_gpu_memory` applies TensorFlow's memory growth or a logical memory limit to every GPU (before
  TensorFlow uses them); :func:`parse_tf_oom` reads TensorFlow's "OOM when allocating tensor" text.

Example:
    >>> from gpulab import course
    >>> course.alloc_conf(expandable_segments=True)
    'expandable_segments:True'
    >>> course.allowed_bytes("... this process has 1.90 GiB memory in use. 2.00 GiB allowed; Of the allocated ...")
    2147483648
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["alloc_conf", "allowed_bytes", "allocator_probe", "AllocatorRun", "ALLOC_CONF_ENV", "PROBE_SCRIPT",
           "tf_limit_gpu_memory", "parse_tf_oom", "TFOOM", "TF_OOM_EXAMPLE"]

ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"     # newer PyTorch also reads PYTORCH_ALLOC_CONF
_UNITS = {"B": 1, "bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}

# A fragmenting pattern: blocks of 7 sizes, every other one freed, then one block larger than any hole.
PROBE_SCRIPT = """
import json, os, torch
torch.zeros(1, device="cuda")
blocks = [torch.empty((i % 7 + 1) * 5 * 2**20, dtype=torch.uint8, device="cuda") for i in range(120)]
del blocks[::2]
big = torch.empty(300 * 2**20, dtype=torch.uint8, device="cuda")
torch.cuda.synchronize()
s = torch.cuda.memory_stats()
print(json.dumps({"conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "segments": s.get("segment.all.current"),
                  "reserved_bytes": torch.cuda.memory_reserved(), "allocated_bytes": torch.cuda.memory_allocated()}))
"""


def alloc_conf(*, expandable_segments: bool | None = None, max_split_size_mb: int | None = None) -> str:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` value for these options ("" for PyTorch's defaults).

    Example:
        >>> alloc_conf(max_split_size_mb=128)
        'max_split_size_mb:128'
    """
    parts = []
    if expandable_segments is not None:
        if not isinstance(expandable_segments, bool):
            raise TypeError(f"expandable_segments must be True, False or None, got {expandable_segments!r}")
        parts.append(f"expandable_segments:{expandable_segments}")
    if max_split_size_mb is not None:
        if isinstance(max_split_size_mb, bool) or not isinstance(max_split_size_mb, int) or max_split_size_mb <= 20:
            raise ValueError(f"max_split_size_mb must be a whole number of MB > 20 (PyTorch's minimum), "
                             f"got {max_split_size_mb!r}")
        parts.append(f"max_split_size_mb:{max_split_size_mb}")
    return ",".join(parts)


def allowed_bytes(text: str) -> int | None:
    """The "X allowed" figure of a CUDA out-of-memory message, in bytes: the cap that
    ``torch.cuda.set_per_process_memory_fraction`` put on the allocator (fraction x total capacity); None when
    the message has none (no cap was set).

    Example:
        >>> allowed_bytes("CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 14.75 GiB")
    """
    if not isinstance(text, str):
        raise TypeError(f"allowed_bytes needs the error text, got {type(text).__name__}")
    m = re.search(r"([\d.]+)\s*(B|bytes|KiB|MiB|GiB|TiB) allowed;", text)
    return None if m is None else int(round(float(m.group(1)) * _UNITS[m.group(2)]))


@dataclass(frozen=True)
class AllocatorRun:
    """What the allocator held after :data:`PROBE_SCRIPT` ran with one ``PYTORCH_CUDA_ALLOC_CONF``."""

    conf: str
    ran: bool
    segments: int | None = None
    reserved_bytes: int | None = None
    allocated_bytes: int | None = None
    note: str = ""

    @property
    def cached_unused_bytes(self) -> int | None:
        if self.reserved_bytes is None or self.allocated_bytes is None:
            return None
        return self.reserved_bytes - self.allocated_bytes

    def __repr__(self) -> str:
        if not self.ran:
            return f"AllocatorRun({self.conf or 'defaults'}: not run - {self.note})"
        return (f"AllocatorRun({self.conf or 'defaults'}: {self.segments} segments, reserved "
                f"{self.reserved_bytes / 2**20:.0f} MiB, allocated {self.allocated_bytes / 2**20:.0f} MiB)")


def allocator_probe(conf: str, *, cuda_available: bool | None = None, runner: Callable[..., Any] = subprocess.run,
                    python: str = sys.executable, timeout_s: float = 120.0) -> AllocatorRun:
    """Run :data:`PROBE_SCRIPT` in a fresh Python whose ``PYTORCH_CUDA_ALLOC_CONF`` is ``conf`` and read back the
    allocator's segments, reserved and allocated bytes. Without CUDA nothing runs (``ran=False``).

    Example:
        >>> allocator_probe("expandable_segments:True", cuda_available=False).ran
        False
    """
    if not isinstance(conf, str):
        raise TypeError(f"conf must be a PYTORCH_CUDA_ALLOC_CONF value (a text), got {conf!r}")
    if cuda_available is None:
        from ...system import device_kind

        cuda_available = device_kind() == "cuda"
    if not cuda_available:
        return AllocatorRun(conf, False, note="needs a CUDA GPU: the setting configures PyTorch's CUDA allocator")
    env = {**os.environ, ALLOC_CONF_ENV: conf}
    env.pop("PYTORCH_ALLOC_CONF", None)          # one source of truth for the child
    done = runner([python, "-c", PROBE_SCRIPT], capture_output=True, text=True, timeout=timeout_s, env=env)
    lines = [ln for ln in (done.stdout or "").splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        err = (done.stderr or "").strip().splitlines()
        return AllocatorRun(conf, False, note=f"the probe failed: {err[-1] if err else 'no output'}")
    got = json.loads(lines[-1])
    return AllocatorRun(conf, True, got.get("segments"), got.get("reserved_bytes"), got.get("allocated_bytes"))


# ---------------------------------------------------------------------------------------------- TensorFlow
def tf_limit_gpu_memory(tf: Any, *, memory_limit_mb: int | None = None, growth: bool = False) -> list[str]:
    """Before TensorFlow uses its GPUs: ``growth=True`` lets it take memory as needed
    (``tf.config.experimental.set_memory_growth``); ``memory_limit_mb`` gives each GPU one logical device of that
    size (``tf.config.set_logical_device_configuration`` with ``tf.config.LogicalDeviceConfiguration``). Without
    either, TensorFlow reserves nearly all of every GPU's memory when it starts them. Returns one line per GPU
    saying what was set (an empty list without GPUs); a GPU already started keeps its setting (RuntimeError
    from TensorFlow, reported in the line).

    Example:
        >>> from types import SimpleNamespace as S
        >>> tf = S(config=S(list_physical_devices=lambda kind: []))
        >>> tf_limit_gpu_memory(tf, growth=True)
        []
    """
    if growth and memory_limit_mb is not None:
        raise ValueError("choose growth=True or memory_limit_mb, not both: TensorFlow refuses memory growth on a "
                         "GPU split into logical devices")
    if memory_limit_mb is not None and (isinstance(memory_limit_mb, bool) or not isinstance(memory_limit_mb, int)
                                        or memory_limit_mb <= 0):
        raise ValueError(f"memory_limit_mb must be a whole number of MB > 0, got {memory_limit_mb!r}")
    done = []
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            if memory_limit_mb is not None:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)])
                done.append(f"{gpu.name}: a logical GPU of {memory_limit_mb} MB")
            elif growth:
                tf.config.experimental.set_memory_growth(gpu, True)
                done.append(f"{gpu.name}: memory growth on")
            else:
                done.append(f"{gpu.name}: TensorFlow's default (nearly all of the GPU's memory at start)")
        except RuntimeError as e:
            done.append(f"{gpu.name}: unchanged, TensorFlow had already started it ({e})")
    return done


# Logged by TensorFlow's op_kernel.cc when an operator's allocation fails (a public training log, 2022).
TF_OOM_EXAMPLE = ("W tensorflow/core/framework/op_kernel.cc:1780] OP_REQUIRES failed at conv_grad_input_ops.cc:327 : "
                  "RESOURCE_EXHAUSTED: OOM when allocating tensor with shape[500,512,4,4] and type float on "
                  "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")


@dataclass(frozen=True)
class TFOOM:
    """What TensorFlow's out-of-memory text says."""

    shape: tuple[int, ...]
    dtype: str
    device: str
    allocator: str
    op: str | None

    @property
    def elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


def parse_tf_oom(text: str) -> TFOOM | None:
    """Read TensorFlow's "OOM when allocating tensor with shape[...] and type T on DEVICE by allocator A" (None when
    ``text`` is not one).

    Example:
        >>> parse_tf_oom(TF_OOM_EXAMPLE).shape, parse_tf_oom(TF_OOM_EXAMPLE).allocator
        ((500, 512, 4, 4), 'GPU_0_bfc')
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_tf_oom needs the error text, got {type(text).__name__}")
    m = re.search(r"OOM when allocating tensor with shape\[([\d, ]*)\] and type (\w+) on (\S+) by allocator (\w+)",
                  text)
    if m is None:
        return None
    op = re.search(r"failed at (\w+)\.cc|\[Op:(\w+)\]", text)
    return TFOOM(tuple(int(d) for d in m.group(1).replace(" ", "").split(",") if d), m.group(2), m.group(3),
                 m.group(4), None if op is None else (op.group(1) or op.group(2)))
