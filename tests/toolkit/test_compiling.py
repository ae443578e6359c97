"""gpulab.compiling: graph breaks, compile reports, CUDA graph capture (against a fake shaped like torch.cuda),
ONNX Runtime, and one-off costs with break-even in comparison tables."""
from __future__ import annotations

import gc
import inspect
import time
import types
import warnings

import pytest
import torch

import gpulab as gl
from gpulab import compiling


def _with_print(x):
    y = x * 2
    print("side effect")
    return y + 1


def test_graph_breaks_found_with_reasons_and_fixed(capsys):
    got = compiling.graph_breaks(_with_print, torch.ones(4))
    assert got.breaks == 1 and got.graphs == 2 and len(got.reasons) == 1
    assert "print" in got.reasons[0] and "test_compiling.py" in got.reasons[0]       # the reason and where
    clean = compiling.graph_breaks(lambda x: (x * 2) + 1, torch.ones(4))
    assert clean.breaks == 0 and clean.graphs == 1 and "no graph break" in clean._repr_html_()
    assert "1 graph break(s)" in repr(got)
    with pytest.raises(TypeError, match="callable"):
        compiling.graph_breaks(3)


def test_compile_report_counts_compiles_and_recompiles():
    f = lambda x: torch.relu(x * 3).sum()
    r = compiling.compile_report(f, torch.ones(32), label="relu", backend="eager", min_run_time=0.05,
                                 inputs=[(torch.ones(8, 4),)])   # another rank: a recompile
    assert r.compiles == 1 and r.recompiles >= 1 and r.breaks.breaks == 0
    assert r.first_call_s > 0 and r.compile_s >= 0 and r.speedup > 0
    assert r.eager.label == "relu, eager" and r.compiled.label == "relu, compiled"
    text = repr(r)
    assert "break-even" in text and "backend='eager'" in text and "<table" in r._repr_html_()
    if r.saved_per_call_s > 0:
        assert r.break_even_steps == pytest.approx(r.compile_s / r.saved_per_call_s)
    else:
        assert r.break_even_steps is None and "never" in text
    with pytest.raises(ValueError, match="Inductor setting"):
        compiling.compile_report(f, torch.ones(2), backend="eager", mode="reduce-overhead")
    with pytest.raises(ValueError, match="unknown mode"):
        compiling.compile_report(f, torch.ones(2), mode="fast")
    with pytest.raises(TypeError):
        compiling.compile_report("f")


def test_compiled_graphs_counts_dynamo_graphs():
    torch._dynamo.reset()
    before = compiling.compiled_graphs()
    g = torch.compile(lambda x: x - 1, backend="eager", dynamic=False)
    for n in (2, 3, 4):
        g(torch.ones(n))
    assert compiling.compiled_graphs() - before == 3          # dynamic=False: one graph per size


# ---- CUDA graphs, against a fake torch.cuda checked against the real one ----------------------------------
class _FakeCudaTensor(torch.Tensor):
    @property
    def is_cuda(self):                                        # a CPU tensor that says it lives on a GPU
        return True


def test_fake_cuda_graph_api_matches_the_real_one():
    params = list(inspect.signature(torch.cuda.graph.__init__).parameters)
    assert params[:2] == ["self", "cuda_graph"]
    assert callable(torch.cuda.CUDAGraph.replay) and callable(torch.cuda.Stream.wait_stream)
    assert callable(torch.cuda.stream) and callable(torch.cuda.current_stream)


def _fake_cuda(monkeypatch, calls):
    """torch.cuda replaced by the parts cuda_graph uses, recording what is called."""

    class Stream:
        def wait_stream(self, other):
            calls.append("wait")

    class Graph:
        def replay(self):
            calls.append("replay")

    class capture:                                            # torch.cuda.graph(cuda_graph): the capture context
        def __init__(self, cuda_graph):
            assert isinstance(cuda_graph, Graph)

        def __enter__(self):
            calls.append("capture")

        def __exit__(self, *exc):
            calls.append("end")

    class side:
        def __init__(self, s):
            pass

        def __enter__(self):
            calls.append("side")

        def __exit__(self, *exc):
            pass

    fake = types.SimpleNamespace(is_available=lambda: True, Stream=Stream, CUDAGraph=Graph, graph=capture,
                                 stream=side, current_stream=Stream)
    monkeypatch.setattr(torch, "cuda", fake)


def test_cuda_graph_capture_and_replay_with_a_fake(monkeypatch):
    calls = []
    _fake_cuda(monkeypatch, calls)
    static = torch.zeros(3).as_subclass(_FakeCudaTensor)
    seen = []
    replay = compiling.cuda_graph(lambda x: seen.append(x.clone()) or x * 2, static, warmup=2)
    assert calls == ["wait", "side", "wait", "capture", "end"] and len(seen) == 3    # 2 warm-up calls + capture
    out = replay(torch.ones(3))
    assert torch.equal(static, torch.ones(3)) and calls[-1] == "replay"              # new data copied in, replayed
    assert out is not None
    with pytest.raises(ValueError, match="takes 1 input"):
        replay(torch.ones(3), torch.ones(3))


@pytest.mark.parametrize("warmup", [0, 2])
def test_cuda_graph_refuses_a_step_that_returns_a_generator_or_coroutine(monkeypatch, warmup):
    _fake_cuda(monkeypatch, [])
    static = torch.zeros(3).as_subclass(_FakeCudaTensor)

    def gen(x):
        yield x * 2

    async def coro(x):
        return x * 2
    with pytest.raises(TypeError, match=r"fn\(\) returned a generator"):
        compiling.cuda_graph(lambda x: gen(x), static, warmup=warmup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match=r"fn\(\) returned a coroutine"):
            compiling.cuda_graph(lambda x: coro(x), static, warmup=warmup)
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_cuda_graph_refuses_cpu_inputs_and_machines_without_cuda():
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="NVIDIA GPU"):
            compiling.cuda_graph(lambda x: x, torch.ones(2))
    with pytest.raises(TypeError):
        compiling.cuda_graph(3, torch.ones(2))


# ---- ONNX Runtime -----------------------------------------------------------------------------------------
def test_onnx_runtime_exports_and_matches(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    x = torch.randn(5, 8)
    onnx = compiling.onnx_runtime(model, x, path=str(tmp_path / "m.onnx"))
    assert onnx.providers[-1] == "CPUExecutionProvider" and onnx.export_s > 0
    with torch.no_grad():
        assert torch.allclose(onnx(x), model(x), atol=1e-5)
    assert "exported in" in repr(onnx)
    with pytest.raises(ValueError, match="not \\['NoSuchProvider'\\]"):
        compiling.onnx_runtime(model, x, path=str(tmp_path / "n.onnx"), providers=["NoSuchProvider"])


# ---- one-off costs in a comparison -------------------------------------------------------------------------
def test_comparison_with_one_off_costs_and_break_even():
    env = gl.timing.environment("cpu")
    eager = gl.Measurement("eager", (0.010,), 1, "cpu", 1, env, "cpu", 0)
    fast = gl.Measurement("compiled", (0.004,), 1, "cpu", 1, env, "cpu", 0)
    slow = gl.Measurement("worse", (0.020,), 1, "cpu", 1, env, "cpu", 0)
    t = gl.compare([eager, fast, slow], setup_s={"compiled": 30.0, "worse": 1.0})
    assert t.break_even_calls("compiled") == pytest.approx(30.0 / 0.006)
    assert t.break_even_calls("worse") is None and t.break_even_calls("eager") is None
    text = repr(t)
    assert "one-off cost" in text and "5,000 calls" in text and "never" in text
    df = t.to_dataframe()
    assert df.loc["compiled", "setup_s"] == 30.0 and df["break_even_calls"].isna().sum() == 2
    with pytest.raises(ValueError, match="unknown label"):
        gl.compare([eager, fast], setup_s={"nope": 1.0})
    with pytest.raises(ValueError, match="seconds >= 0"):
        gl.compare([eager, fast], setup_s={"compiled": -1.0})


# ---- CUDA graph trees: warm-up and recording are one-off calls ---------------------------------------------
def test_cudagraph_record_calls_follow_inductors_modes_and_cudagraph_trees():
    from torch._inductor import config
    from torch._inductor.cudagraph_trees import CUDAGraphTreeManager

    # the real manager: a function not yet warmed up runs eagerly (warm-up); recorded on a later call
    src = inspect.getsource(CUDAGraphTreeManager._run)
    assert "warmed_up_functions" in src and "skip_cudagraph_warmup" in src and "run_eager" in src
    assert config.triton.cudagraph_trees
    assert compiling._cudagraph_record_calls("inductor", "reduce-overhead") == 1
    assert compiling._cudagraph_record_calls("inductor", "max-autotune") == 1
    assert compiling._cudagraph_record_calls("inductor", "max-autotune-no-cudagraphs") == 0
    assert compiling._cudagraph_record_calls("inductor", None) == 0
    assert compiling._cudagraph_record_calls("eager", None) == 0
    with config.patch({"triton.skip_cudagraph_warmup": True}):              # recorded on the first call
        assert compiling._cudagraph_record_calls("inductor", "reduce-overhead") == 0
    with config.patch({"triton.cudagraph_trees": False}):                   # cudagraphify records at once
        assert compiling._cudagraph_record_calls("inductor", "reduce-overhead") == 0
    with config.patch({"triton.cudagraphs": True}):                         # the default mode, graphs switched on
        assert compiling._cudagraph_record_calls("inductor", None) == 1
    assert config.triton.cudagraph_trees and not config.triton.skip_cudagraph_warmup


def test_compile_report_counts_cuda_graph_warm_up_and_recording_as_compile_time(monkeypatch):
    slow_calls = 2                                 # warm-up (with the compile), then recording; replays after

    class FakeCompiled:                            # a compiled function whose first calls are slow
        calls = 0

        def __call__(self, x):
            FakeCompiled.calls += 1
            if FakeCompiled.calls <= slow_calls:
                time.sleep(0.15)
            return x + 1

    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: FakeCompiled())
    monkeypatch.setattr(compiling, "_runs_on_cuda", lambda fn, args, device: True)
    r = compiling.compile_report(lambda x: x + 1, torch.ones(4), mode="reduce-overhead", explain=False,
                                 min_run_time=0.05)
    assert r.one_off_calls == 2 and r.first_call_s >= 2 * 0.15
    assert r.compile_s == pytest.approx(r.first_call_s - 2 * r.compiled.median_s)
    assert r.compiled.median_s < 0.05                     # the timed calls are replays: no recording among them
    assert "first 2 calls" in repr(r)
    if r.saved_per_call_s > 0:
        assert r.break_even_steps == pytest.approx(r.compile_s / r.saved_per_call_s)

    FakeCompiled.calls = 0                           # on a CPU there is no CUDA graph: the first call alone
    monkeypatch.setattr(compiling, "_runs_on_cuda", lambda fn, args, device: False)
    r = compiling.compile_report(lambda x: x + 1, torch.ones(4), mode="reduce-overhead", explain=False,
                                 min_run_time=0.05)
    assert r.one_off_calls == 1 and "compile (first call)" in repr(r)


def test_runs_on_cuda_reads_the_device_or_the_tensors():
    assert compiling._runs_on_cuda(lambda x: x, (torch.ones(2),), "cuda:0")
    assert not compiling._runs_on_cuda(lambda x: x, (torch.ones(2),), None)
    assert not compiling._runs_on_cuda(torch.nn.Linear(2, 2), (), None)
    assert compiling._runs_on_cuda(lambda x: x, (torch.zeros(2).as_subclass(_FakeCudaTensor),), None)


# ---- ONNX export needs onnx and onnxscript ---------------------------------------------------------------
@pytest.mark.parametrize("blocked", [("onnxscript",), ("onnx", "onnxscript"), ("onnxruntime",)])
def test_onnx_runtime_without_its_packages_names_them_and_the_install_line(monkeypatch, tmp_path, blocked):
    import sys

    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)          # import name -> ImportError
    with pytest.raises(ImportError) as info:
        compiling.onnx_runtime(torch.nn.Linear(2, 2), torch.ones(1, 2), path=str(tmp_path / "m.onnx"))
    text = str(info.value)
    assert "\n" not in text and " and ".join(blocked) in text
    assert "pip install onnx onnxscript onnxruntime" in text and "gpulab[onnx]" in text
    assert not (tmp_path / "m.onnx").exists()                  # refused before exporting anything
