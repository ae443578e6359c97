"""Common CUDA / device errors, explained: what the message means and what to do.

:func:`explain_error` matches an exception (or its text) against the messages PyTorch and CUDA print for
the usual setup and runtime failures - no driver, GPUs hidden by ``CUDA_VISIBLE_DEVICES``, a driver too old
for the CUDA runtime, tensors on different devices, device-side asserts and other asynchronous kernel
errors - and returns the cause and the fix. Out-of-memory errors are sent to :func:`gpulab.explain_oom`.

Example:
    >>> import gpulab as gl
    >>> gl.errors.explain_error("RuntimeError: CUDA error: no CUDA-capable device is detected").code
    'no-device'
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ._format import html_table, text_table

__all__ = ["ErrorExplanation", "explain_error", "KNOWN_ERRORS"]

ASYNC_NOTE = ("CUDA kernels run asynchronously: the error surfaces at a later CUDA call, so the traceback may point "
              "at the wrong line. Re-run with CUDA_LAUNCH_BLOCKING=1 set before CUDA starts (restart the kernel; "
              "os.environ in a running kernel is too late) to make every launch synchronous, or run one batch on "
              "the CPU, where the same bug raises a readable Python error at the right line.")

# (code, regex on the message, cause, fix, restart needed, asynchronous)
KNOWN_ERRORS: tuple[tuple[str, str, str, str, bool, bool], ...] = (
    ("out-of-memory", r"out of memory|OutOfMemoryError",
     "a tensor allocation did not fit in the GPU's free memory",
     "gl.explain_oom(exc, model, optimizer, batch) breaks the memory down and ranks the fixes",
     False, False),
    ("no-driver", r"Found no NVIDIA driver",
     "no NVIDIA driver is loaded: a machine or container without a GPU, or a Colab session on a CPU runtime",
     "check `nvidia-smi`; on Colab: Runtime > Change runtime type > GPU; in Docker: run with --gpus all",
     True, False),
    ("cpu-only-torch", r"Torch not compiled with CUDA enabled",
     "this PyTorch is a CPU-only build",
     "install a CUDA build of torch matching your driver (pytorch.org/get-started); gl.doctor() names it",
     True, False),
    ("no-visible-gpu", r"No CUDA GPUs are available",
     "CUDA initialised but sees no device: CUDA_VISIBLE_DEVICES hides them (\"\", \"-1\", an invalid index) "
     "or the driver lost the GPU",
     "unset CUDA_VISIBLE_DEVICES (or list valid indices) before Python starts, then restart; check `nvidia-smi`",
     True, False),
    ("no-device", r"no CUDA-capable device is detected|cudaErrorNoDevice",
     "cudaErrorNoDevice: the CUDA runtime found no usable GPU - CUDA_VISIBLE_DEVICES hides all of them, or the "
     "driver does not see one",
     "check `nvidia-smi` and `echo $CUDA_VISIBLE_DEVICES`; fix the variable before Python starts, then restart",
     True, False),
    ("driver-too-old", r"driver version is insufficient|NVIDIA driver on your system is too old|"
                       r"cudaErrorInsufficientDriver",
     "the NVIDIA driver is older than the CUDA version this PyTorch was built for",
     "update the driver, or install a torch build for an older CUDA (gl.doctor() compares the two versions)",
     True, False),
    ("invalid-device-ordinal", r"invalid device ordinal",
     "the code asked for cuda:N but fewer GPUs are visible (CUDA_VISIBLE_DEVICES renumbers them from 0)",
     "use an index below torch.cuda.device_count(); with CUDA_VISIBLE_DEVICES=2 the only GPU is cuda:0",
     False, False),
    ("wrong-device", r"Expected all tensors to be on the same device|is not on the expected device|"
                     r"Input type \(.*\) and weight type \(.*\) should be the same",
     "an operation mixed tensors on different devices (e.g. the model on the GPU, the batch on the CPU)",
     "move model and batch to one device: model.to(device); x, y = x.to(device), y.to(device)",
     False, False),
    ("device-side-assert", r"device-side assert triggered",
     "a check inside a GPU kernel failed - most often an index out of range: a class label >= the number of "
     "classes in cross_entropy, or a token id >= the embedding size",
     "find the line with CUDA_LAUNCH_BLOCKING=1 (or on the CPU); check y.min() >= 0 and y.max() < classes; "
     "the CUDA context is unusable afterwards: restart the kernel",
     True, True),
    ("index-out-of-range", r"Target -?\d+ is out of bounds|index out of range in self|index \d+ is out of bounds",
     "an index is out of range (a label >= the number of classes, or an id >= the embedding size); on a GPU the "
     "same bug is a 'device-side assert triggered' reported at a later line",
     "check the label/id range against the model's output size (y.max() < classes)",
     False, False),
    ("illegal-memory-access", r"illegal memory access",
     "a kernel read or wrote outside its memory (a bug in a custom kernel or extension, or a corrupted context)",
     "locate it with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer; restart the kernel: the context is corrupted",
     True, True),
    ("library-init-failed", r"CUBLAS_STATUS_ALLOC_FAILED|CUBLAS_STATUS_NOT_INITIALIZED|CUDNN_STATUS_NOT_INITIALIZED|"
                            r"CUDNN_STATUS_ALLOC_FAILED",
     "cuBLAS/cuDNN could not create its workspace: usually out of memory in disguise",
     "free memory as for an OOM (gl.explain_oom, a smaller batch); check other processes with nvidia-smi",
     False, False),
)


@dataclass(frozen=True)
class ErrorExplanation:
    """What an error means and what to do; ``code`` is ``"unknown"`` when no rule matched."""

    code: str
    error: str
    cause: str
    fix: str
    restart_needed: bool = False
    asynchronous: bool = False

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("error", self.error), ("cause", self.cause), ("what to do", self.fix)]
        if self.asynchronous:
            rows.append(("note", ASYNC_NOTE))
        if self.restart_needed:
            rows.append(("restart", "restart the kernel after fixing it: the process state cannot recover"))
        return rows

    def __repr__(self) -> str:
        return f"[{self.code}]\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption=f"Error explained: {self.code}")


def explain_error(exc: BaseException | str) -> ErrorExplanation:
    """Match an exception or an error text against :data:`KNOWN_ERRORS` and explain it.

    Example:
        >>> import torch, gpulab as gl
        >>> try:
        ...     torch.nn.functional.cross_entropy(torch.zeros(2, 10), torch.tensor([3, 10]))
        ... except IndexError as e:
        ...     gl.errors.explain_error(e).code
        'index-out-of-range'
    """
    if isinstance(exc, BaseException):
        text = f"{type(exc).__name__}: {exc}"
    elif isinstance(exc, str):
        text = exc
    else:
        raise TypeError(f"explain_error needs an exception or its text, got {type(exc).__name__}")
    first = next((line.strip() for line in text.strip().splitlines() if line.strip()), "")[:300]
    for code, pattern, cause, fix, restart, asynchronous in KNOWN_ERRORS:
        if re.search(pattern, text, re.IGNORECASE):
            return ErrorExplanation(code, first, cause, fix, restart, asynchronous)
    return ErrorExplanation("unknown", first, "not one of the errors gpulab knows",
                            "read the last line of the traceback; run gl.doctor() to rule out setup problems")
