"""gpulab.runs: the learnable synthetic task, interleaved training (CPU, and the CUDA memory path with a
fake allocator), and the comparison table."""
from __future__ import annotations

import doctest
import types

import pytest
import torch

import gpulab as gl
from gpulab import course
import gpulab.course.lesson.runs
from gpulab.course.lesson import runs as runs_mod


def test_doctests():
    assert doctest.testmod(gpulab.course.lesson.runs).failed == 0


def test_pattern_batch_is_seeded_and_learnable():
    x1, y1 = course.pattern_batch(8, seed=3)
    x2, y2 = course.pattern_batch(8, seed=3)
    assert torch.equal(x1, x2) and torch.equal(y1, y2) and x1.shape == (8, 3, 32, 32)
    assert not torch.equal(course.pattern_batch(8, seed=4)[0], x1)
    torch.manual_seed(0)
    model = course.models.small_cnn(width=8)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    test = course.pattern_batch(256, seed=999, signal=0.3)
    before = course.evaluate(model, test)
    course.train(model, opt, lambda s: course.pattern_batch(64, seed=s, signal=0.3), steps=15,
             config=course.TrainConfig(progress=False), track_memory=False)
    assert course.evaluate(model, test) > max(before + 0.3, 0.6)
    for bad in ({"batch_size": 0}, {"batch_size": 2, "signal": -1}, {"batch_size": 2, "classes": 0}):
        with pytest.raises(ValueError):
            course.pattern_batch(**bad)


def _runs(precisions=("fp32", "bf16"), **cfg):
    out = {}
    for p in precisions:
        torch.manual_seed(0)
        m = course.models.small_cnn(width=8)
        out[p] = (m, torch.optim.SGD(m.parameters(), lr=0.05), course.TrainConfig(precision=p, **cfg))
    return out


def test_train_interleaved_records_every_run():
    runs = _runs()
    res = course.train_interleaved(runs, lambda s: course.pattern_batch(16, seed=s), steps=5, warmup_steps=1)
    assert list(res) == ["fp32", "bf16"]
    for r in res.values():
        assert len(r.losses) == len(r.step_times_s) == 5 and r.items_per_step == 16
        assert r.warmup_steps == 2 and len(r.steady_times_s) == 3      # warm-up + the memory step left out
        assert r.peak_memory_bytes > sum(p.numel() * 4 for p in runs["fp32"][0].parameters())
        assert r.extra["memory_method"] == "tracked-tensors"
    assert res["bf16"].peak_memory_bytes < res["fp32"].peak_memory_bytes      # bf16 activations are smaller
    # same initial weights and batches: the first losses agree closely
    assert res["bf16"].losses[0] == pytest.approx(res["fp32"].losses[0], rel=0.05)


def test_train_interleaved_accumulation_matches_plain_training():
    torch.manual_seed(0)
    a = course.models.mlp(hidden=32)
    b = course.models.mlp(hidden=32)
    b.load_state_dict(a.state_dict())
    runs = {"k=1": (a, torch.optim.SGD(a.parameters(), lr=0.1), course.TrainConfig()),
            "k=4": (b, torch.optim.SGD(b.parameters(), lr=0.1), course.TrainConfig(accumulation_steps=4))}
    batches = [course.models.example_batch("mlp", 48, seed=s) for s in range(3)]
    res = course.train_interleaved(runs, batches, steps=3, track_memory=False)
    assert res["k=1"].peak_memory_bytes is None and res["k=1"].warmup_steps == 1
    assert all(torch.allclose(p, q, atol=1e-5) for p, q in zip(a.parameters(), b.parameters()))


def test_train_interleaved_bad_input():
    with pytest.raises(TypeError):
        course.train_interleaved({}, lambda s: None, steps=1)
    with pytest.raises(TypeError, match="TrainConfig"):
        course.train_interleaved({"a": (course.models.mlp(), None, "fp32")}, lambda s: None, steps=1)
    with pytest.raises(ValueError, match="steps"):
        course.train_interleaved(_runs(), lambda s: None, steps=0)
    with pytest.raises(ValueError, match="warmup"):
        course.train_interleaved(_runs(), lambda s: None, steps=2, warmup_steps=-1)


def test_step_memory_on_cuda_uses_the_allocator(monkeypatch):
    """The CUDA path, with a fake allocator: peak above the start of the step."""
    state = {"allocated": 1000, "peak": 1000, "calls": []}
    fake = types.SimpleNamespace(
        synchronize=lambda d=None: state["calls"].append("sync"),
        reset_peak_memory_stats=lambda d=None: state.update(peak=state["allocated"]),
        memory_allocated=lambda d=None: state["allocated"],
        max_memory_allocated=lambda d=None: state["peak"], is_available=lambda: True, device_count=lambda: 1)
    monkeypatch.setattr(torch, "cuda", fake)
    dev = types.SimpleNamespace(type="cuda", index=0)
    with runs_mod._step_memory(dev) as box:
        state.update(allocated=1500, peak=4000)   # the step allocates 3000 at its peak, keeps 500
    assert box["bytes"] == 3000 and state["calls"].count("sync") == 2


def test_compare_runs_table():
    res = course.train_interleaved(_runs(), lambda s: course.pattern_batch(16, seed=s), steps=4)
    table = course.compare_runs(res, baseline="fp32", flops_per_step=1e9, peak_flops={"fp32": 2e6, "bf16": 1e6},
                            accuracy={"fp32": 0.5, "bf16": 0.25}, published={"bf16": "amp-pytorch"},
                            title="precision")
    assert table.speedup("fp32") == 1.0
    assert table.memory_ratio("bf16") < 1
    # fake "peaks" far below what the tiny runs reach: each is raised to its run's rate and the table says so
    assert table.fraction_of_peak("bf16") == pytest.approx(1.0)
    assert table.ceiling("bf16") == pytest.approx(1e9 / res["bf16"].median_step_s)
    assert table.ceiling_notes and "ceiling raised" in repr(table)
    high = course.compare_runs(res, baseline="fp32", flops_per_step=1e9, peak_flops={"fp32": 1e18, "bf16": 1e18})
    assert high.fraction_of_peak("bf16") == pytest.approx(1e9 / res["bf16"].median_step_s / 1e18)
    assert not high.ceiling_notes
    df = table.to_dataframe()
    assert list(df.index) == ["fp32", "bf16"] and df.loc["bf16", "accuracy"] == 0.25
    text = repr(table)
    assert "precision" in text and "% of peak FLOP/s" in text and "2-3x" in text
    assert "<table" in table._repr_html_()
    axes = table.plot()
    assert len(axes) == 2
    with pytest.raises(ValueError, match="baseline"):
        course.compare_runs(res, baseline="fp64")
    with pytest.raises(ValueError, match="unknown label"):
        course.compare_runs(res, accuracy={"fp8": 0.1})
    with pytest.raises(ValueError, match="fraction"):
        course.compare_runs(res, accuracy={"fp32": 50})
    with pytest.raises(ValueError, match="unknown label"):
        course.compare_runs(res, published={"fp8": "amp-pytorch"})
    with pytest.raises(TypeError):
        course.compare_runs([1, 2])
    with pytest.raises(ValueError):
        course.compare_runs([])
