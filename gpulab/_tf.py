"""Importing TensorFlow beside PyTorch without crashing the process.

TensorFlow 2.20+ wheels load their core library with ``RTLD_GLOBAL``, which puts TensorFlow's own LLVM in
the process's global symbols; Triton (which PyTorch imports lazily, e.g. at the first optimizer or
``torch.compile``) loads a different LLVM afterwards and crashes inside ``dlopen`` (a segmentation fault:
tensorflow/tensorflow#124205). Loaded the other way round, both work. gpulab imports TensorFlow only
through :func:`import_tensorflow`, and :func:`gpulab.setup` calls :func:`preload_triton` so that a
learner's own ``import tensorflow`` later in the notebook is safe too.

Example:
    >>> preload_triton() in (True, False)
    True
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import sys
from types import ModuleType
from typing import Iterator

# Log levels that keep TensorFlow and the PyTorch profiler (kineto: 6 = above ERROR and USDT) quiet; set only if unset.
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_ENABLE_ONEDNN_OPTS": "0", "KINETO_LOG_LEVEL": "6"}

__all__ = ["preload_triton", "import_tensorflow", "quiet_cpp_extension_log", "QUIET_ENV"]



@contextlib.contextmanager
def quiet_cpp_extension_log() -> Iterator[None]:
    """Inside the block, ``torch.utils.cpp_extension``'s logger shows errors only: importing it (directly, or
    through ``torch.utils.benchmark``) logs "No CUDA runtime is found" on machines without a GPU, which is
    expected there. The logger's level is restored on exit."""
    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)

def preload_triton() -> bool:
    """Import Triton now if TensorFlow may be imported later in this process; True when Triton is loaded.

    Nothing happens when TensorFlow is already loaded (too late: restart the kernel), or when either package
    is not installed. Set ``TRITON_INTERPRET`` before this call: Triton's own library functions (``tl.max``,
    ``tl.sum``) are made for the interpreter or the compiler when Triton is imported.
    """
    if "triton" in sys.modules:
        return True
    if "tensorflow" in sys.modules:
        return False
    if importlib.util.find_spec("triton") is None or importlib.util.find_spec("tensorflow") is None:
        return False
    try:
        import triton  # noqa: F401  (loaded for its LLVM, before TensorFlow's)
    except Exception:  # a broken Triton must not stop a lesson; TensorFlow alone still works
        return False
    return True


def import_tensorflow() -> ModuleType:
    """``import tensorflow`` with Triton loaded first (see the module docstring)."""
    preload_triton()
    import tensorflow as tf

    return tf
