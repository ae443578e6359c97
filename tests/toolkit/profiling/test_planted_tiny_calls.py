"""Loops made of many tiny calls, written the way people write them, profiled with gl.profile: a batch gathered
from a large in-memory dataset (X[idx]) with the loss read every step, a forward that loops over the batch's items
in Python, an embedding-heavy step. Their bytes are counted as the hardware moves them (the gathered rows, not the
dataset), so none is called memory-bound at a share it never reached; the same step gets the same verdict after
other work ran in the process; and no verdict claims a ceiling the step ran under a tenth of. Shares are judged
against this machine's measured ceilings, so the tests hold on an AMX Xeon and an AVX512-BF16 EPYC, idle or with a
core kept busy.
"""
from __future__ import annotations

import pytest
import torch

import gpulab as gl
from gpulab.profiling.steproof import step_roofline
from gpulab.profiling.verdict import MIN_BOUND_SHARE
from gpulab.work import Work

BOUND = {"memory-bound": "memory_share", "compute-bound": "compute_share", "precision-bound": "compute_share"}
SEEN: list = []


@pytest.fixture(scope="module")
def limits():
    return gl.machine_limits("cpu")


@pytest.fixture(scope="module")
def dataset():
    g = torch.Generator().manual_seed(0)
    return torch.randn(200_000, 256, generator=g), torch.randn(200_000, 1, generator=g)    # 205 MB in memory


def _gathered_mlp_step(X, Y, batch=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []

    def step():
        idx = torch.randint(0, X.shape[0], (batch,))
        loss = torch.nn.functional.mse_loss(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())                       # printed every step in the original loop
    return step


class _PerItem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(256, 32), torch.nn.Linear(32, 1)

    def forward(self, x):
        return torch.stack([self.b(torch.relu(self.a(row))) for row in x])     # one tiny chain per item


def _per_item_step(X, Y):
    torch.manual_seed(0)
    model = _PerItem()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def step():
        idx = torch.randint(0, X.shape[0], (64,))
        loss = torch.nn.functional.mse_loss(model(X[idx]), Y[idx])
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def _embedding_step():
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(50_000, 256), torch.nn.Linear(256, 500)
    opt = torch.optim.SGD([*emb.parameters(), *head.parameters()], lr=1e-3)

    def step():
        tokens = torch.randint(0, 50_000, (32, 64))
        loss = head(emb(tokens)).logsumexp(-1).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return step


def _profile(name, step, limits):
    p = gl.profile(step, label=name, trace=False, limits=limits, steps=4, warmup=2)
    SEEN.append((name, p))
    print(f"\n{name}: {p.verdict!r}\n{p.roofline!r}")
    return p


def _no_claim_below_a_tenth(p):
    roof = p.roofline
    assert roof is not None
    assert 0 <= roof.compute_share <= 1 and 0 <= roof.memory_share <= 1
    attr = BOUND.get(p.verdict.verdict)
    if attr is not None:
        assert not roof.count_unreliable, roof.count_unreliable
        assert getattr(roof, attr) >= MIN_BOUND_SHARE, (p.verdict.verdict, roof.evidence)


def test_a_batch_gathered_from_a_large_dataset_is_overhead_bound_not_memory_bound(limits, dataset):
    X, Y = dataset
    p = _profile("X[idx] at batch 4, loss read every step", _gathered_mlp_step(X, Y), limits)
    roof = p.roofline
    assert roof.bytes_moved < 10 * 2**20, f"{roof.bytes_moved} bytes per step: the dataset itself was counted"
    assert not roof.count_unreliable
    assert p.verdict.verdict == "overhead-bound", p.verdict
    finding = next(f for f in p.verdict.findings if f.code == "overhead-bound")
    assert "floor of" in finding.evidence and "if it cost nothing" in finding.evidence
    _no_claim_below_a_tenth(p)


def test_a_forward_looping_over_the_items_is_overhead_bound(limits, dataset):
    X, Y = dataset
    p = _profile("per-item Python forward, batch 64", _per_item_step(X, Y), limits)
    assert p.verdict.verdict == "overhead-bound", p.verdict
    assert p.roofline.memory_share < MIN_BOUND_SHARE and not p.roofline.count_unreliable
    finding = next(f for f in p.verdict.findings if f.code == "overhead-bound")
    assert "operator calls per step" in finding.evidence and finding.advice
    _no_claim_below_a_tenth(p)


def test_an_embedding_heavy_step_counts_looked_up_rows_and_claims_only_real_shares(limits):
    p = _profile("embedding 50k x 256, 32 x 64 tokens", _embedding_step(), limits)
    roof = p.roofline
    per_lookup = 32 * 64 * 256 * 4
    emb_fwd = [b for (d, f, b), name in zip(p.work.per_op, p.work.op_names) if name == "embedding"]
    assert emb_fwd and all(b <= 2 * per_lookup + 32 * 64 * 8 for b in emb_fwd)
    assert not roof.count_unreliable
    _no_claim_below_a_tenth(p)


def test_the_same_step_gets_the_same_verdict_after_other_work_in_the_process(limits, dataset):
    X, Y = dataset
    first = _profile("X[idx] first", _gathered_mlp_step(X, Y), limits).verdict.verdict
    a = torch.randn(512, 512, dtype=torch.bfloat16)
    for _ in range(20):
        a @ a                                            # other work: 16-bit matmuls, the caches warm with them
    threads = torch.get_num_threads()
    with gl.interleaved.threads(1):
        torch.randn(256, 256) @ torch.randn(256, 256)
    assert torch.get_num_threads() == threads
    gl.machine_limits("cpu")                             # the ceilings come from the process's cache
    again = _profile("X[idx] after other work", _gathered_mlp_step(X, Y), limits).verdict.verdict
    assert first == again == "overhead-bound"


def test_a_byte_count_above_the_ceiling_is_unreliable_not_a_hundred_percent(limits):
    """A count that makes the step move more than its working sets' copies could: the verdict says the count is
    wrong and judges by the times, never 'memory-bound at 100%'."""
    step_s = 1e-3
    bw = limits.bandwidth_bytes_per_s
    too_many = int(bw * step_s * 20)                     # 20x what the bandwidth allows in the step
    work = Work(ops=1, flops=0, bytes_moved=too_many, syncs=0, flops_by_dtype={},
                per_op=(("float32", 0, too_many),), op_names=("index",))
    roof = step_roofline(work, limits, step_s)
    assert roof.count_unreliable and "count unreliable" in roof.evidence
    assert "100%" not in roof.memory_text


def test_no_share_above_a_hundred_percent_and_no_bound_claim_under_a_tenth():
    """Over every loop profiled in this module."""
    assert SEEN, "run the module's loops first"
    for name, p in SEEN:
        _no_claim_below_a_tenth(p)
