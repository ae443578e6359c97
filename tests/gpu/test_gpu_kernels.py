"""Lesson 11's own kernels compiled and run on a CUDA GPU and checked against PyTorch: Triton (vector add, fused
bias + GELU, row softmax, the autotuned add and the fused-kernel challenge's reference), Numba CUDA (naive and
tiled matmul) and the lesson's load_inline C++/CUDA extension."""
from __future__ import annotations

import ast
import json
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

import gpulab as gl
from gpulab import course

TILE = 16                          # the tiled Numba matmul's tile (a compile-time constant of the kernel)
LESSON_11 = Path(__file__).resolve().parents[2] / "notebooks" / "11_kernels_and_streams.ipynb"

# Imported by the fixtures below once the backend is chosen (Triton reads TRITON_INTERPRET when a kernel is
# defined, Numba reads NUMBA_ENABLE_CUDASIM when numba.cuda is imported): the kernels find them among their globals.
triton = tl = None
cuda = float32 = None


# ------------------------------------------------------------------------------------------------ Triton
@pytest.fixture(scope="module")
def triton_run():
    try:
        backend = gl.kernels.triton_backend("cuda")
    except ImportError as e:
        pytest.skip(f"Triton is not installed: {e}")
    if backend.mode != "compiled":
        pytest.skip(f"Triton runs in its interpreter in this process ({backend.note}): another test set "
                    "TRITON_INTERPRET=1; run tests/gpu on its own (python -m gpulab check)")
    return backend


@pytest.fixture(scope="module")
def kernels(triton_run):
    """The lesson's Triton kernels, defined after the backend was chosen (as the notebook does)."""
    global triton, tl
    import triton
    import triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    @triton.jit
    def bias_gelu_kernel(x_ptr, bias_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        v = tl.load(x_ptr + offsets, mask=mask) + tl.load(bias_ptr + offsets % cols, mask=mask)
        tl.store(out_ptr + offsets, 0.5 * v * (1.0 + tl.erf(v * 0.7071067811865476)), mask=mask)

    @triton.jit
    def softmax_kernel(out_ptr, in_ptr, in_stride, out_stride, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(in_ptr + row * in_stride + cols, mask=cols < n_cols, other=-float("inf"))
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(out_ptr + row * out_stride + cols, e / tl.sum(e, axis=0), mask=cols < n_cols)

    @triton.jit
    def scale_shift_relu_kernel(x_ptr, scale_ptr, shift_ptr, out_ptr, n, cols, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        c = offsets % cols
        v = tl.load(x_ptr + offsets, mask=mask) * tl.load(scale_ptr + c, mask=mask) + tl.load(shift_ptr + c, mask=mask)
        tl.store(out_ptr + offsets, tl.maximum(v, 0.0), mask=mask)

    @gl.kernels.autotune([triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((256, 2), (1024, 4), (4096, 8))],
                         key=["n"], backend=triton_run)
    @triton.jit
    def add_tuned(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask),
                 mask=mask)

    import torch

    def add(x, y, BLOCK=1024):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK=BLOCK)
        return out

    def bias_gelu(x, bias, BLOCK=1024):
        x = x.contiguous()
        out = torch.empty_like(x)
        bias_gelu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, bias, out, x.numel(), x.shape[-1], BLOCK=BLOCK)
        return out

    def softmax(x):
        out = torch.empty_like(x)
        softmax_kernel[(x.shape[0],)](out, x, x.stride(0), out.stride(0), x.shape[1],
                                      BLOCK=triton.next_power_of_2(x.shape[1]))
        return out

    def scale_shift_relu(x, scale, shift, BLOCK=1024):
        out = torch.empty_like(x)
        scale_shift_relu_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, scale, shift, out, x.numel(), x.shape[1],
                                                                   BLOCK=BLOCK)
        return out

    return SimpleNamespace(add=add, bias_gelu=bias_gelu, softmax=softmax, scale_shift_relu=scale_shift_relu,
                           add_tuned=add_tuned, bias_gelu_kernel=bias_gelu_kernel,
                           scale_shift_relu_kernel=scale_shift_relu_kernel)


def test_triton_kernels_compile_on_cuda_and_match_torch(triton_run, kernels, spec, figure):
    import torch
    import torch.nn.functional as F

    assert triton_run.device == "cuda" and not triton_run.simulated, triton_run
    assert type(kernels.bias_gelu_kernel).__name__ == "JITFunction", (
        f"the kernels were defined for Triton's interpreter ({type(kernels.bias_gelu_kernel).__name__}), not compiled")
    x = torch.randn(8192, 4096, device="cuda")
    bias = torch.randn(4096, device="cuda")
    s_in = torch.randn(8192, 1000, device="cuda")
    checks = [gl.kernels.check_kernel(kernels.add(x, x), x + x, label="vector add"),
              gl.kernels.check_kernel(kernels.bias_gelu(x, bias), F.gelu(x + bias), label="bias + GELU"),
              gl.kernels.check_kernel(kernels.softmax(s_in), torch.softmax(s_in, dim=1), atol=1e-6,
                                      label="row softmax")]
    wrong = [c for c in checks if not c.ok]
    assert not wrong, f"compiled Triton kernels disagree with PyTorch on {torch.cuda.get_device_name()}: {wrong}"
    nbytes = 2 * x.numel() * 4 + bias.numel() * 4
    fused = gl.kernels.bench_kernel(lambda: kernels.bias_gelu(x, bias), label="bias + GELU, Triton",
                                    backend=triton_run, bytes_moved=nbytes)
    eager = gl.kernels.bench_kernel(lambda: F.gelu(x + bias), label="bias + GELU, PyTorch", device="cuda")
    assert fused.backend == "triton.testing.do_bench", f"a compiled kernel should be timed with do_bench: {fused}"
    figure("triton_bias_gelu_bandwidth", fused.bytes_per_s / 1e9, "GB/s",
           datasheet=None if spec is None else spec.bandwidth_bytes_per_s / 1e9,
           note="fused bias + GELU on 8192x4096 fp32: one read and one write of the tensor, do_bench")
    figure("triton_bias_gelu_speedup", eager.median_s / fused.median_s, "x",
           note=f"PyTorch add + gelu {eager.median_s * 1e3:.3f} ms -> fused {fused.median_s * 1e3:.3f} ms")


def test_triton_autotune_times_every_config_on_the_gpu(kernels):
    import torch

    x = torch.randn(8192 * 1024, device="cuda")
    out = torch.empty_like(x)
    kernels.add_tuned[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x, out, x.numel())
    assert gl.kernels.check_kernel(out, x + x, label="autotuned add").ok
    t = gl.kernels.tuning(kernels.add_tuned)
    assert t.tuned, f"triton.autotune on a GPU should time every config on the first launch:\n{t}"
    assert len(t.timings_ms) == 3 and all(ms is not None and ms > 0 for _, ms in t.timings_ms), t
    assert t.best in [c for c, _ in t.timings_ms], t


def test_fused_challenge_reference_passes_on_the_gpu(triton_run, kernels, figure):
    import torch

    def scale_shift_relu(x, scale, shift):
        return torch.relu(x * scale + shift)

    inputs = [torch.randn(8192, 1024, device="cuda"), torch.rand(1024, device="cuda") + 0.5,
              torch.randn(1024, device="cuda")]
    result = course.fused_challenge("fused scale + shift + ReLU", scale_shift_relu, kernels.scale_shift_relu, inputs,
                                    kernels=[kernels.scale_shift_relu_kernel], backend=triton_run, bytes_ratio=2.0,
                                    speedup=1.5)
    assert result.passed and result.speedup is not None, (
        f"lesson 11's challenge should be graded on speed here: {result}")
    figure("fused_challenge_speedup", result.speedup, "x", datasheet=None,
           note=f"the reference solution vs relu(x * scale + shift) on {result.timed_on}; the lesson asks for 1.5x")


# ------------------------------------------------------------------------------------------------ Numba CUDA
@pytest.fixture(scope="module")
def numba_kernels():
    global cuda, float32
    try:
        backend = gl.kernels.numba_backend("cuda")
    except ImportError as e:
        pytest.skip(f"numba-cuda is not installed: {e}")
    except RuntimeError as e:
        pytest.skip(f"numba.cuda was already imported as the simulator in this process ({e}); run tests/gpu on its "
                    "own (python -m gpulab check)")
    if backend.mode != "compiled":
        pytest.skip(f"Numba runs its CUDA simulator in this process ({backend.note}): NUMBA_ENABLE_CUDASIM=1 is set")
    from numba import cuda, float32

    if not cuda.is_available():
        pytest.fail("numba-cuda is installed but numba.cuda.is_available() is False: it found no driver or NVVM for "
                    "this GPU (pip install 'numba-cuda[cu12]' or '[cu13]', matching torch.version.cuda); lesson 11's "
                    "Numba cells would fail here")

    @cuda.jit
    def matmul_naive(A, B, C):
        row, col = cuda.grid(2)
        if row < C.shape[0] and col < C.shape[1]:
            acc = float32(0.0)
            for k in range(A.shape[1]):
                acc += A[row, k] * B[k, col]
            C[row, col] = acc

    @cuda.jit
    def matmul_tiled(A, B, C):
        sA = cuda.shared.array((TILE, TILE), dtype=float32)
        sB = cuda.shared.array((TILE, TILE), dtype=float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row, col = cuda.grid(2)
        acc = float32(0.0)
        for t in range(A.shape[1] // TILE):
            sA[tx, ty] = A[row, t * TILE + ty]
            sB[tx, ty] = B[t * TILE + tx, col]
            cuda.syncthreads()
            for k in range(TILE):
                acc += sA[tx, k] * sB[k, ty]
            cuda.syncthreads()
        C[row, col] = acc

    return SimpleNamespace(backend=backend, naive=matmul_naive, tiled=matmul_tiled)


def test_numba_naive_and_tiled_matmul_run_on_the_gpu(numba_kernels, figure):
    import torch

    assert numba_kernels.backend.device == "cuda" and not numba_kernels.backend.simulated, numba_kernels.backend
    n = 1024
    A = torch.randn(n, n, device="cuda")
    B = torch.randn(n, n, device="cuda")
    expected = (A.double() @ B.double()).float()          # exact reference, whatever TF32 says
    grid = (n // TILE, n // TILE)
    times = {}
    for name, kernel in (("naive", numba_kernels.naive), ("tiled", numba_kernels.tiled)):
        C = torch.zeros(n, n, device="cuda")

        def launch(kernel=kernel, C=C):
            kernel[grid, (TILE, TILE)](A, B, C)           # CUDA tensors go in as they are (__cuda_array_interface__)

        try:
            launch()
            torch.cuda.synchronize()
        except Exception as e:
            pytest.fail(f"the {name} Numba kernel failed to compile or launch on the GPU: {type(e).__name__}: {e}")
        check = gl.kernels.check_kernel(C, expected, atol=1e-3, rtol=1e-3, label=f"matmul_{name}")
        assert check.ok, f"Numba's {name} matmul differs from torch's on the GPU: {check}"
        times[name] = gl.benchmark(launch, label=f"matmul_{name}", warmup=1, min_run_time=0.3, device="cuda",
                                   warn_noisy=False)
        figure(f"numba_matmul_{name}", times[name].median_s * 1e3, "ms", note=f"{n}x{n} fp32, tiles {TILE}x{TILE}")
    fewer = course.matmul_global_bytes(n, tile=None) / course.matmul_global_bytes(n, tile=TILE)
    figure("numba_tiled_vs_naive_speedup", times["naive"].median_s / times["tiled"].median_s, "x",
           note=f"the tiled kernel moves {fewer:.1f}x fewer bytes through global memory")


# ------------------------------------------------------------------------------------------------ C++/CUDA extension
def _lesson_extension() -> dict:
    """The lesson's extension cell: its C++ and CUDA sources and the cpp_extension call's arguments (the same
    name and sources give the same torch build cache entry as the notebook)."""
    cells = json.loads(LESSON_11.read_text(encoding="utf-8"))["cells"]
    cell = next((c for c in cells if c["cell_type"] == "code" and "cpp_extension(" in "".join(c["source"])), None)
    assert cell is not None, f"{LESSON_11.name} has no cell calling gl.kernels.cpp_extension"
    tree = ast.parse("".join(cell["source"]))
    sources = {t.id: ast.literal_eval(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
               for t in node.targets if isinstance(t, ast.Name) and t.id in ("cpp_source", "cuda_source")}
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "cpp_extension")
    keywords = {k.arg: k.value for k in call.keywords}
    assert set(sources) == {"cpp_source", "cuda_source"} and "cuda_functions" in keywords, (
        f"{LESSON_11.name}'s extension cell no longer assigns cpp_source and cuda_source as plain strings")
    return {"name": ast.literal_eval(call.args[0]), "functions": ast.literal_eval(call.args[2]),
            "cuda_functions": ast.literal_eval(keywords["cuda_functions"]), **sources}


def _nvcc_release(nvcc: str) -> tuple[int, int] | None:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release (\d+)\.(\d+)", out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def test_load_inline_extension_builds_with_cuda_and_runs(figure):
    import torch
    import torch.nn.functional as F

    support = gl.kernels.cuda_build_support()
    if not support.ok:
        pytest.skip(f"the CUDA part of lesson 11's extension cannot be built here: {support.reason}")
    release = _nvcc_release(support.nvcc)
    torch_major = int(torch.version.cuda.split(".")[0])
    if release is None:
        pytest.skip(f"{support.nvcc} --version printed no release number")
    if release[0] != torch_major:
        pytest.skip(f"nvcc is CUDA {release[0]}.{release[1]} but torch was built for CUDA {torch.version.cuda}: "
                    "load_inline refuses a different major version; install the CUDA toolkit matching torch")
    src = _lesson_extension()
    ext = gl.kernels.cpp_extension(src["name"], src["cpp_source"], src["functions"], cuda_sources=src["cuda_source"],
                                   cuda_functions=src["cuda_functions"])
    assert ext.cuda, f"nvcc {release[0]}.{release[1]} is here but the CUDA part was not built: {ext}"
    fn = getattr(ext.module, src["cuda_functions"][0])
    x = torch.randn(8192, 1024, device="cuda")
    b = torch.randn(1024, device="cuda")
    out = fn(x, b)
    assert out.is_cuda, "the CUDA function returned a tensor off the GPU"
    check = gl.kernels.check_kernel(out, F.gelu(x + b), atol=1e-5, label=ext.name)
    assert check.ok, f"the extension's CUDA kernel differs from PyTorch's add + gelu: {check}"
    figure("extension_load_time", ext.build_s, "s",
           note=("compiled now (cold torch_extensions cache)" if ext.build_s > 2 else "loaded from the build cache")
                + f"; nvcc {release[0]}.{release[1]}, torch CUDA {torch.version.cuda}")
