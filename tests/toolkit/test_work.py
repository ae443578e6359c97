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


# ---- bytes as the hardware moves them: gathers and scatters touch rows, not tables ----------------------------------
def _bytes(fn):
    from gpulab.work import count_work

    w = count_work(fn)
    return dict(zip(w.op_names, (b for *_, b in w.per_op)))


def test_a_gather_from_a_large_table_counts_the_rows_it_reads_not_the_table():
    X = torch.randn(50_000, 256)                                    # 51 MB
    idx = torch.randint(0, 50_000, (4,))
    rows = 4 * 256 * 4                                              # the 4 rows gathered, fp32
    assert _bytes(lambda: X[idx])["index"] == 2 * rows + 4 * 8      # read the rows and the indices, write the rows
    assert _bytes(lambda: X.index_select(0, idx))["index_select"] == 2 * rows + 4 * 8
    assert _bytes(lambda: torch.take(X, idx))["take"] == 2 * 4 * 4 + 4 * 8
    index = torch.zeros(4, 256, dtype=torch.long)
    assert _bytes(lambda: torch.gather(X, 0, index))["gather"] == 2 * rows + 4 * 256 * 8


def test_an_embedding_counts_its_looked_up_rows_not_the_token_table():
    table = torch.nn.Embedding(50_000, 256)                         # a GPT-sized vocabulary: 51 MB
    tokens = torch.randint(0, 50_000, (8, 16))
    out = 8 * 16 * 256 * 4
    assert _bytes(lambda: table(tokens))["embedding"] == 2 * out + 8 * 16 * 8


def test_scatters_count_the_rows_they_write_and_read_back():
    dest = torch.zeros(1000, 64)
    src, i = torch.ones(10, 64), torch.arange(10)
    rows = 10 * 64 * 4
    assert _bytes(lambda: dest.index_put_((i,), src))["index_put_"] == 2 * rows + 10 * 8        # read src, write rows
    assert _bytes(lambda: dest.index_add_(0, i, src))["index_add_"] == 3 * rows + 10 * 8        # and read them back
    assert _bytes(lambda: dest.index_fill_(0, i, 1.0))["index_fill_"] == rows + 10 * 8
    assert _bytes(lambda: dest.index_add(0, i, src))["index_add"] == 3 * rows + 10 * 8 + 2 * 1000 * 64 * 4  # + copy
    scatter_index = torch.arange(10).view(10, 1).expand(10, 64)
    assert _bytes(lambda: dest.scatter_(0, scatter_index, 2.0))["scatter_"] == 2 * rows + 10 * 64 * 8


def test_copies_fills_views_and_elementwise_ops_by_hand():
    a, b = torch.ones(1000, 64), torch.ones(1000, 64)
    full = 1000 * 64 * 4
    assert _bytes(lambda: a.copy_(b))["copy_"] == 2 * full          # read the source, write the destination
    assert _bytes(lambda: a.zero_())["zero_"] == full               # written, never read
    assert _bytes(lambda: a.add_(b))["add_"] == 3 * full            # read both, write one
    assert _bytes(lambda: a[:10].clone())["clone"] == 2 * 10 * 64 * 4   # a slice's copy moves the slice
    assert "expand" not in _bytes(lambda: a[:1].expand(1000, 64))   # a view moves nothing
    assert _bytes(lambda: a.sum())["sum"] == full + 4               # a reduction reads all, writes one
