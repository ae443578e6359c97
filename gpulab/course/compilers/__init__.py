"""Compilers and kernels: lessons 10 (compilers and graphs) and 11 (kernels and streams).

torch.compile's modes and what max-autotune tunes (``modes``), compiled recipes checked to run compiled (``guard``,
used by lessons 12 and 13 too), the bytes of a naive and a tiled matmul kernel (``kernels``) and sectors per warp
load (``coalescing``), and what a first compiled call costs, whole or regional, cold or from the cache
(``compile_time``), and whether the installed Triton runs the lessons' Triton parts (``triton_part``).
"""
