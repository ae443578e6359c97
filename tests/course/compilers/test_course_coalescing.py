"""Lesson 11's memory coalescing: sectors per warp load, counted for its three matmul kernels."""
from __future__ import annotations

import pytest

from gpulab import course
from gpulab.course.compilers.coalescing import SECTOR_BYTES, warp_sectors


def test_warp_sectors_counts_distinct_32_byte_sectors():
    assert warp_sectors([4 * t for t in range(32)]) == 4                  # 128 contiguous bytes
    assert warp_sectors([4 * t + 16 for t in range(32)]) == 5             # misaligned: one more sector
    assert warp_sectors([4 * 1024 * t for t in range(32)]) == 32          # one float per row: a sector each
    assert warp_sectors([0] * 32) == 1                                     # a broadcast
    assert warp_sectors([8 * t for t in range(32)], itemsize=8) == 8      # doubles: 256 bytes
    assert warp_sectors([28], itemsize=8) == 2                             # a value that straddles two sectors
    with pytest.raises(ValueError, match="byte_addresses"):
        warp_sectors([])
    with pytest.raises(ValueError, match="byte_addresses"):
        warp_sectors([-4])
    with pytest.raises(ValueError, match="sector_bytes"):
        warp_sectors([0], sector_bytes=0)


def test_matmul_coalescing_matches_a_thread_by_thread_count():
    c = course.matmul_coalescing(1024)
    assert c.kernels() == ("matmul_naive", "matmul_coalesced", "matmul_tiled")
    # naive, x -> row: the warp's 16 rows of A are 16 sectors; B[k, col] for 2 columns is 8 bytes in 1 sector
    assert [ld.sectors for ld in c.loads if ld.kernel == "matmul_naive"] == [16, 1]
    # x -> column: A[row, k] for 2 rows is 2 sectors, B[k, col] 16 consecutive floats is 64 bytes: 2 sectors
    assert [ld.sectors for ld in c.loads if ld.kernel == "matmul_coalesced"] == [2, 2]
    # tiled: each load is 2 rows of 16 consecutive floats: 4 full sectors, every byte used
    assert all(ld.sectors == 4 and ld.efficiency == 1.0 for ld in c.loads if ld.kernel == "matmul_tiled")
    assert c.sectors_per_step("matmul_naive") == 17 and c.sectors_per_step("matmul_coalesced") == 4
    # the whole kernel: n steps for the naive kernels, n / tile for the tiled one
    assert c.total_sectors("matmul_naive") == 17 * 1024 and c.total_sectors("matmul_tiled") == 8 * 64
    assert c.total_bytes("matmul_coalesced") == 4 * 1024 * SECTOR_BYTES * (1024 * 1024 // 32)
    assert c.total_bytes("matmul_naive") > c.total_bytes("matmul_coalesced") > c.total_bytes("matmul_tiled")
    assert "matmul_coalesced" in repr(c) and "<table>" in c._repr_html_()
    assert len(c.to_dataframe()) == 6


def test_matmul_coalescing_refuses_bad_sizes():
    with pytest.raises(ValueError, match="tile"):
        course.matmul_coalescing(100, tile=16)
    with pytest.raises(ValueError, match="tile"):
        course.matmul_coalescing(64, tile=4)                  # 16 threads: less than a warp
    with pytest.raises(ValueError, match="n must"):
        course.matmul_coalescing(0)
    with pytest.raises(ValueError, match="kernel must"):
        course.matmul_coalescing(64).sectors_per_step("matmul_fast")


def test_the_lesson_kernels_are_the_ones_counted():
    """The index each load of the lesson's kernels uses is the one the count assumes (read from the notebook)."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[3] / "notebooks" / "11_kernels_and_streams.ipynb").read_text())
    source = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    for line in ("row, col = cuda.grid(2)", "col, row = cuda.grid(2)", "sA[ty, tx] = A[row, t * TILE + tx]",
                 "sB[ty, tx] = B[t * TILE + ty, col]", "acc += sA[ty, k] * sB[k, tx]"):
        assert line in source, line
