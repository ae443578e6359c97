"""gpulab's dispatch modes (memory watches, the work counter, the matmul recorder) never cost a compiled function
its compilation: on torch 2.5 Dynamo marked code met under a mode "skip" for good (lesson 13's compiled recipe,
sized with gl.find_max_batch_size, then ran eager)."""
import pytest

torch = pytest.importorskip("torch")
import torch._dynamo  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

import gpulab as gl  # noqa: E402
from gpulab import _dispatch  # noqa: E402
from gpulab.limits import step_matmul_ceiling  # noqa: E402
from gpulab.memory.peak import MemoryTracker  # noqa: E402
from gpulab.work import count_work  # noqa: E402


def _compiled_graphs(under):
    torch._dynamo.reset()
    counters.clear()
    weight = torch.ones(8, 8)
    f = torch.compile(lambda x: (x @ weight).relu() + 1, backend="eager")
    under(f)
    assert counters["stats"]["unique_graphs"] == 0          # nothing compiles under a mode
    out = f(torch.ones(4, 8))
    assert torch.equal(out, (torch.ones(4, 8) @ weight).relu() + 1)
    return counters["stats"]["unique_graphs"]


def _tracked(f):
    with MemoryTracker():
        f(torch.ones(4, 8))


@pytest.mark.parametrize("under", [
    lambda f: count_work(f, torch.ones(4, 8)),
    _tracked,
    lambda f: gl.find_max_batch_size(lambda bs: f(torch.ones(bs, 8)), budget=gl.GiB, start=2, limit=4,
                                        time_trials=False),
    lambda f: step_matmul_ceiling(lambda: f(torch.ones(4, 8)), min_run_time=0.01),
], ids=["count_work", "memory_tracker", "find_max_batch_size", "step_matmul_ceiling"])
def test_a_function_met_under_a_watch_compiles_at_its_next_call(under):
    assert _compiled_graphs(under) == 1


def test_the_hook_is_put_back_and_the_mode_still_sees_every_operator(monkeypatch):
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            seen.append(func._overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(_dispatch, "_skips_code_for_good", lambda: True)   # the old Dynamo's path, on any torch
    import torch._dynamo.eval_frame as eval_frame

    before = eval_frame._maybe_set_eval_frame
    f = torch.compile(lambda x: x.sin() * 2, backend="eager")
    with _dispatch.dispatch_mode(Names()):
        assert torch.equal(f(torch.zeros(3)), torch.zeros(3))
    assert eval_frame._maybe_set_eval_frame is before
    assert "sin" in seen and "mul" in seen
    with pytest.raises(ZeroDivisionError):          # put back when the block raises, too
        with _dispatch.dispatch_mode(Names()):
            1 / 0
    assert eval_frame._maybe_set_eval_frame is before


def test_under_inference_mode_a_linear_layer_is_counted_as_in_training():
    """torch 2.5's FLOP counter saw aten.linear whole under inference mode and charged it 0 FLOPs (lesson 10's
    inference comparison then refused flops=0); the counters set inference mode aside for no_grad."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    x = torch.randn(16, 64)
    trained = gl.count_flops(model, x)
    with torch.inference_mode():
        assert gl.count_flops(model, x) == trained == 2 * 16 * (64 * 32 + 32 * 8)
        assert count_work(model, x).flops == trained
        assert torch.is_inference_mode_enabled()              # put back after each count
        out = model(x)
    assert out.is_inference()
