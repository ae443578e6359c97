"""Lesson 13's FlashAttention-2 forward in Triton: the course's kernel launched on (batch, heads, T, head_dim)
tensors, the exercise check that holds a learner's kernel to ``scaled_dot_product_attention``, and its timing against
SDPA on a GPU.

- :func:`flash_attention` launches the course's kernel (``gpulab/course/transformers/_flash_kernel.py``), or a learner's with the
  same arguments (``kernel=``): compiled on a CUDA GPU, in Triton's interpreter on a CPU.
- :func:`check_flash_attention` runs a function ``fn(q, k, v, causal=...)`` on several shapes (the sequence length not
  a multiple of the tiles, causal and not) against SDPA computed in fp32, with a tolerance per dtype, and fails with
  what went wrong and the likely line.
- :func:`time_flash_attention` times it against SDPA with CUDA events (``gl.benchmark``); on a CPU it says that
  timing is for a GPU (the interpreter's time is NumPy's).
- :func:`key_tiles` counts the key/value tiles a (batch, head) loads: under a causal mask about half.

Example:
    >>> import torch
    >>> from gpulab import course
    >>> q, k, v = torch.randn(3, 1, 2, 20, 16).unbind(0)
    >>> out = course.flash_attention(q, k, v, causal=True)          # in Triton's interpreter on a CPU
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> bool(torch.allclose(out, ref, atol=1e-5))
    True
    >>> course.key_tiles(1024, block_m=128, block_n=64, causal=True), course.key_tiles(1024, block_m=128, block_n=64)
    (72, 128)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..._check import checked, whole
from ..._format import NA, TableView, fmt_rate, fmt_seconds
from ..lesson.checks import CannotRunHere, NotAnswered

__all__ = ["FlashCase", "FlashCheck", "FlashTiming", "check_flash_attention", "flash_attention", "key_tiles",
           "reference_kernel", "time_flash_attention", "TOLERANCES"]

# (atol, rtol) against SDPA in fp32, by input dtype: 16-bit inputs (and P cast to 16 bits before P @ V) round at
# 2^-11 (fp16) or 2^-8 (bf16); fp32 inputs go through tl.dot in TF32 on Ampere and newer (Triton's default)
TOLERANCES = {"float32": (5e-3, 5e-3), "float16": (1e-2, 1e-2), "bfloat16": (3e-2, 3e-2)}
_NAME = "FlashAttention-2 forward matches scaled_dot_product_attention"


def reference_kernel() -> Any:
    """The course's ``@triton.jit`` kernel, imported on first use (after Triton's interpreter was chosen on a CPU).

    Example:
        >>> type(reference_kernel()).__name__ in ("JITFunction", "InterpretedFunction")
        True
    """
    from ._flash_kernel import flash_attention_kernel

    return flash_attention_kernel


def _interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run the kernel's key loop here, or None: before 3.7 it turned a scalar argument
    into an int with ``int()`` of a one-element array, which NumPy 2.4 no longer allows."""
    import numpy as np
    import triton

    try:
        int(np.zeros(1, dtype=np.int32))
        return None
    except TypeError:
        pass
    if tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 7):
        return (f"Triton {triton.__version__}'s interpreter cannot loop over the keys under NumPy {np.__version__} "
                "(it converts one-element arrays to int, which NumPy 2.4 refuses): upgrade Triton to 3.7 or newer "
                "(the course pins 3.8), or run on a GPU")
    return None


def _interpreter_can_loop() -> None:
    """Refuse, with the fix, where Triton's interpreter cannot run the kernel's key loop (:func:`_interpreter_problem`)."""
    problem = _interpreter_problem()
    if problem is not None:
        raise RuntimeError(problem)


def _interpreted(kernel: Any) -> bool:
    return type(kernel).__name__ == "InterpretedFunction"


def _triton_kernel(kernel: Any) -> Any:
    if kernel is None:
        return reference_kernel()
    if type(kernel).__name__ not in ("JITFunction", "InterpretedFunction"):
        raise TypeError(f"kernel must be a @triton.jit function with the course kernel's arguments (q_ptr, k_ptr, "
                        f"v_ptr, o_ptr, seq_len, sm_scale, HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL), got "
                        f"{type(kernel).__name__} {kernel!r:.60}")
    return kernel


def _pow2(name: str, value: Any, low: int, high: int) -> int:
    n = whole(name, value)
    if n < low or n > high or n & (n - 1):
        raise ValueError(f"{name} must be a power of two from {low} to {high} (tl.arange and tl.dot need one), "
                         f"got {value!r}")
    return n


def _check_inputs(q: Any, k: Any, v: Any, causal: Any) -> None:
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch tensor of shape (batch, heads, seq_len, head_dim), "
                            f"got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, seq_len, head_dim), got shape {tuple(t.shape)}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"q, k and v must have the same shape (this kernel has no cross-attention or grouped-query "
                         f"heads), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    names = {str(t.dtype).replace("torch.", "") for t in (q, k, v)}
    if len(names) != 1 or not names <= set(TOLERANCES):
        raise ValueError(f"q, k and v must share one dtype of {sorted(TOLERANCES)}, got {sorted(names)}")
    if len({t.device for t in (q, k, v)}) != 1:
        raise ValueError(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.device.type not in ("cuda", "cpu"):
        raise ValueError(f"q, k and v are on {q.device}: Triton kernels run compiled on a CUDA GPU, or in its "
                         f"interpreter on the CPU; move them to 'cuda' or 'cpu'")
    batch, heads, seq_len, head_dim = q.shape
    _pow2("head_dim (q.shape[-1])", head_dim, 16, 128)
    if seq_len < 1 or batch * heads < 1:
        raise ValueError(f"q must hold at least one query of one head, got shape {tuple(q.shape)}")
    if batch * heads > 65535:
        raise ValueError(f"batch x heads must be at most 65535 (the grid's second axis), got {batch * heads}")
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v)):
        raise ValueError("flash_attention is a forward pass only (no backward): call it under torch.no_grad(), or "
                         "use scaled_dot_product_attention to train")


def _blocks(head_dim: int, device: Any) -> tuple[int, int, dict[str, int]]:
    """Tile sizes and launch options: small tiles in the interpreter (each program runs in NumPy), a T4's shared
    memory (64 KiB) on sm_7x, larger query blocks from sm_80 on (each config within 48 KiB of shared memory, compiled
    ahead of time). Triton 3.8 compiles tl.dot for sm_7x with FMA instructions: a T4 runs this without tensor cores."""
    if device.type != "cuda":
        return 16, 16, {}
    import torch

    major, _ = torch.cuda.get_device_capability(device)
    if major < 8:
        return 64, (64 if head_dim <= 64 else 32), {"num_warps": 4, "num_stages": 2}
    return 128, (64 if head_dim <= 64 else 32), {"num_warps": 4 if head_dim <= 64 else 8, "num_stages": 3}


def _interpreter_ready() -> None:
    from ...kernels.backends import triton_backend

    triton_backend("cpu")   # sets TRITON_INTERPRET=1 before Triton loads; says how to fix it when it loaded first


def flash_attention(q: Any, k: Any, v: Any, causal: bool = True, *, kernel: Any = None, block_m: int | None = None,
                    block_n: int | None = None) -> Any:
    """softmax(QK^T / sqrt(head_dim)) V by the FlashAttention-2 forward kernel: ``q``, ``k``, ``v`` of shape (batch,
    heads, seq_len, head_dim) in fp32, fp16 or bf16, head_dim a power of two from 16 to 128; ``causal`` masks the
    keys after each query. ``kernel`` launches a learner's ``@triton.jit`` kernel with the course kernel's arguments
    instead; ``block_m``/``block_n`` set the tiles (default: by device and head_dim). A forward pass only.

    On a CUDA GPU the kernel is compiled; on a CPU it runs in Triton's interpreter (``TRITON_INTERPRET=1``, set here
    if Triton has not loaded yet), which multiplies bf16 tiles wrongly (triton-lang/triton#11584): bf16 inputs run
    there as fp32 copies, and the output is cast back.

    Example:
        >>> import torch
        >>> q = torch.randn(1, 1, 40, 16)
        >>> tuple(flash_attention(q, q, q, causal=False).shape)
        (1, 1, 40, 16)
    """
    import torch

    _check_inputs(q, k, v, causal)
    if q.device.type == "cpu":
        _interpreter_ready()
    fn = _triton_kernel(kernel)
    if q.device.type == "cpu" and not _interpreted(fn):
        raise ValueError("q, k and v are on the CPU, where Triton kernels run only in its interpreter, and this "
                         "kernel was defined for a GPU (Triton loaded before TRITON_INTERPRET=1 was set): move them to "
                         "the GPU (q.cuda()), or restart and call gl.setup() before Triton loads")
    if _interpreted(fn):
        _interpreter_can_loop()
    batch, heads, seq_len, head_dim = q.shape
    bm, bn, options = _blocks(head_dim, q.device)
    bm = bm if block_m is None else _pow2("block_m", block_m, 16, 256)
    bn = bn if block_n is None else _pow2("block_n", block_n, 16, 256)
    dtype = q.dtype
    if _interpreted(fn) and dtype == torch.bfloat16:
        q, k, v = (t.float() for t in (q, k, v))
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    grid = (math.ceil(seq_len / bm), batch * heads)
    fn[grid](q, k, v, out, seq_len, head_dim ** -0.5, HEAD_DIM=head_dim, BLOCK_M=bm, BLOCK_N=bn, CAUSAL=causal,
             **({} if _interpreted(fn) else options))
    return out.to(dtype)


def key_tiles(seq_len: int, *, block_m: int, block_n: int, causal: bool = False) -> int:
    """How many ``block_n``-key tiles of K (and of V) one (batch, head) loads over all its ``block_m``-query blocks:
    every tile for every block, or under a causal mask only those up to each block's last query.

    Example:
        >>> key_tiles(100, block_m=16, block_n=16), key_tiles(100, block_m=16, block_n=16, causal=True)
        (49, 28)
    """
    seq_len, block_m, block_n = whole("seq_len", seq_len), whole("block_m", block_m), whole("block_n", block_n)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    blocks = math.ceil(seq_len / block_m)
    if not causal:
        return blocks * math.ceil(seq_len / block_n)
    return sum(math.ceil(min((m + 1) * block_m, seq_len) / block_n) for m in range(blocks))


# ---------------------------------------------------------------------------------------------- the exercise check
@dataclass(frozen=True)
class FlashCase:
    """One shape of the check: the largest error against SDPA (fp32), the dtype's tolerance (``atol + rtol x
    |SDPA|``), whether every output is within it, and the query with the worst error (None when all pass)."""

    shape: tuple[int, int, int, int]
    dtype: str
    causal: bool
    max_error: float
    atol: float
    rtol: float
    ok: bool
    worst_query: int | None


@dataclass(frozen=True, repr=False)
class FlashCheck(TableView):
    """The check of a FlashAttention forward against SDPA (immutable): one row per shape; it passed when every
    row did (a failing check raises ``AssertionError`` with this table and a hint)."""

    cases: tuple[FlashCase, ...]
    device: str
    note: str
    seconds: float
    hint: str = ""

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.cases)

    @property
    def title(self) -> str:  # type: ignore[override]
        good = sum(c.ok for c in self.cases)
        return f"[{'ok' if self.passed else 'x'}] {_NAME}: {good} of {len(self.cases)} shapes"

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["(batch, heads, T, head_dim)", "dtype", "causal", "max |error|", "tolerance", "within", "worst query"]
        rows = [[str(c.shape), c.dtype, "yes" if c.causal else "no",
                 "NaN or inf" if not math.isfinite(c.max_error) else f"{c.max_error:.2e}",
                 f"{c.atol:g} + {c.rtol:g} x |ref|", "yes" if c.ok else "NO",
                 NA if c.worst_query is None else str(c.worst_query)] for c in self.cases]
        foot = f"on {self.device}, {self.seconds:.1f} s; {self.note}" + (f"\nHint: {self.hint}" if self.hint else "")
        return header, rows, foot


def _cases(device: Any) -> list[tuple[tuple[int, int, int, int], str, bool]]:
    """Shapes whose T is not a multiple of the tiles, one within a single tile (a missing rescale passes there)."""
    if device.type != "cuda":      # the interpreter: small, and fp32 / fp16 (it cannot multiply bf16 tiles)
        return [((1, 2, 37, 16), "float32", True), ((1, 2, 37, 16), "float32", False),
                ((2, 1, 9, 32), "float32", True), ((1, 1, 50, 64), "float16", False), ((1, 2, 45, 32), "float16", True)]
    low = _sixteen_bit()
    return [((2, 4, 300, 64), low, True), ((2, 4, 300, 64), low, False), ((1, 2, 9, 64), low, True),
            ((1, 2, 1000, 128), "float16", True), ((2, 3, 77, 32), "float32", False), ((1, 2, 500, 16), low, True)]


def _sixteen_bit() -> str:
    """The GPU's 16-bit type: bf16 from Ampere on, fp16 on a T4 (or a T4 rehearsed: gl.choose_precision)."""
    from ...precision import choose_precision

    return str(choose_precision().autocast_dtype).replace("torch.", "")


def _hint(cases: list[FlashCase]) -> str:
    bad = [c for c in cases if not c.ok]
    if any(not math.isfinite(c.max_error) for c in bad):
        return ("some outputs are NaN or infinite: a row whose scores are all -inf (every key masked) gives "
                "exp2(-inf - (-inf)) = NaN and l_i = 0; under the causal mask query i must see keys 0 to i inclusive "
                "(rows[:, None] >= cols[None, :])")
    if bad and all(c.causal for c in bad):
        return ("only causal shapes fail: query i sees keys 0 to i inclusive (rows[:, None] >= cols[None, :]), and "
                "the loop must run up to the block's last query (min((block + 1) x BLOCK_M, T))")
    single = [c for c in cases if c.shape[2] <= 16]
    if single and all(c.ok for c in single):
        return ("the shapes within one key tile pass and the longer ones fail: when a tile raises the running max, "
                "what was summed under the old max must shrink: alpha = exp2(m_i - m_new), then l_i = l_i x alpha + "
                "rowsum(p) and acc = acc x alpha[:, None] + p @ v")
    return ("compare your lines with the online softmax above, in order: m_new, alpha, p, l_i, acc, m_i = m_new; "
            "p is cast to v's dtype for tl.dot, and acc is divided by l_i once, after the loop")


@checked(device="device")
def check_flash_attention(fn: Callable[..., Any] | None, *, device: Any = None
                          ) -> FlashCheck | NotAnswered | CannotRunHere:
    """Run ``fn(q, k, v, causal=...)`` (e.g. ``functools.partial(course.flash_attention, kernel=my_kernel)``) on
    several shapes, causal and not, with T not a multiple of the tiles, against ``scaled_dot_product_attention`` on
    fp32 copies of the same inputs; :data:`TOLERANCES` per dtype. Returns the :class:`FlashCheck`, raises
    ``AssertionError`` with the table and a hint when an output is off, and shows "not answered yet" for None. On a
    CPU the shapes are small (Triton's interpreter runs each program in NumPy) and 16-bit means fp16; where the
    installed Triton's interpreter cannot run the kernel's loop, it shows why instead (nothing is checked).

    Example:
        >>> from gpulab import course
        >>> course.check_flash_attention(None)
        [ ] FlashAttention-2 forward matches scaled_dot_product_attention: not answered yet - write your answer in the exercise cell above, then run this cell again
    """
    if fn is None:
        return NotAnswered(_NAME)
    if not callable(fn):
        raise TypeError(f"fn must be a function fn(q, k, v, causal=True) returning the attention output, got "
                        f"{type(fn).__name__} {fn!r:.60}")
    import torch
    import torch.nn.functional as F

    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    problem = _interpreter_problem() if dev.type != "cuda" else None
    if problem is not None:
        return CannotRunHere(_NAME, problem)
    start, cases = time.perf_counter(), []
    for i, (shape, dtype, causal) in enumerate(_cases(dev)):
        gen = torch.Generator().manual_seed(1000 + i)
        q, k, v = (torch.randn(shape, generator=gen).to(dev, getattr(torch, dtype)) for _ in range(3))
        with torch.no_grad():
            out = fn(q, k, v, causal=causal)
            ref = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            raise AssertionError(f"{_NAME}: fn(q, k, v, causal={causal}) must return a tensor of q's shape {shape}, "
                                 f"got {type(out).__name__} {tuple(getattr(out, 'shape', ())) or ''}")
        atol, rtol = TOLERANCES[dtype]
        err = (out.float() - ref).abs()
        over = torch.nan_to_num(err, nan=math.inf) - (atol + rtol * ref.abs())
        ok = bool((over <= 0).all())
        worst = None if ok else int(over.amax(dim=(0, 1, 3)).argmax())
        max_err = float(torch.nan_to_num(err, nan=math.inf).max())
        cases.append(FlashCase(shape, dtype, causal, max_err, atol, rtol, ok, worst))
    where = "compiled for the GPU" if dev.type == "cuda" else "Triton's interpreter (NumPy): small shapes, fp32 and fp16"
    result = FlashCheck(tuple(cases), str(dev), f"{where}; against SDPA on fp32 copies of the inputs",
                        time.perf_counter() - start)
    if not result.passed:
        import dataclasses

        raise AssertionError(repr(dataclasses.replace(result, hint=_hint(cases))))
    return result


# ---------------------------------------------------------------------------------------------- timing on a GPU
@dataclass(frozen=True, repr=False)
class FlashTiming(TableView):
    """A FlashAttention forward timed against SDPA's on the same inputs (immutable), with CUDA events; on a CPU
    nothing is timed and ``reason`` says why. ``speedup`` is SDPA's time over yours (above 1: yours is faster)."""

    label: str
    shape: tuple[int, int, int, int]
    dtype: str
    causal: bool
    device: str
    flops: float
    yours_s: float | None
    sdpa_s: float | None
    sdpa_backend: str | None
    tiles: tuple[int, int]
    blocks: tuple[int, int]
    reason: str = ""
    title: str = "FlashAttention-2 in Triton vs scaled_dot_product_attention"

    @property
    def measured(self) -> bool:
        return self.yours_s is not None and self.sdpa_s is not None

    @property
    def speedup(self) -> float | None:
        return self.sdpa_s / self.yours_s if self.measured else None   # type: ignore[operator]

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["kernel", "median", "achieved", "speed vs SDPA (x)"]
        sdpa = f"SDPA ({self.sdpa_backend})" if self.sdpa_backend else "SDPA"
        rows = [[self.label, fmt_seconds(self.yours_s), fmt_rate(self.flops / self.yours_s if self.yours_s else None,
                                                                  "FLOP/s"),
                 f"{self.speedup:.2f}" if self.speedup else NA],
                [sdpa, fmt_seconds(self.sdpa_s), fmt_rate(self.flops / self.sdpa_s if self.sdpa_s else None, "FLOP/s"),
                 "1.00" if self.measured else NA]]
        mask = "causal" if self.causal else "no mask"
        foot = (f"{self.shape} {self.dtype}, {mask}, forward only, on {self.device}; FLOPs: 4 x head_dim per score "
                f"(QK^T and PV){', T(T+1)/2 scores per head' if self.causal else ''}; tiles of {self.blocks[0]} queries x "
                f"{self.blocks[1]} keys: {self.tiles[0]} of {self.tiles[1]} K/V tiles loaded per head" + (f"\n{self.reason}" if self.reason else ""))
        return header, rows, foot


@checked(device="device", batch="count", heads="count", seq_len="count", min_run_time="pos", label="name?")
def time_flash_attention(fn: Callable[..., Any] | None = None, *, batch: int = 4, heads: int = 12,
                         seq_len: int = 1024, head_dim: int = 64, causal: bool = True, dtype: Any = None,
                         device: Any = None, min_run_time: float = 0.5, label: str | None = None) -> FlashTiming:
    """Time ``fn(q, k, v, causal=...)`` (default: :func:`flash_attention`) against ``scaled_dot_product_attention``
    on the same (batch, heads, seq_len, head_dim) inputs with ``gl.benchmark`` (CUDA events), after checking that its
    output matches SDPA's. ``dtype``: default the GPU's 16-bit type (bf16 from Ampere on, else fp16). On a CPU nothing
    is timed: the interpreter's time is NumPy's, not a kernel's, and the result says so. ``label`` names ``fn``'s row
    (default: "yours", or "the course's" for the default kernel).

    Example:
        >>> t = time_flash_attention(device="cpu")
        >>> t.measured, t.reason.startswith("timing is for a GPU")
        (False, True)
    """
    import torch

    _pow2("head_dim", head_dim, 16, 128)
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if fn is not None and not callable(fn):
        raise TypeError(f"fn must be a function fn(q, k, v, causal=True), or None for the course's kernel, got {fn!r:.60}")
    dev = torch.device(device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu"))
    if dtype is None:
        dtype = getattr(torch, _sixteen_bit()) if dev.type == "cuda" else torch.float32
    name = str(dtype).replace("torch.", "")
    if name not in TOLERANCES:
        raise ValueError(f"dtype must be one of {sorted(TOLERANCES)} (a torch dtype), got {dtype!r}")
    label = label or ("Triton FlashAttention-2 (yours)" if fn is not None else "Triton FlashAttention-2 (the course's)")
    shape = (batch, heads, seq_len, head_dim)
    scores = seq_len * (seq_len + 1) / 2 if causal else seq_len * seq_len
    flops = 4.0 * head_dim * scores * batch * heads
    bm, bn, _ = _blocks(head_dim, dev)
    tiles = (key_tiles(seq_len, block_m=bm, block_n=bn, causal=causal), key_tiles(seq_len, block_m=bm, block_n=bn))
    if dev.type != "cuda":
        return FlashTiming(label, shape, name, causal, str(dev), flops, None, None, None, tiles, (bm, bn),
                           "timing is for a GPU: on a CPU the kernel runs in Triton's interpreter, each program in "
                           "NumPy, so its time says nothing about a kernel's (check_flash_attention says it is right)")
    return _timed(fn or flash_attention, label, shape, dtype, causal, dev, flops, tiles, (bm, bn), min_run_time)


def _timed(fn: Callable[..., Any], label: str, shape: tuple[int, int, int, int], dtype: Any, causal: bool, dev: Any,
           flops: float, tiles: tuple[int, int], blocks: tuple[int, int], min_run_time: float) -> FlashTiming:
    """``fn`` and SDPA on the same inputs, each timed with ``gl.benchmark`` once ``fn``'s output matches SDPA's."""
    import torch
    import torch.nn.functional as F

    from ...attention import sdpa_backend
    from ...timing import benchmark

    name = str(dtype).replace("torch.", "")
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen).to(dev, dtype) for _ in range(3))
    with torch.no_grad():
        ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        out = fn(q, k, v, causal=causal)
        atol, rtol = TOLERANCES[name]
        if not isinstance(out, torch.Tensor) or out.shape != ref.shape or \
                not torch.allclose(out.float(), ref.float(), atol=atol, rtol=rtol):
            raise AssertionError(f"{label} does not match SDPA at {shape} {name}: run course.check_flash_attention "
                                 f"on it first")
        backend = sdpa_backend(q, k, v, is_causal=causal)
        yours = benchmark(lambda: fn(q, k, v, causal=causal), label=label, flops=flops, device=dev,
                          min_run_time=min_run_time, warn_noisy=False, energy=False)
        sdpa = benchmark(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), label="SDPA",
                         flops=flops, device=dev, min_run_time=min_run_time, warn_noisy=False, energy=False)
    return FlashTiming(label, shape, name, causal, str(dev), flops, yours.median_s, sdpa.median_s, backend, tiles,
                       blocks)
