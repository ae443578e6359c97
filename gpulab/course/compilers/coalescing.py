"""Lesson 11's memory coalescing: how many 32-byte sectors one warp's load touches in global memory.

A warp's 32 threads issue a load together; the memory system serves it in 32-byte **sectors**. When the 32
threads read 32 consecutive floats (128 bytes) the load takes 4 sectors: it is *coalesced*. When each thread
reads a different row of a row-major matrix, every thread needs its own sector: up to 32 sectors, 32 bytes
moved for every 4 used. Which threads of a block form a warp is fixed: ``threadIdx.x`` varies fastest, so
the 32 threads of a 16 x 16 block's first warp have ``threadIdx.x`` 0..15 and ``threadIdx.y`` 0..1.

Example:
    >>> warp_sectors([4 * t for t in range(32)])          # 32 consecutive floats: 128 bytes, 4 sectors
    4
    >>> warp_sectors([4 * 64 * t for t in range(32)])     # one float from each of 32 rows of 64 floats
    32
"""
from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Callable, Iterable

__all__ = ["SECTOR_BYTES", "WARP_SIZE", "warp_sectors", "WarpLoad", "MatmulCoalescing", "matmul_coalescing"]

SECTOR_BYTES = 32      # the unit in which NVIDIA GPUs' L1/L2 serve global-memory requests
WARP_SIZE = 32

Index = Callable[[int, int], tuple[int, int]]     # (threadIdx.x, threadIdx.y) -> (row, column) it reads


def warp_sectors(byte_addresses: Iterable[int], *, sector_bytes: int = SECTOR_BYTES, itemsize: int = 4) -> int:
    """The distinct ``sector_bytes``-byte sectors that one warp's load of ``itemsize``-byte values at
    ``byte_addresses`` (one per thread) touches: the memory transactions it costs.

    Example:
        >>> warp_sectors([0] * 32)                             # every thread reads the same float: a broadcast
        1
    """
    addresses = list(byte_addresses)
    if not addresses or any(not isinstance(a, int) or isinstance(a, bool) or a < 0 for a in addresses):
        raise ValueError("byte_addresses must be non-negative integer byte offsets, one per thread, "
                         f"got {addresses!r:.80}")
    for label, v in (("sector_bytes", sector_bytes), ("itemsize", itemsize)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{label} must be a positive number of bytes, got {v!r}")
    return len({s for a in addresses for s in range(a // sector_bytes, (a + itemsize - 1) // sector_bytes + 1)})


@dataclass(frozen=True)
class WarpLoad:
    """One global load of a kernel, for the first warp of a block: the sectors it touches, the bytes the warp
    needs (distinct values x itemsize) and the bytes the sectors move; ``per_thread`` is how often each thread
    issues it over the whole kernel."""

    kernel: str
    load: str
    sectors: int
    bytes_needed: int
    per_thread: int

    @property
    def bytes_moved(self) -> int:
        return self.sectors * SECTOR_BYTES

    @property
    def efficiency(self) -> float:
        """Bytes the warp needs / bytes its sectors move (1.0: every byte fetched is used)."""
        return self.bytes_needed / self.bytes_moved


@dataclass(frozen=True)
class MatmulCoalescing:
    """The global loads of lesson 11's three matmul kernels for ``n x n`` matrices, per warp: sectors per load,
    and in all (``total_sectors``: every load a warp issues over the kernel)."""

    n: int
    tile: int
    loads: tuple[WarpLoad, ...]

    def kernels(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(load.kernel for load in self.loads))

    def sectors_per_step(self, kernel: str) -> int:
        """Sectors one warp touches for one step of the kernel's loop (one load of A and one of B)."""
        return sum(load.sectors for load in self._of(kernel))

    def total_sectors(self, kernel: str) -> int:
        """Sectors one warp touches over the whole kernel."""
        return sum(load.sectors * load.per_thread for load in self._of(kernel))

    def total_bytes(self, kernel: str) -> int:
        """Bytes all warps move from global memory for their loads: sectors x 32 bytes x (n^2 / 32) warps."""
        return self.total_sectors(kernel) * SECTOR_BYTES * (self.n * self.n // WARP_SIZE)

    def _of(self, kernel: str) -> tuple[WarpLoad, ...]:
        found = tuple(load for load in self.loads if load.kernel == kernel)
        if not found:
            raise ValueError(f"kernel must be one of {', '.join(map(repr, self.kernels()))}, got {kernel!r}")
        return found

    def rows(self) -> list[dict[str, object]]:
        return [{"kernel": ld.kernel, "load": ld.load, "sectors per warp": ld.sectors,
                 "bytes needed": ld.bytes_needed, "bytes moved": ld.bytes_moved, "efficiency %": 100 * ld.efficiency,
                 "loads per thread": ld.per_thread, "MB moved, all warps": ld.sectors * ld.per_thread * SECTOR_BYTES
                 * (self.n * self.n // WARP_SIZE) / 1e6} for ld in self.loads]

    def to_dataframe(self):  # noqa: ANN201 - pandas is optional
        import pandas as pd

        return pd.DataFrame(self.rows()).set_index(["kernel", "load"])

    def __repr__(self) -> str:
        head = f"global loads per warp (32 threads, {SECTOR_BYTES}-byte sectors), n = {self.n}, tile {self.tile}"
        lines = [head] + [f"  {ld.kernel:<22} {ld.load:<14} {ld.sectors:>2} sectors: {ld.bytes_needed:>3} B needed / "
                          f"{ld.bytes_moved:>4} B moved ({100 * ld.efficiency:.0f}%)" for ld in self.loads]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        cells = "".join(
            f"<tr><td>{html.escape(ld.kernel)}</td><td><code>{html.escape(ld.load)}</code></td>"
            f"<td>{ld.sectors}</td><td>{ld.bytes_needed} B</td><td>{ld.bytes_moved} B</td>"
            f"<td>{100 * ld.efficiency:.0f}%</td></tr>" for ld in self.loads)
        return (f"<table><caption>Global loads per warp (32 threads, {SECTOR_BYTES}-byte sectors), n = {self.n}"
                "</caption><tr><th>kernel</th><th>load</th><th>sectors</th><th>needed</th><th>moved</th>"
                f"<th>efficiency</th></tr>{cells}</table>")


def _load(kernel: str, label: str, index: Index, n: int, block: int, itemsize: int, per_thread: int) -> WarpLoad:
    threads = [(t % block, t // block) for t in range(WARP_SIZE)]          # threadIdx.x varies fastest
    cells = {index(tx, ty) for tx, ty in threads}
    addresses = [(r * n + c) * itemsize for r, c in (index(tx, ty) for tx, ty in threads)]
    return WarpLoad(kernel, label, warp_sectors(addresses, itemsize=itemsize), len(cells) * itemsize, per_thread)


def matmul_coalescing(n: int, *, tile: int = 16, itemsize: int = 4) -> MatmulCoalescing:
    """Sectors per warp of each global load in lesson 11's matmul kernels (row-major ``n x n`` float matrices,
    blocks of ``tile x tile`` threads, the block at the origin, first loop step):

    - ``matmul_naive``: ``row, col = cuda.grid(2)``: threadIdx.x picks the row, so a warp's 16 x-values read
      ``A[row, k]`` from 16 rows (16 sectors) and ``B[k, col]`` for 2 columns (1 sector).
    - ``matmul_coalesced``: ``col, row = cuda.grid(2)``: threadIdx.x picks the column, the fastest-varying index of
      a row-major matrix: ``B[k, col]`` reads 16 consecutive floats.
    - ``matmul_tiled`` (the column from x too): each thread loads ``A[row, t*tile + tx]`` and
      ``B[t*tile + ty, col]`` into shared memory, ``n / tile`` times instead of ``n``.

    The sectors are requests to the memory system; the L1 and L2 caches serve some of them again (the sector of
    ``A[row, k]`` also holds ``A[row, k+1..k+7]``), so DRAM sees fewer bytes than ``total_bytes``, but every
    request costs a slot of the load path.

    Example:
        >>> c = matmul_coalescing(64)
        >>> c.sectors_per_step("matmul_naive"), c.sectors_per_step("matmul_coalesced")
        (17, 4)
    """
    for label, v in (("n", n), ("tile", tile), ("itemsize", itemsize)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{label} must be a positive integer, got {v!r}")
    if tile * tile < WARP_SIZE or n % tile:
        raise ValueError(f"tile must divide n={n} and hold a warp (tile x tile >= {WARP_SIZE}), got {tile!r}")
    b = tile
    loads = (
        _load("matmul_naive", "A[row, k]", lambda tx, ty: (tx, 0), n, b, itemsize, n),
        _load("matmul_naive", "B[k, col]", lambda tx, ty: (0, ty), n, b, itemsize, n),
        _load("matmul_coalesced", "A[row, k]", lambda tx, ty: (ty, 0), n, b, itemsize, n),
        _load("matmul_coalesced", "B[k, col]", lambda tx, ty: (0, tx), n, b, itemsize, n),
        _load("matmul_tiled", "A[row, t*T+tx]", lambda tx, ty: (ty, tx), n, b, itemsize, n // tile),
        _load("matmul_tiled", "B[t*T+ty, col]", lambda tx, ty: (ty, tx), n, b, itemsize, n // tile),
    )
    return MatmulCoalescing(n, tile, loads)
