"""Lesson 10's compile time (regional compilation and the compile cache) and CUDA graphs in a compiled training
step (``mode="reduce-overhead"`` with ``torch.compiler.cudagraph_mark_step_begin``)."""
from __future__ import annotations

import os
import types

import pytest

torch = pytest.importorskip("torch")

from gpulab import course  # noqa: E402
from gpulab.course.compilers import modes  # noqa: E402
from gpulab.compiling import compiled_graphs  # noqa: E402


class Block(torch.nn.Module):      # a class of our own: Dynamo compiles it on its own (on torch 2.5, not a built-in)
    def __init__(self, d: int):
        super().__init__()
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc(x))


class Stack(torch.nn.Module):
    def __init__(self, n: int = 4, d: int = 16):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(d) for _ in range(n))
        self.head = torch.nn.Linear(d, 2)

    def forward(self, x):
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def test_regional_compilation_compiles_the_block_once_not_once_per_layer():
    t = course.compile_time(lambda: Stack(6), torch.randn(4, 16), backend="eager", steady_calls=1)
    assert t.blocks == 6
    assert t.whole.graphs >= 1 and 1 <= t.regional.graphs < 6        # one graph (or two) serves all six blocks
    assert min(t.whole.cold_s, t.whole.warm_s, t.regional.cold_s, t.eager_s) > 0
    assert "each of the 6 blocks (regional)" in repr(t) and "<table" in t._repr_html_()


def test_inductor_cold_compile_is_paid_again_warm_it_comes_from_the_cache_and_the_environment_is_restored():
    before = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    t = course.compile_time(lambda: Stack(2, 8), torch.randn(4, 8), steady_calls=1)
    # a cold C++ build takes seconds; loading what it built takes a fraction of it, on any machine and load
    assert t.whole.warm_compile_s < t.whole.compile_s and t.cache_saving > 1
    assert {k: os.environ.get(k) for k in before} == before
    assert compiled_graphs() >= 0 and t.backend == "inductor"


def test_a_block_that_compiles_no_graph_is_refused_not_timed_as_compiled(monkeypatch):
    from gpulab.course.compilers import compile_time as ct

    monkeypatch.setattr(ct, "compiled_graphs", lambda: 0, raising=False)
    import gpulab.compiling
    monkeypatch.setattr(gpulab.compiling, "compiled_graphs", lambda: 0)
    with pytest.raises(ValueError, match="compiled no graph.*class of your own"):
        course.compile_time(Stack, torch.randn(4, 16), backend="eager", steady_calls=1)


def test_compile_time_refuses_bad_input():
    with pytest.raises(TypeError, match="make_model"):
        course.compile_time(Stack(), torch.randn(4, 16))
    with pytest.raises(ValueError, match="blocks"):
        course.compile_time(Stack, torch.randn(4, 16), blocks="not a name")
    with pytest.raises(ValueError, match=r"no non-empty nn.ModuleList at .layers"):
        course.compile_time(Stack, torch.randn(4, 16), blocks="layers", backend="eager")
    with pytest.raises(TypeError, match="must return a torch.nn.Module"):
        course.compile_time(lambda: "model", torch.randn(4, 16), backend="eager")
    with pytest.raises(ValueError, match="steady_calls"):
        course.compile_time(Stack, torch.randn(4, 16), steady_calls=0)


def test_a_cuda_graph_training_step_marks_each_step_begin(monkeypatch):
    """mode="reduce-overhead" on a CUDA tensor: every compiled step starts with cudagraph_mark_step_begin (the
    CUDA-graph runtime may then reuse the last step's output memory). Here on a CPU, with the device test faked."""
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    monkeypatch.setattr(modes, "_records_cuda_graphs", lambda mode, x: mode in modes._GRAPH_MODES)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    r = course.compiled_training(model, lambda p: torch.optim.SGD(p, lr=0.1), x, y, mode="reduce-overhead",
                                 steps=2, min_run_time=0.05)
    assert r.same and r.mode == "reduce-overhead" and r.cuda_graphs
    assert len(marks) >= 2 + 1                   # the first step, the second, and every timed one
    assert "mode='reduce-overhead', CUDA graphs" in repr(r)


def test_cuda_graphs_are_recorded_only_for_a_graph_mode_on_a_cuda_tensor():
    cuda = types.SimpleNamespace(is_cuda=True)
    assert modes._records_cuda_graphs("reduce-overhead", cuda) and modes._records_cuda_graphs("max-autotune", cuda)
    assert not modes._records_cuda_graphs("default", cuda) and not modes._records_cuda_graphs(None, cuda)
    assert not modes._records_cuda_graphs("reduce-overhead", torch.ones(1))


def test_compiled_training_refuses_a_mode_it_does_not_know_or_beside_another_backend():
    model = torch.nn.Linear(4, 2)
    x, y = torch.randn(4, 4), torch.randint(0, 2, (4,))
    with pytest.raises(ValueError, match="mode must be one of"):
        course.compiled_training(model, lambda p: torch.optim.SGD(p, lr=0.1), x, y, mode="fast")
    with pytest.raises(ValueError, match="a backend or a mode, not both"):
        course.compiled_training(model, lambda p: torch.optim.SGD(p, lr=0.1), x, y, backend="eager",
                                 mode="reduce-overhead")
