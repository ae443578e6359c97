"""Lesson 13's predicted gains: Amdahl's law on each lever's part of the plain step's profile, then set beside the
ablation's measured gains."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from gpulab import course
from gpulab.profiling import Attribution


def _attr(**classes):
    return Attribution(1.0, 1, "host self time", (("forward", 0.5), ("backward", 0.3), ("optimizer", 0.2)),
                       tuple(classes.items()))


def test_each_lever_is_bounded_by_the_share_it_acts_on():
    a = _attr(**{"matmul/conv": 0.5, "elementwise": 0.1, "reductions/norms": 0.1, "optimizer updates": 0.1,
                 "outside any operator": 0.2})
    b = course.lever_bounds(a, peaks={"float32": 1e11, "bfloat16": 3e11}, low_precision="bfloat16")
    assert b.bound("bf16 autocast") == pytest.approx(1 / (0.5 + 0.5 / 3))
    assert b.bound("fused AdamW") == pytest.approx(1 / 0.8)           # the optimizer phase (0.2) over its ops (0.1)
    assert b.bound("torch.compile each block") == pytest.approx(1 / 0.8)
    assert b.bound("largest micro-batch") == pytest.approx(1 / 0.8)
    assert b.bound("no such lever") is None
    assert "step gain (Amdahl)" in repr(b) and "<table" in b._repr_html_()


def test_fp16_is_named_as_the_ablation_names_it_and_a_slower_16_bit_peak_is_said():
    b = course.lever_bounds(_attr(**{"matmul/conv": 0.6}), peaks={"float32": 2e11, "float16": 1e11},
                            low_precision="float16")
    assert b.bound("fp16 autocast + GradScaler") < 1                  # the matmuls would get slower
    assert any("below its fp32 one" in n for n in b.notes)


def test_without_both_peaks_the_16_bit_row_is_left_out_with_a_note():
    b = course.lever_bounds(_attr(**{"matmul/conv": 0.6}), low_precision="bfloat16")
    assert [x.lever for x in b.levers] == ["fused AdamW", "torch.compile each block", "largest micro-batch"]
    assert any("No 16-bit row" in n for n in b.notes)


def test_a_part_that_fills_the_step_is_unbounded():
    b = course.lever_bounds(Attribution(1.0, 1, "device time", (), (("device idle", 1.0),)))
    assert math.isinf(b.bound("largest micro-batch")) and "unbounded" in repr(b)


def test_a_gpu_profile_bounds_the_cuda_graphs_lever_by_idle_time_and_fusable_work_and_a_cpu_one_leaves_it_out():
    gpu = Attribution(1.0, 1, "device time", (("forward", 1.0),),
                      (("matmul/conv", 0.5), ("elementwise", 0.2), ("device idle", 0.3)))
    b = course.lever_bounds(gpu)
    assert b.bound("whole model compiled + CUDA graphs") == pytest.approx(1 / 0.5)   # idle 0.3 + elementwise 0.2
    assert b.bound("largest micro-batch") == pytest.approx(1 / 0.7)
    cpu = course.lever_bounds(_attr(**{"matmul/conv": 0.5, "outside any operator": 0.3}))
    assert cpu.bound("whole model compiled + CUDA graphs") is None


def test_against_sets_each_lever_beside_its_measured_gain_and_picks_the_kept_micro_batch():
    b = course.lever_bounds(_attr(**{"matmul/conv": 0.5, "outside any operator": 0.3}),
                            peaks={"float32": 1e11, "bfloat16": 2e11}, low_precision="bfloat16")
    step = lambda label, gain, decision: SimpleNamespace(label=label, gain=gain, decision=decision)  # noqa: E731
    steps = [step("baseline", None, "baseline"), step("bf16 autocast", 1.4, "kept"), step("fused AdamW", 0.98, "dropped"),
             step("largest micro-batch: micro-batch 8", 1.3, "dropped"),
             step("largest micro-batch: micro-batch 4", 1.2, "kept")]
    g = b.against(steps)
    assert g.gain("bf16 autocast") == 1.4 and g.gain("fused AdamW") == 0.98
    assert g.gain("largest micro-batch") == 1.2 and any("(micro-batch 4)" in r[0] for r in g.rows)
    assert g.gain("torch.compile each block") is None                 # not tried: no row
    assert "measured gain" in repr(g) and "<table" in g._repr_html_()
    none_kept = b.against([step("largest micro-batch: micro-batch 8", 1.3, "dropped"),
                           step("largest micro-batch: micro-batch 4", 1.1, "dropped")])
    assert none_kept.gain("largest micro-batch") == 1.3                # the fastest variant when none was kept


def test_lever_bounds_refuses_bad_input():
    with pytest.raises(TypeError, match="attribution"):
        course.lever_bounds({"matmul/conv": 0.5})
    with pytest.raises(ValueError, match="no time"):
        course.lever_bounds(Attribution(0.0, 1, "host self time", (), ()))
    with pytest.raises(ValueError, match="positive FLOP/s"):
        course.lever_bounds(_attr(), peaks={"float32": -1})
    with pytest.raises(ValueError, match="low_precision"):
        course.lever_bounds(_attr(), low_precision="bf16")


def test_a_real_profile_gives_shares_of_the_step():
    torch = pytest.importorskip("torch")
    import gpulab as gl

    w = torch.randn(64, 64, requires_grad=True)
    opt = torch.optim.AdamW([w], lr=1e-3)

    def step():
        loss = torch.nn.functional.gelu(torch.randn(32, 64) @ w).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    b = course.lever_bounds(gl.profile(step, steps=2, warmup=1, trace=False).attribution)
    assert all(0.0 <= x.share <= 1.0 and x.bound >= 1.0 for x in b.levers)
    assert b.levers[0].share > 0                                       # AdamW's step was seen
