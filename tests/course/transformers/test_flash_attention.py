"""Lesson 13's FlashAttention-2 forward in Triton: the course's kernel in Triton's interpreter against
``scaled_dot_product_attention`` (small shapes: the interpreter runs each program in NumPy), the exercise check passing
it and failing planted bugs (no running-max rescale, causal masks off by one) with the right hint, causal block
skipping counted from the interpreter's loads, the notebook's reference solution and its unanswered skeleton, and the
wrapper's refusals. The kernels compile for sm_75, sm_80 and sm_90 in tests/toolkit/kernels/test_gpu_kernels_compile.py; the GPU
figure is tests/gpu/test_gpu_transformer.py's."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import gpulab as gl
from gpulab import course
from gpulab.course.transformers.flash_attention import TOLERANCES

TRITON = gl.kernels.triton_backend("cpu")        # the interpreter, before any kernel is defined
import triton  # noqa: E402

pytestmark = [pytest.mark.skipif(tuple(int(p) for p in triton.__version__.split(".")[:2]) < (3, 8),
                                 reason=f"Triton {triton.__version__}'s interpreter: the course pins 3.8"),
              # the planted bugs divide 0 by 0 in NumPy, as they would on a GPU (NaN, no warning there)
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")]
ROOT = Path(__file__).resolve().parents[3]
KERNEL_SOURCE = (ROOT / "gpulab" / "course" / "transformers" / "_flash_kernel.py").read_text()


def _sdpa(q, k, v, causal):
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal)


def _module(tmp_path: Path, name: str, source: str):
    """A kernel module written to a file and imported (Triton's @jit reads its function's source from the file)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _planted(tmp_path: Path, name: str, *swaps: tuple[str, str]):
    """The course's kernel with one bug planted: each ``old`` line of its source replaced by ``new``."""
    source = KERNEL_SOURCE
    for old, new in swaps:
        assert source.count(old) == 1, old
        source = source.replace(old, new)
    return _module(tmp_path, name, source).flash_attention_kernel


def _run(kernel):
    return lambda q, k, v, causal=True: course.flash_attention(q, k, v, causal, kernel=kernel)


# ------------------------------------------------------------------------------------------- the kernel itself
@pytest.mark.parametrize("shape, causal, dtype", [
    ((1, 2, 37, 16), True, torch.float32), ((1, 2, 37, 16), False, torch.float32),
    ((2, 3, 1, 32), True, torch.float32), ((1, 1, 64, 64), True, torch.float32),      # one query; whole tiles
    ((1, 2, 50, 32), True, torch.float16), ((1, 1, 33, 128), False, torch.float16),
    ((1, 2, 29, 16), True, torch.bfloat16),                                            # as fp32 copies, cast back
], ids=str)
def test_the_kernel_matches_sdpa_in_the_interpreter(shape, causal, dtype):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=gen).to(dtype) for _ in range(3))
    out = course.flash_attention(q, k, v, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype
    atol, rtol = TOLERANCES[str(dtype).replace("torch.", "")]
    torch.testing.assert_close(out.float(), _sdpa(q, k, v, causal), atol=atol, rtol=rtol)


def test_other_tiles_and_strided_inputs_give_the_same_output():
    gen = torch.Generator().manual_seed(1)
    qkv = torch.randn(1, 40, 3, 2, 32, generator=gen)               # (batch, T, q/k/v, heads, d): a GPT's layout
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))      # not contiguous
    ref = _sdpa(q, k, v, True)
    for bm, bn in ((16, 16), (32, 16), (16, 32), (64, 64)):
        torch.testing.assert_close(course.flash_attention(q, k, v, block_m=bm, block_n=bn), ref, atol=1e-5, rtol=1e-5)


def test_causal_block_skipping_loads_only_the_key_tiles_up_to_each_blocks_last_query(monkeypatch):
    from triton.runtime import interpreter

    shapes = []
    load = interpreter.InterpreterBuilder.create_masked_load

    def counting(self, ptrs, *args, **kwargs):
        shapes.append(tuple(ptrs.data.shape))
        return load(self, ptrs, *args, **kwargs)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_masked_load", counting)
    q = torch.randn(1, 1, 100, 32)
    loaded = {}
    for causal in (True, False):
        shapes.clear()
        course.flash_attention(q, q, q, causal=causal, block_m=16, block_n=16)
        loaded[causal] = sum(s == (32, 16) for s in shapes)          # K^T tiles: (head_dim, BLOCK_N)
    assert loaded[False] == course.key_tiles(100, block_m=16, block_n=16) == 7 * 7
    assert loaded[True] == course.key_tiles(100, block_m=16, block_n=16, causal=True) == 1 + 2 + 3 + 4 + 5 + 6 + 7


@pytest.mark.parametrize("seq_len, bm, bn", [(1, 16, 16), (100, 16, 16), (1024, 128, 64), (1000, 64, 32),
                                             (77, 32, 64)])
def test_key_tiles_counts_what_a_loop_over_tiles_would(seq_len, bm, bn):
    brute_full = brute_causal = 0
    for start_m in range(0, seq_len, bm):
        last_query = min(start_m + bm, seq_len) - 1
        for start_n in range(0, seq_len, bn):
            brute_full += 1
            brute_causal += start_n <= last_query
    assert course.key_tiles(seq_len, block_m=bm, block_n=bn) == brute_full
    assert course.key_tiles(seq_len, block_m=bm, block_n=bn, causal=True) == brute_causal


# ------------------------------------------------------------------------------------------- the exercise check
def test_the_check_passes_the_course_kernel_quickly_in_the_interpreter():
    start = time.perf_counter()
    result = course.check_flash_attention(course.flash_attention)
    took = time.perf_counter() - start
    print(f"\ncheck_flash_attention in Triton's interpreter: {took:.2f} s\n{result!r}")
    assert result.passed and len(result.cases) >= 5
    assert any(c.causal for c in result.cases) and any(not c.causal for c in result.cases)
    assert any(c.shape[2] % 16 for c in result.cases)                 # T not a multiple of the tiles
    assert "[ok]" in repr(result) and "<table" in result._repr_html_()
    assert took < 20


def test_the_check_waits_for_an_answer_and_refuses_what_is_not_a_function():
    assert isinstance(course.check_flash_attention(None), course.NotAnswered)
    with pytest.raises(TypeError, match="fn must be a function"):
        course.check_flash_attention(3)
    with pytest.raises(AssertionError, match="must return a tensor of q's shape"):
        course.check_flash_attention(lambda q, k, v, causal=True: q[..., :8])


def test_the_check_fails_a_kernel_without_the_running_max_rescale(tmp_path):
    kernel = _planted(tmp_path, "flash_no_rescale",
                      ("l_i = l_i * alpha + tl.sum(p, 1)", "l_i = l_i + tl.sum(p, 1)"),
                      ("acc = acc * alpha[:, None] + tl.dot", "acc = acc + tl.dot"))
    with pytest.raises(AssertionError) as failed:
        course.check_flash_attention(_run(kernel))
    message = str(failed.value)
    assert "[x] FlashAttention-2 forward" in message and "NO" in message
    assert "running max" in message and "alpha = exp2(m_i - m_new)" in message


@pytest.mark.parametrize("planted, hint", [
    ("rows[:, None] > cols[None, :]", "NaN"),                         # query i misses key i: row 0 sees nothing
    ("rows[:, None] + 1 >= cols[None, :]", "only causal shapes fail"),  # query i sees key i + 1
], ids=["misses-its-own-key", "sees-one-key-ahead"])
def test_the_check_fails_a_causal_mask_off_by_one(tmp_path, planted, hint):
    name = "flash_" + re.sub(r"\W+", "_", planted)
    kernel = _planted(tmp_path, name, ("rows[:, None] >= cols[None, :]", planted))
    with pytest.raises(AssertionError) as failed:
        course.check_flash_attention(_run(kernel))
    message = str(failed.value)
    assert hint in message and "0 to i inclusive" in message
    rows = [line.split() for line in message.split("\nHint")[0].splitlines() if line.startswith("(")]
    assert rows and all(r[-2] == "yes" for r in rows if r[5] == "no")   # the shapes without a mask pass


def test_the_check_fails_a_loop_that_stops_before_the_diagonal(tmp_path):
    kernel = _planted(tmp_path, "flash_short_loop", ("end = tl.minimum((tl.program_id(0) + 1) * BLOCK_M, seq_len)",
                                                     "end = tl.minimum(tl.program_id(0) * BLOCK_M, seq_len)"))
    with pytest.raises(AssertionError, match="NaN"):
        course.check_flash_attention(_run(kernel))


# ------------------------------------------------------------------------------------------- the notebook's exercise
def _cells() -> dict[str, str]:
    nb = json.loads((ROOT / "notebooks" / "13_transformers.ipynb").read_text())
    return {c["id"]: "".join(c["source"]) for c in nb["cells"]}


def _kernel_from_cell(tmp_path: Path, name: str, cell: str):
    start = cell.index("@triton.jit")
    body = textwrap.dedent(cell[start:].split("\n\n")[0] if "if course.solutions" not in cell
                           else cell[start - 4:].split("\n\n    my_flash_attention")[0])
    return _module(tmp_path, name, "import triton\nimport triton.language as tl\n\n" + body + "\n").my_flash_kernel


def test_the_notebooks_solution_passes_and_its_skeleton_is_unanswered_until_written(tmp_path):
    cells = _cells()
    exercise, solution = cells["13-flash-exercise"], cells["13-flash-solution"]
    assert "my_flash_attention = None" in exercise and "YOUR CODE" in exercise
    assert "tl.math.exp2" not in exercise                           # the online softmax is the learner's to write
    assert "if course.solutions():" in solution and "course.check_flash_attention(my_flash_attention)" in \
        cells["13-flash-check"]
    assert course.check_flash_attention(_run(_kernel_from_cell(tmp_path, "nb_solution", solution))).passed
    # the skeleton launched as it stands (the learner set my_flash_attention too early): the check says it is wrong
    with pytest.raises(AssertionError, match=r"\[x\] FlashAttention-2"):
        course.check_flash_attention(_run(_kernel_from_cell(tmp_path, "nb_skeleton", exercise)))


def test_the_notebooks_solution_kernel_is_the_course_kernel():
    solution = _cells()["13-flash-solution"]
    body = textwrap.dedent(solution[solution.index("    @triton.jit"):].split("\n\n    my_flash_attention")[0])
    reference = KERNEL_SOURCE[KERNEL_SOURCE.index("@triton.jit"):].strip()
    squash = lambda s: re.sub(r"\s+", " ", s).replace("my_flash_kernel", "flash_attention_kernel")   # noqa: E731
    assert squash(body.strip()) == squash(reference)


# ------------------------------------------------------------------------------------------- timing and refusals
def test_timing_is_for_a_gpu_and_says_so_on_a_cpu():
    t = course.time_flash_attention(device="cpu")
    assert not t.measured and t.speedup is None and t.reason.startswith("timing is for a GPU")
    assert t.tiles == (course.key_tiles(1024, block_m=16, block_n=16, causal=True),
                       course.key_tiles(1024, block_m=16, block_n=16))
    assert t.flops == 4 * 64 * (1024 * 1025 / 2) * 4 * 12
    assert "timing is for a GPU" in repr(t) and "<table" in t._repr_html_() and "the course's" in t.label


@pytest.mark.parametrize("kwargs, error, match", [
    ({"head_dim": 48}, ValueError, "power of two"), ({"head_dim": 256}, ValueError, "power of two"),
    ({"seq_len": 0}, ValueError, "seq_len"), ({"causal": 1}, TypeError, "causal"),
    ({"dtype": torch.int32}, ValueError, "dtype"), ({"fn": 3}, TypeError, "fn must be"),
    ({"device": "tpu"}, ValueError, "device"),
])
def test_timing_refuses_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        course.time_flash_attention(**kwargs)


def _qkv(shape=(1, 2, 20, 16), dtype=torch.float32):
    return [torch.randn(shape, dtype=dtype) for _ in range(3)]


@pytest.mark.parametrize("change, error, match", [
    (lambda a: (a[0].numpy(), a[1], a[2]), TypeError, "q must be a torch tensor"),
    (lambda a: (a[0][0], a[1][0], a[2][0]), ValueError, "4-D"),
    (lambda a: (a[0], a[1][:, :, :10], a[2]), ValueError, "same shape"),
    (lambda a: (a[0], a[1].half(), a[2]), ValueError, "one dtype"),
    (lambda a: (a[0].double(), a[1].double(), a[2].double()), ValueError, "one dtype"),
    (lambda a: tuple(t[..., :12] for t in a), ValueError, "power of two from 16 to 128"),
    (lambda a: tuple(torch.randn(1, 1, 4, 256) for _ in a), ValueError, "power of two from 16 to 128"),
    (lambda a: (a[0].requires_grad_(), a[1], a[2]), ValueError, "forward pass only"),
], ids=["numpy", "3-D", "shapes", "mixed-dtypes", "float64", "head-dim-12", "head-dim-256", "requires-grad"])
def test_the_wrapper_refuses_bad_inputs_clearly(change, error, match):
    with pytest.raises(error, match=match):
        course.flash_attention(*change(_qkv()))


def test_the_wrapper_refuses_bad_options_and_kernels():
    q, k, v = _qkv()
    with pytest.raises(TypeError, match="causal must be True or False"):
        course.flash_attention(q, k, v, causal="yes")
    with pytest.raises(ValueError, match="block_m must be a power of two"):
        course.flash_attention(q, k, v, block_m=24)
    with pytest.raises(ValueError, match="block_n must be a power of two"):
        course.flash_attention(q, k, v, block_n=8)        # tl.dot needs 16 or more
    with pytest.raises(TypeError, match="kernel must be a @triton.jit function"):
        course.flash_attention(q, k, v, kernel=lambda *a: None)


def test_the_gpu_timing_path_times_both_and_refuses_a_wrong_kernel():
    """What time_flash_attention runs on a GPU, run here on a tiny shape (the interpreter's times mean nothing)."""
    from gpulab.course.transformers.flash_attention import _timed

    shape, flops = (1, 1, 20, 16), 4.0 * 16 * 210
    t = _timed(course.flash_attention, "yours", shape, torch.float32, True, torch.device("cpu"), flops, (3, 4), (16, 16),
               0.02)
    assert t.measured and t.yours_s > 0 and t.sdpa_s > 0 and t.speedup == t.sdpa_s / t.yours_s
    assert t.sdpa_backend in ("flash", "math", "memory-efficient", "cudnn") and "speed vs SDPA" in repr(t)
    with pytest.raises(AssertionError, match="does not match SDPA"):
        _timed(lambda q, k, v, causal=True: q, "wrong", shape, torch.float32, True, torch.device("cpu"), flops, (3, 4),
               (16, 16), 0.02)


def test_the_wrapper_refuses_a_device_triton_cannot_run_on():
    q = torch.randn(1, 1, 8, 16, device="meta")
    with pytest.raises(ValueError, match="Triton kernels run compiled on a CUDA GPU"):
        course.flash_attention(q, q, q)
