"""A Triton kernel's registers, spills and shared memory, read by compiling it for sm_75/80/90 without a GPU, and the
occupancy they allow by the CUDA occupancy calculator's rules, worked out here by hand."""
from __future__ import annotations

import importlib.util

import pytest

import gpulab as gl
from gpulab.kernels.resources import occupancy


@pytest.mark.parametrize("cc,regs,smem,warps,blocks,share,limiter", [
    (75, 64, 0, 4, 8, 1.0, "warp slots"),          # 2048 registers a warp, 8192 a block: 8 blocks, 8 x 4 of 32 warps
    (80, 128, 0, 4, 4, 0.25, "registers"),         # 4096 a warp, 16384 a block: 4 blocks = 16 of 64 warps
    (90, 32, 100 * 1024, 8, 2, 0.25, "shared memory"),   # 228 KiB // (100 KiB + 1 KiB reserved) = 2 blocks of 8 warps
    (86, 16, 0, 1, 16, 16 / 48, "block slots"),    # one warp a block: the 16 block slots bind before the 48 warps
    (80, 255, 0, 4, 2, 0.125, "registers"),        # 255 -> 8192 a warp (units of 256 x 32): 2 blocks
])
def test_occupancy_by_the_calculators_rules(cc, regs, smem, warps, blocks, share, limiter):
    occ = occupancy(cc, registers=regs, shared_bytes=smem, num_warps=warps)
    assert (occ.blocks_per_sm, occ.limiter) == (blocks, limiter) and occ.share == pytest.approx(share)


def test_unknown_targets_and_bad_kernels_are_named():
    with pytest.raises(ValueError, match="cc=70 is not one gpulab knows"):
        occupancy(70, registers=32, shared_bytes=0)
    with pytest.raises(TypeError, match="kernel must be a @triton.jit function"):
        gl.kernels.kernel_resources(lambda: None, {"n": "i32"})
    with pytest.raises(ValueError, match="ccs must be compute capabilities"):
        gl.kernels.kernel_resources(type("K", (), {"fn": print})(), {"n": "i32"}, ccs=(61,))


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
def test_a_kernel_compiled_for_three_gpus_reports_its_registers():
    import triton
    import triton.language as tl

    @triton.jit
    def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)

    try:
        res = gl.kernels.kernel_resources(scale_kernel, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"},
                                          {"BLOCK": 1024})
    except RuntimeError as e:
        if "needs a Triton that compiles ahead of time" not in str(e):
            raise
        pytest.skip(str(e))                             # an older Triton (the compat venv's torch floor)
    assert [r[0] for r in res.rows] == [75, 80, 90]
    for cc, regs, spill, shared, occ in res.rows:
        assert 1 <= regs <= 255 and spill == 0 and shared >= 0 and occ.cc == cc and 0 < occ.share <= 1
    assert res.at(80).registers == res.rows[1][1] and res.spilled(80) == 0
    with pytest.raises(KeyError, match="not compiled for cc=86"):
        res.at(86)
    text = repr(res)
    assert "sm_75" in text and "registers/thread" in text and "occupancy" in text


def test_the_ptx_says_whether_tl_dot_runs_on_tensor_cores():
    """Read from the compiled PTX, never assumed: fp16 inputs use tensor cores from sm_80 (mma.sync; Hopper's wgmma on
    sm_90), fp32 inputs at input_precision="ieee" never do; on sm_75 the installed Triton decides (3.8 emits FMA)."""
    triton = pytest.importorskip("triton")
    import triton.language as tl

    @triton.jit
    def dot_kernel(a_ptr, b_ptr, c_ptr, IEEE: tl.constexpr):
        r = tl.arange(0, 32)
        a = tl.load(a_ptr + r[:, None] * 32 + r[None, :])
        b = tl.load(b_ptr + r[:, None] * 32 + r[None, :])
        if IEEE:
            c = tl.dot(a, b, input_precision="ieee")
        else:
            c = tl.dot(a, b)
        tl.store(c_ptr + r[:, None] * 32 + r[None, :], c)

    sig = {"a_ptr": "*fp16", "b_ptr": "*fp16", "c_ptr": "*fp32"}
    try:
        half = gl.kernels.kernel_resources(dot_kernel, sig, {"IEEE": False})
    except RuntimeError as e:
        if "needs a Triton that compiles ahead of time" not in str(e):
            raise
        pytest.skip(str(e))
    full = gl.kernels.kernel_resources(dot_kernel, {"a_ptr": "*fp32", "b_ptr": "*fp32", "c_ptr": "*fp32"},
                                       {"IEEE": True})
    assert half.matrix_instructions(80) == "mma" and half.tensor_cores(80)
    assert half.matrix_instructions(90) in ("wgmma", "mma") and half.tensor_cores(90)
    assert half.matrix_instructions(75) in ("mma", "fma")
    assert all(full.matrix_instructions(cc) == "fma" and full.tensor_cores(cc) is False for cc in (75, 80, 90))
    assert "tensor cores (mma)" in repr(half) and "FMA, no tensor cores" in repr(full)
