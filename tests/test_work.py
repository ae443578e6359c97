"""gpulab.work: a call's FLOPs (by dtype), bytes per operator, host syncs, and its time at the ceilings."""
from __future__ import annotations

import pytest
import torch

import gpulab as gl
from gpulab.work import Work, count_work


def test_matmul_flops_and_bytes():
    a, b = torch.ones(64, 32), torch.ones(32, 16)
    w = count_work(torch.mm, a, b)
    assert (w.ops, w.flops, w.syncs) == (1, 2 * 64 * 32 * 16, 0)
    assert w.bytes_moved == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert w.flops == gl.count_flops(torch.mm, a, b)            # the same formulas as torch's FlopCounterMode
    assert w.intensity == pytest.approx(w.flops / w.bytes_moved) and w.main_dtype == "float32"


def test_views_move_nothing_and_in_place_ops_read_and_write():
    x = torch.ones(1000)
    assert count_work(lambda: x.view(10, 100).t()).bytes_moved == 0
    w = count_work(lambda: x.add_(1.0))
    assert w.ops == 1 and w.bytes_moved == 2 * 4000 and w.flops == 0          # read x, write x


def test_dtypes_and_syncs_are_counted():
    a = torch.ones(8, 8, dtype=torch.bfloat16)

    def f():
        y = a @ a
        return float((y.float() @ y.float()).sum().item())
    w = count_work(f)
    assert w.flops_by_dtype == {"bfloat16": 2 * 8**3, "float32": 2 * 8**3} and w.syncs == 1


def test_ideal_time_takes_each_operators_roof():
    w = Work(2, 100, 20, 0, {"float32": 100}, (("float32", 100, 10), ("float32", 0, 10)))
    compute, memory = w.ideal_s(lambda d: 10.0, bandwidth=1.0)
    assert (compute, memory) == (10.0, 10.0)       # op 1: 100/10 = 10 s > 10 B / 1 B/s? equal -> compute; op 2: memory
    with pytest.raises(ValueError, match="bandwidth"):
        w.ideal_s(lambda d: 1.0, bandwidth=0)
    assert "2 operators" in repr(w)


def test_the_call_really_runs():
    box = []
    count_work(box.append, 1)
    assert box == [1]
    with pytest.raises(TypeError, match="callable"):
        count_work(3)
