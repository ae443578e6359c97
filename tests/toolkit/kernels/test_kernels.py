"""gpulab.kernels and lesson 11's scaffolding: backends (Triton's interpreter, Numba's CUDA simulator), kernel
checks, traffic counting, autotuning, timing and the roofline. The GPU-only paths (triton.autotune, do_bench)
run against the real Triton objects where they work without a driver, and against fakes whose shape is
checked against the real library otherwise."""
from __future__ import annotations

import inspect
import math
import types

import numpy as np
import pytest
import torch

import gpulab as gl
from gpulab import course
from gpulab.kernels import backends, measure

TRITON = gl.kernels.triton_backend("cpu")       # before any kernel below is defined
import triton  # noqa: E402

try:                                             # the course stack has Numba; the lean compat venv may not
    NUMBA = gl.kernels.numba_backend("cpu")
    from numba import cuda  # noqa: E402  (the simulator: kernels find `cuda` among their globals)
except ImportError:
    NUMBA = cuda = None
needs_numba = pytest.mark.skipif(NUMBA is None, reason="numba is not installed")
# The course stack's Triton (3.8, with torch 2.14) interprets these kernels; the compat venv's Triton 3.1 (torch 2.5)
# rejects their constexpr block sizes in its interpreter ("arange's arguments must be of type tl.constexpr").
needs_interpreter = pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 8),
                                       reason=f"Triton {triton.__version__}'s interpreter: the course pins 3.8")
import triton.language as tl  # noqa: E402


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)


@triton.jit
def _row_sum(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    tl.store(out_ptr + row, tl.sum(tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0), axis=0))


def _launch_add(x, y, block=128):
    out = torch.empty_like(x)
    _add[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK=block)
    return out


# ------------------------------------------------------------------------------------------------ backends
@needs_interpreter
def test_triton_backend_on_cpu_is_the_interpreter_and_kernels_compute_the_right_thing():
    assert TRITON.mode == "interpreter" and TRITON.simulated and TRITON.device == "cpu"
    x = torch.randn(1000)
    assert gl.kernels.check_kernel(_launch_add(x, x), 2 * x).ok
    m = torch.randn(7, 50)
    out = torch.empty(7)
    _row_sum[(7,)](m, out, 50, BLOCK=64)            # tl.sum: Triton's own library in interpreter mode
    assert gl.kernels.check_kernel(out, m.sum(1), atol=1e-5).ok
    assert "interpreter" in repr(TRITON) and "<b>triton" in TRITON._repr_html_()


def test_backends_refuse_a_gpu_that_is_not_there_and_unknown_devices():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        gl.kernels.triton_backend("cuda")
    with pytest.raises(ValueError, match="device='tpu' is not a device gpulab can use"):
        gl.kernels.numba_backend("tpu")


def test_triton_imported_before_the_interpreter_was_chosen_is_refused_with_the_fix():
    class FakeTl:
        pass

    FakeTl.max = type("JITFunction", (), {})()       # how Triton's tl.max looks when imported in compiler mode
    assert not backends._interpreted(FakeTl)
    assert backends._interpreted(tl)                # this process: imported in interpreter mode


@needs_numba
def test_numba_backend_runs_cuda_kernels_in_the_simulator_with_shared_memory_and_barriers():
    assert NUMBA.mode == "simulator" and NUMBA.module is cuda
    tile = 4

    @cuda.jit
    def block_reverse(a, out):                     # each block reverses its tile through shared memory
        s = cuda.shared.array(4, dtype=np.float32)
        t = cuda.threadIdx.x
        s[t] = a[cuda.grid(1)]
        cuda.syncthreads()                          # without the barrier, threads would read unwritten values
        out[cuda.grid(1)] = s[tile - 1 - t]

    a = np.arange(12, dtype=np.float32)
    out = np.zeros_like(a)
    block_reverse[3, tile](a, out)
    assert out.tolist() == [3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8]


@needs_numba
def test_numba_backend_refuses_a_process_that_imported_the_other_target(monkeypatch):
    monkeypatch.setattr(backends, "_numba_sim_active", lambda: False)    # as if numba.cuda had loaded for a GPU
    with pytest.raises(RuntimeError, match="restart the kernel"):
        gl.kernels.numba_backend("cpu")


_GPU_TARGET = """
import sys
import numpy as np
from gpulab.kernels import backends
backends._cuda_available = lambda device: True          # as on a GPU machine: the compiled target, not the simulator
{prepare}
try:
    b = backends.numba_backend()
except ImportError as e:
    print("IMPORTERROR", e)
    sys.exit(0)
from numba import cuda
def fill(x):
    i = cuda.grid(1)
    if i < x.size:
        x[i] = 2.0
ptx, _ = cuda.compile_ptx(fill, "void(float32[:])", cc=(9, 0))
print("MODE", b.mode, "NOTE", b.note, "PTX", ".target sm_90" in ptx)
"""


def _gpu_target(prepare: str) -> str:
    import subprocess
    import sys

    env = {k: v for k, v in __import__("os").environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-c", _GPU_TARGET.format(prepare=prepare)], capture_output=True, text=True,
                          timeout=240, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


@needs_numba
def test_numba_gpu_target_compiles_with_a_numpy_that_removed_row_stack():
    """NumPy 2.5 removed np.row_stack, which numba-cuda 0.30.4 still overloads when it loads its typing: seen on a GPU
    image with numpy 2.5.2, every @cuda.jit kernel failed on first launch. The backend restores the alias and says so."""
    out = _gpu_target("del np.row_stack")
    assert "MODE compiled" in out and "restored" in out and "row_stack" in out and "PTX True" in out, out
    assert "restored" not in _gpu_target(""), "nothing to restore where numpy still has the alias"


@needs_numba
def test_numba_gpu_target_that_cannot_compile_says_why_with_the_versions():
    out = _gpu_target("from numba import cuda as c\n"
                      "def broken(*a, **k): raise AttributeError('a planted failure')\n"
                      "c.compile_ptx = broken")
    assert out.startswith("IMPORTERROR") and "a planted failure" in out and "numba-cuda" in out and "numpy" in out, out


# ------------------------------------------------------------------------------------------------ checks
def test_check_kernel_counts_mismatches_and_refuses_wrong_shapes():
    e = torch.zeros(10)
    a = e.clone()
    a[3] = 1e-3
    c = gl.kernels.check_kernel(a, e, atol=1e-4, label="one off")
    assert not c.ok and c.mismatched == 1 and c.max_abs_err == pytest.approx(1e-3)
    assert "DOES NOT match" in repr(c)
    assert gl.kernels.check_kernel(a.numpy(), e, atol=1e-2).ok                 # arrays and tensors mix
    assert gl.kernels.check_kernel(torch.tensor([1e-9]), torch.tensor([0.0])).max_rel_err < 1e-3   # near zero
    nan = torch.tensor([float("nan"), 1.0])
    assert gl.kernels.check_kernel(nan, nan).ok
    assert not gl.kernels.check_kernel(nan, torch.tensor([0.0, 1.0])).ok
    with pytest.raises(ValueError, match="shape"):
        gl.kernels.check_kernel(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="atol"):
        gl.kernels.check_kernel(e, e, atol=-1)


# ------------------------------------------------------------------------------------------------ traffic
@needs_interpreter
def test_traffic_counts_operators_and_kernel_launches_under_one_rule():
    x = torch.randn(1000)
    eager = gl.kernels.traffic(lambda t: (t + t) + t, x)
    assert eager.bytes_moved == 2 * 3 * 4000 and eager.calls == 2 and eager.kernels == 0
    fused = gl.kernels.traffic(_launch_add, x, x, kernels=[_add])
    # one launch: x (passed twice, counted once) and out; the interpreter's own host copies are not counted
    assert fused.bytes_moved == 2 * 4000 and fused.kernels == 1 and fused.by_call == (("triton:_add", 8000),)
    assert not hasattr(_add, "__dict__") or "run" not in vars(_add)            # the launch hook is removed
    with pytest.raises(TypeError, match="not a Triton kernel"):
        gl.kernels.traffic(_launch_add, x, x, kernels=[object()])


# ------------------------------------------------------------------------------------------------ autotune
@needs_interpreter
def test_autotune_under_the_interpreter_launches_the_first_config_and_says_it_did_not_tune():
    configs = [triton.Config({"BLOCK": 64}, num_warps=2), triton.Config({"BLOCK": 256}, num_warps=4)]
    add = gl.kernels.autotune(configs, key=["n"], backend=TRITON)(_add)
    x = torch.randn(300)
    out = torch.empty_like(x)
    add[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, x, out, 300)
    assert gl.kernels.check_kernel(out, 2 * x).ok
    t = gl.kernels.tuning(add)
    assert not t.tuned and t.best == "BLOCK=64, num_warps=2" and "not tuned" in repr(t)
    with pytest.raises(ValueError, match="at least one"):
        gl.kernels.autotune([], key=["n"], backend=TRITON)


def test_autotune_on_a_gpu_is_tritons_own_autotuner_and_tuning_reads_its_record():
    from triton.runtime.autotuner import Autotuner

    compiled = gl.kernels.KernelBackend("triton", "compiled", "cuda", triton.__version__, "fake GPU")
    tuned = gl.kernels.autotune([triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 256})], key=["n"],
                                backend=compiled)(_add)
    assert isinstance(tuned, Autotuner)
    src = inspect.getsource(Autotuner)                 # the attributes tuning() reads exist in the real class
    assert "self.configs_timings = " in src and "self.best_config = " in src
    fast, slow = tuned.configs[1], tuned.configs[0]
    tuned.configs_timings = {slow: [0.020, 0.019, 0.021], fast: [0.008, 0.007, 0.009]}
    tuned.best_config = fast
    t = gl.kernels.tuning(tuned)
    assert t.tuned and t.best.startswith("BLOCK=256") and t.timings_ms[1][1] == pytest.approx(0.008)
    assert "<- chosen" in repr(t)


def test_tuning_before_the_first_launch_says_so():
    add = gl.kernels.autotune([triton.Config({"BLOCK": 64})], key=["n"], backend=TRITON)(_add)
    add.best_config = None
    with pytest.raises(ValueError, match="not been launched"):
        gl.kernels.tuning(add)


# ------------------------------------------------------------------------------------------------ timing
@needs_interpreter
def test_bench_kernel_labels_interpreter_time_and_uses_do_bench_when_compiled(monkeypatch, pretend_gpus):
    x = torch.randn(1000)
    m = gl.kernels.bench_kernel(lambda: _launch_add(x, x), label="add", backend=TRITON, min_run_time=0.05)
    assert m.label == "add (interpreter)" and m.device == "cpu"
    real = inspect.signature(triton.testing.do_bench)
    assert {"fn", "rep", "return_mode"} <= set(real.parameters)
    assert '"all"' in inspect.getsource(triton.testing.do_bench)          # return_mode="all": every run's ms
    calls = []

    def fake_do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
        assert list(inspect.signature(fake_do_bench).parameters) == list(real.parameters)
        calls.append((rep, return_mode))
        return [0.5, 0.25, 0.75]

    monkeypatch.setattr(triton.testing, "do_bench", fake_do_bench)
    real_env = gl.timing.environment
    monkeypatch.setattr("gpulab.timing.environment", lambda device="cpu": real_env("cpu"))   # no GPU name to read
    compiled = gl.kernels.KernelBackend("triton", "compiled", "cuda", triton.__version__, "fake GPU")
    m = gl.kernels.bench_kernel(lambda: None, label="k", backend=compiled, bytes_moved=1e6, rep_ms=50)
    assert calls == [(50, "all")] and m.backend == "triton.testing.do_bench"
    assert m.median_s == pytest.approx(0.5e-3) and m.bytes_per_s == pytest.approx(2e9)
    ref = gl.kernels.bench_kernel(lambda: None, label="PyTorch", device="cuda")    # the reference, timed alike
    assert ref.backend == "triton.testing.do_bench" and ref.device == "cuda" and len(calls) == 2


# ------------------------------------------------------------------------------------------------ roofline
def test_kernel_roofline_predicts_from_the_datasheet_and_caps_measured_shares():
    t4 = gl.gpu_spec("T4")
    rows = [gl.kernels.KernelWork("add", 1e6, 12e6), gl.kernels.KernelWork("mm", 2 * 1024**3, 12 * 1024**2)]
    r = gl.kernels.kernel_roofline(rows, gpu="T4")
    assert r.rows[0].bound == "memory" and r.rows[0].predicted_s == pytest.approx(12e6 / t4.bandwidth_bytes_per_s)
    assert r.rows[1].bound == "compute" and r.rows[1].predicted_s == pytest.approx(2 * 1024**3 / t4.fp32_flops)
    assert all(p.measured_s is None for p in r.rows) and "N/A" in repr(r)

    class Limits:
        bandwidth_bytes_per_s = 100e9

        def peak_flops(self, dtype="float32"):
            return 1e12

    env = gl.timing.environment("cpu")
    fast = gl.Measurement("add", (1e-4,), 1, "cuda", 1, env, "triton.testing.do_bench", 1, flops=1e6,
                          bytes_moved=12e6)                                     # 120 GB/s: beats the 100 GB/s ceiling
    r = gl.kernels.kernel_roofline([gl.kernels.KernelWork("add", 1e6, 12e6, fast)], gpu="T4", limits=Limits())
    assert r.rows[0].measured_s == pytest.approx(1e-4) and r.rows[0].bandwidth_share == pytest.approx(1.0)
    assert "ceiling raised" in r.note
    with pytest.raises(ValueError, match="bytes_moved"):
        gl.kernels.KernelWork("x", 1.0, 0)
    with pytest.raises(ValueError, match="at least one"):
        gl.kernels.kernel_roofline([])


# ------------------------------------------------------------------------------------------------ extensions
def test_cpp_extension_refuses_bad_names_and_knows_when_cuda_cannot_be_built():
    with pytest.raises(ValueError, match="identifier"):
        gl.kernels.cpp_extension("not a name", "", ["f"])
    with pytest.raises(ValueError, match="at least one"):
        gl.kernels.cpp_extension("ok_name", "", [])
    support = gl.kernels.cuda_build_support()
    if not torch.cuda.is_available():
        assert not support.ok and "no CUDA GPU" in support.reason


# ------------------------------------------------------------------------------------------------ course
def test_matmul_global_bytes_counts_reads_per_thread_and_per_tile():
    n = 64
    assert course.matmul_global_bytes(n, tile=None) == (2 * n**3 + n * n) * 4
    assert course.matmul_global_bytes(n, tile=16) == (2 * n**3 // 16 + n * n) * 4
    with pytest.raises(ValueError, match="divisor"):
        course.matmul_global_bytes(64, tile=10)
    with pytest.raises(ValueError, match="positive"):
        course.matmul_global_bytes(0, tile=None)


@needs_interpreter
def test_fused_challenge_passes_a_fused_kernel_and_fails_unfused_or_wrong_code():
    x = torch.randn(4096)

    def reference(t):
        return (t + t) + t              # two passes

    def fused(t):                       # one kernel: t read once (passed twice), out written once
        out = _launch_add(t, t)
        return out + t                  # ... plus one operator: still fewer bytes than the reference?

    def one_kernel(t):
        out = torch.empty_like(t)
        _add[(triton.cdiv(t.numel(), 128),)](t, t, out, t.numel(), BLOCK=128)
        return out * 1.4

    ok = course.fused_challenge("add", lambda t: t + t, lambda t: _launch_add(t, t), [x], kernels=[_add],
                                backend=TRITON, bytes_ratio=1.4)
    assert ok.passed and ok.bytes_ratio == pytest.approx(12 / 8) and ok.speedup is None
    with pytest.raises(AssertionError, match="fewer bytes"):
        course.fused_challenge("unfused", reference, reference, [x], backend=TRITON, bytes_ratio=2.0)
    with pytest.raises(AssertionError, match="WRONG"):
        course.fused_challenge("wrong", reference, one_kernel, [x], kernels=[_add], backend=TRITON, bytes_ratio=1.0)
    assert isinstance(course.fused_challenge("todo", reference, None, [x]), course.NotAnswered)
    with pytest.raises(ValueError, match="bytes_ratio"):
        course.fused_challenge("bad", reference, fused, [x], bytes_ratio=0)
    assert math.isfinite(ok.bytes_ratio)


# ------------------------------------------------------------------------------------------------ extension builds
NVCC_13 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_12 = (NVCC_13.replace("release 13.0, V13.0.88", "release 12.4, V12.4.131")
           .replace("cuda_13.0.r13.0", "cuda_12.4.r12.4"))


@pytest.fixture
def build_machine(monkeypatch, tmp_path):
    """A CUDA machine as cuda_build_support sees it: torch.version.cuda, a GPU, CUDA_HOME with an nvcc whose
    ``--version`` prints ``nvcc_text``; load_inline recorded instead of compiling."""
    import subprocess
    import torch.utils.cpp_extension as ce

    from gpulab.kernels import extension

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("#!/bin/sh\n")
    builds = []

    def install(torch_cuda="13.0", nvcc_text=NVCC_13):
        monkeypatch.setattr(torch.version, "cuda", torch_cuda)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(ce, "CUDA_HOME", str(tmp_path))
        runs = []

        def fake_run(cmd, **kwargs):
            runs.append(list(cmd))
            assert cmd == [str(tmp_path / "bin" / "nvcc"), "--version"]
            return subprocess.CompletedProcess(cmd, 0, stdout=nvcc_text, stderr="")

        monkeypatch.setattr(extension.subprocess, "run", fake_run)
        monkeypatch.setattr(ce, "load_inline", lambda **kwargs: builds.append(kwargs) or types.SimpleNamespace())
        return runs, builds

    return install


def test_cuda_build_support_reads_nvcc_release_as_torch_does():
    from gpulab.kernels.extension import _nvcc_release
    from torch.utils import cpp_extension as ce

    assert _nvcc_release(NVCC_13) == "13.0" and _nvcc_release(NVCC_12) == "12.4"
    assert _nvcc_release("no version here") is None
    # torch compares the same "release X.Y" field and refuses another major version
    src = inspect.getsource(ce._check_cuda_version)
    assert "release (\\d+[.]\\d+)" in src and "cuda_ver.major != torch_cuda_version.major" in src


def test_cuda_part_built_only_when_nvcc_major_matches_torch(build_machine):
    runs, builds = build_machine(torch_cuda="13.0", nvcc_text=NVCC_12)
    support = gl.kernels.cuda_build_support()
    assert not support.ok and support.nvcc_cuda == "12.4" and support.torch_cuda == "13.0"
    assert "nvcc is CUDA 12.4 but torch was built with CUDA 13.0" in support.reason and "\n" not in support.reason
    ext = gl.kernels.cpp_extension("mismatch_ext", "int f(); int g();", ["f"], cuda_sources="__global__ void k() {}",
                                   cuda_functions=["g"])
    assert not ext.cuda and ext.device == "cpu" and ext.functions == ("f",)
    assert "cuda_sources" not in builds[-1] and builds[-1]["name"] == "mismatch_ext"
    assert "CUDA part skipped (nvcc is CUDA 12.4" in ext.note and "C++)" in repr(ext)

    build_machine(torch_cuda="13.0", nvcc_text=NVCC_13.replace("13.0, V13.0.88", "13.2, V13.2.51"))
    ext = gl.kernels.cpp_extension("match_ext", "int f(); int g();", ["f"], cuda_sources="__global__ void k() {}",
                                   cuda_functions=["g"])
    assert ext.cuda and ext.device == "cuda" and ext.functions == ("f", "g") and ext.name == "match_ext_cuda"
    assert builds[-1]["cuda_sources"] == "__global__ void k() {}"       # a minor difference builds (torch warns)


def test_cuda_part_skipped_when_nvcc_says_no_release_or_torch_is_not_a_cuda_build(build_machine):
    build_machine(torch_cuda="13.0", nvcc_text="nvcc: command output without a version\n")
    support = gl.kernels.cuda_build_support()
    assert not support.ok and "names no CUDA release" in support.reason
    runs, _ = build_machine(torch_cuda=None)
    support = gl.kernels.cuda_build_support()
    assert not support.ok and "not a CUDA build" in support.reason and runs == []   # nvcc not even asked


def test_lesson_narrates_the_extension_by_what_was_built():
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[3] / "notebooks" / "11_kernels_and_streams.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    build = next(c for c in code if "gl.kernels.cpp_extension(" in c)
    story = next(c for c in code if "ext_table.speedup" in c)
    assert "ext.device" in build and "session.device" not in build.split("cpp_extension(", 1)[1]
    assert "kind=ext.device" in story


# ------------------------------------------------------------------------------------------------ tuning records
@needs_interpreter
def test_tuning_tells_a_single_config_from_the_interpreter():
    single = triton.autotune(configs=[triton.Config({"BLOCK": 64}, num_warps=2)], key=["n"])(_add)
    src = inspect.getsource(type(single).run)        # Triton's autotuner times configs only when it has several
    assert "len(self.configs) > 1" in src and "len(pruned_configs) == 1" in src
    x = torch.randn(300)
    out = torch.empty_like(x)
    single[lambda meta: (triton.cdiv(300, meta["BLOCK"]),)](x, x, out, 300)   # the real autotuner, one config
    assert gl.kernels.check_kernel(out, 2 * x).ok
    t = gl.kernels.tuning(single)
    assert not t.tuned and t.why == measure._ONE_CONFIG_WHY and "one config" in repr(t)

    interp = gl.kernels.autotune([triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"],
                                 backend=TRITON)(_add)
    assert gl.kernels.tuning(interp).why == measure._INTERPRETER_WHY
    one_interp = gl.kernels.autotune([triton.Config({"BLOCK": 64})], key=["n"], backend=TRITON)(_add)
    assert gl.kernels.tuning(one_interp).why == measure._ONE_CONFIG_WHY

    compiled = gl.kernels.KernelBackend("triton", "compiled", "cuda", triton.__version__, "fake GPU")
    pruned = gl.kernels.autotune([triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"],
                                 backend=compiled)(_add)
    pruned.best_config = pruned.configs[1]            # as run() leaves it when pruning kept one config
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_INTERPRET", "0")
        assert gl.kernels.tuning(pruned).why == measure._PRUNED_WHY


def test_check_kernel_refuses_what_is_not_numbers_and_compares_complex_with_complex():
    import numpy as np
    import torch

    from gpulab.kernels import check_kernel

    for bad in (None, "1.0", b"1", [object()]):
        with pytest.raises(TypeError, match="actual must"):
            check_kernel(bad, torch.ones(1))
    with pytest.raises(TypeError, match="expected must"):
        check_kernel(torch.ones(1), None)
    z = torch.tensor([1 + 2j, 3 - 1j])
    with pytest.raises(ValueError, match="actual is complex but expected is real"):
        check_kernel(z, z.real)
    assert check_kernel(z, z.clone()).ok
    assert not check_kernel(z, z + 1j).ok                    # the imaginary parts are compared too
    assert check_kernel(np.arange(3, dtype=np.int64), torch.arange(3.0)).ok
    assert check_kernel(z.conj(), torch.tensor([1 - 2j, 3 + 1j])).ok
