from __future__ import annotations

import gc

import pytest
import torch

import gpulab as gl
from gpulab.memory import MemoryTracker


def test_peak_memory_counts_temporaries_and_retained():
    def work():
        a = torch.ones(1024, 1024)          # 4 MiB
        b = a * 2                           # 4 MiB more at peak
        return b.sum()                      # only a scalar survives
    pk = gl.peak_memory(work)
    assert pk.peak_bytes >= 8 * gl.MiB and pk.retained_bytes < 1024
    assert pk.method == "tracked-tensors" and float(pk.result) == 2 * 1024 * 1024
    assert "peak 8" in repr(pk)


def test_views_and_inplace_do_not_double_count():
    with MemoryTracker() as t:
        a = torch.zeros(256, 1024)
        v = a.view(-1)[:10]
        a.add_(1)
    assert t.peak_bytes == 256 * 1024 * 4
    del a, v
    gc.collect()
    assert t.current_bytes == 0


def test_budget_raises_cuda_shaped_oom_and_leaks_nothing():
    with gl.memory_budget(8 * gl.MiB) as card:
        keep = torch.ones(1024, 1024)                   # 4 MiB fits
        before = card.current_bytes
        with pytest.raises(torch.OutOfMemoryError, match="CUDA out of memory. Tried to allocate 8 MiB"):
            torch.ones(2 * 1024 * 1024)                 # 8 MiB does not
        gc.collect()
        assert card.current_bytes == before             # the failed allocation left nothing behind
        del keep
        gc.collect()
        assert card.current_bytes == 0
    assert gl.memory.is_oom(torch.OutOfMemoryError("x")) and gl.memory.is_oom(RuntimeError("CUDA out of memory."))
    assert not gl.memory.is_oom(ValueError("out of memory"))


def test_oom_in_backward_is_recoverable_without_leak():
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 10))
    x = torch.randn(512, 512)
    with gl.memory_budget(12 * gl.MiB) as card:
        base = card.current_bytes
        failed = False
        try:
            model(x).sum().backward()
        except torch.OutOfMemoryError:
            failed = True
        assert failed
        model.zero_grad(set_to_none=True)
        gl.free_memory()
        assert card.current_bytes == base, f"{card.current_bytes - base} bytes leaked"


def test_budget_validation():
    with pytest.raises(ValueError, match="budget_bytes must be a whole number of bytes >= 1"):
        with gl.memory_budget(-1):
            pass


def test_breakdown_categories():
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    params = sum(p.numel() * 4 for p in model.parameters())
    opt = torch.optim.Adam(model.parameters())
    batch = (torch.randn(64, 256), torch.randint(0, 10, (64,)))
    b = gl.breakdown(model, opt, batch)
    assert b.parameters_bytes == params and b.gradients_bytes == params
    assert b.optimizer_state_bytes >= 2 * params                 # Adam's two moments (+ step counters)
    assert b.activations_bytes >= 64 * 1024 * 4                   # the hidden layer's output is saved
    assert b.peak_bytes >= params * 3
    assert "optimizer state" in repr(b) and "<table" in b._repr_html_()
    assert list(b.to_dataframe().index)[:4] == ["parameters", "gradients", "optimizer state", "activations"]
    sgd = gl.breakdown(model, torch.optim.SGD(model.parameters(), lr=0.1), batch)
    assert sgd.optimizer_state_bytes == 0


def test_estimate_matches_a_real_run_without_allocating():
    make = lambda: torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
    batch_fn = lambda n: (torch.randn(n, 256), torch.randint(0, 10, (n,)))
    est = gl.estimate(make, batch_fn, 64)
    real = gl.breakdown(make(), torch.optim.Adam(make().parameters()), batch_fn(64))
    assert est.breakdown.parameters_bytes == real.parameters_bytes
    assert est.breakdown.activations_bytes == pytest.approx(real.activations_bytes, rel=0.01)
    fits = est.fits()
    assert bool(fits.loc["T4", "fits"]) and fits.loc["H100 SXM", "largest batch (est.)"] > 64
    # a model far too big for this machine's RAM costs nothing to estimate
    big = gl.estimate(lambda: torch.nn.Linear(32768, 32768), lambda n: torch.randn(n, 32768), 8)
    assert big.breakdown.parameters_bytes > 4 * gl.GiB
    assert not bool(big.fits().loc["T4", "fits"]) and bool(big.fits().loc["A100 80GB SXM", "fits"])
    with pytest.raises(ValueError):
        gl.estimate(make, batch_fn, 0)
    with pytest.raises(ValueError, match="optimizer"):
        gl.estimate(make, batch_fn, 8, optimizer="lion")


def test_find_max_batch_size_grows_bisects_and_leaks_nothing():
    model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))

    def step(n):
        x = torch.randn(n, 256)
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)

    with MemoryTracker() as outer:
        base = outer.current_bytes
        search = gl.find_max_batch_size(step, start=16, budget=16 * gl.MiB, min_run_time=0.05)
        gc.collect()
        leaked = outer.current_bytes - base
    assert leaked == 0, f"{leaked} bytes leaked across OOM recoveries"
    df = search.to_dataframe()
    assert df["fits"].any() and not df["fits"].all()
    ok = df[df["fits"]]
    assert (ok["peak_bytes"] <= 16 * gl.MiB).all()
    assert search.max_batch_size == ok.index.max() and search.max_batch_size < df[~df["fits"]].index.min()
    assert search.recommended in ok.index and ok.loc[search.recommended, "peak_bytes"] <= 0.9 * 16 * gl.MiB
    assert ok["items_per_s"].notna().all()
    assert "Largest batch" in repr(search)


def test_find_max_batch_size_on_cuda_path_with_a_fake_allocator(monkeypatch, pretend_gpus):
    """The CUDA branch: real OOM exceptions from the step, the allocator's peak, cache emptied after each OOM."""
    state = {"allocated": 0, "peak": 0, "emptied": 0}
    # 1200 MiB card: the context, a resident model and another process leave 1000 MiB free at the start
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1000 * gl.MiB, 1200 * gl.MiB))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: state["allocated"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda d=None: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda d=None: state.update(peak=state["allocated"]))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: state.update(emptied=state["emptied"] + 1))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda d=None: None)

    def step(n):
        need = n * gl.MiB
        if need > 1000 * gl.MiB:
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {n} MiB")
        state["peak"] = max(state["peak"], state["allocated"] + need)

    search = gl.find_max_batch_size(step, start=64, device="cuda:0", time_trials=False)
    assert 985 <= search.max_batch_size <= 1000 and search.capacity_bytes == 1000 * gl.MiB   # free, not total
    assert state["emptied"] >= len(search.trials)
    assert search.recommended <= 900 and "free at the start" in repr(search)


def test_find_max_batch_size_stops_before_tensors_pass_2_31_elements():
    """A step whose activations are (batch, 2**20) elements: past batch 2047 a tensor has over 2**31 elements.
    On meta tensors nothing is allocated, so only the element cap can stop the search."""
    seen = []

    def step(n):
        seen.append(n)
        torch.empty(n, 2**20, device="meta").relu()

    search = gl.find_max_batch_size(step, start=8, limit=1 << 20, budget=1 << 60, time_trials=False)
    assert max(seen) <= 2047 and search.max_batch_size == 2047
    assert any("2**31" in n for n in search.notes)


def test_find_max_batch_size_errors():
    with pytest.raises(ValueError, match="budget"):
        gl.find_max_batch_size(lambda n: None, device="cpu")
    with pytest.raises(TypeError):
        gl.find_max_batch_size(3, budget=gl.MiB)
    with pytest.raises(MemoryError, match="does not fit"):
        gl.find_max_batch_size(lambda n: torch.ones(n, 1024 * 1024), start=4, budget=gl.MiB, time_trials=False)
    with pytest.raises(ZeroDivisionError):   # a bug in the step is not mistaken for OOM
        gl.find_max_batch_size(lambda n: 1 / 0, budget=gl.MiB)


# ---- this process under a host PID (containers) ------------------------------------------------------------
def _container_t4(fake_nvml, monkeypatch, processes, visible=()):
    """A T4 whose NVML lists ``processes`` as (pid, bytes); PIDs in ``visible`` exist in this PID namespace,
    no other does (as inside a container, where NVML speaks of the host's PIDs)."""
    import os

    import psutil

    fake = fake_nvml(gpus=(("Tesla T4", (7, 5), 16 * gl.GiB),))
    fake.gpus[0].used = sum(b or 0 for _, b in processes)
    fake.gpus[0].processes = list(processes)
    here = {os.getpid(), *visible}
    monkeypatch.setattr(psutil, "pid_exists", lambda pid: pid in here)
    return fake


def test_this_process_under_its_host_pid_is_not_called_another_process(fake_nvml, monkeypatch):
    from support.fake_cuda import fake_cuda as _fake_cuda      # allocator: 3 GiB allocated, 4 GiB reserved

    host_pid, context = 2_417_051, 410 * gl.MiB
    _container_t4(fake_nvml, monkeypatch, [(host_pid, 4 * gl.GiB + context), (77, 2 * gl.GiB)], visible={77})
    r = gl.memory.reconcile_memory(cuda=_fake_cuda())
    assert r.value("this process (NVML)") is None
    assert r.value("another PID, possibly this process (NVML)") == 4 * gl.GiB + context
    assert r.value("other processes (NVML)") == 2 * gl.GiB                         # PID 77 alone
    assert r.value("CUDA context + non-PyTorch") == context
    row = next(meaning for what, _, meaning in r.rows if what.startswith("another PID"))
    assert f"PID {host_pid}" in row and "possibly this process, seen by its host PID inside a container" in row
    assert "possibly this process" in r.note and str(host_pid) in r.note


def test_a_lone_pid_invisible_here_is_possibly_this_process(fake_nvml, monkeypatch):
    from support.fake_cuda import fake_cuda as _fake_cuda

    _container_t4(fake_nvml, monkeypatch, [(2_417_051, 9 * gl.GiB)])   # more than a context: TF in the process too?
    r = gl.memory.reconcile_memory(cuda=_fake_cuda())
    assert r.value("another PID, possibly this process (NVML)") == 9 * gl.GiB
    assert r.value("other processes (NVML)") == 0
    assert "not a process in this PID namespace" in repr(r)


def test_other_processes_stay_other_processes(fake_nvml, monkeypatch):
    import os

    from support.fake_cuda import fake_cuda as _fake_cuda

    # this process listed under its own PID: every other PID is another process, whatever its size
    same = 4 * gl.GiB + 300 * gl.MiB
    _container_t4(fake_nvml, monkeypatch, [(os.getpid(), same), (2_417_051, same)])
    r = gl.memory.reconcile_memory(cuda=_fake_cuda())
    assert r.value("other processes (NVML)") == same
    assert "another PID, possibly this process (NVML)" not in [k for k, _, _ in r.rows]
    # not listed, but no PID's memory fits this process and the lone visible one is a process here
    _container_t4(fake_nvml, monkeypatch, [(77, 12 * gl.GiB)], visible={77})
    r = gl.memory.reconcile_memory(cuda=_fake_cuda())
    assert r.value("other processes (NVML)") == 12 * gl.GiB and "possibly" not in r.note


def test_a_batch_that_fitted_once_but_not_when_timed_counts_as_not_fitting():
    """Seen on an H200 under a T4 rehearsal: the search's largest batch fitted once, then ran out of memory when timed
    step after step. That batch is not one that fits: it is dropped with a note, never an error."""
    import collections

    calls = collections.Counter()

    def step(n):
        calls[n] += 1
        if n >= 64 and calls[n] > 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.38 GiB.")
        return torch.ones(n, 256).sum()

    search = gl.find_max_batch_size(step, start=8, limit=64, budget=64 * gl.MiB, min_run_time=0.01)
    fits = {t.batch_size: t.fits for t in search.trials}
    assert fits[64] is False and fits[32] is True, search.trials
    assert search.max_batch_size == 32 and search.recommended <= 32
    assert any("batch 64 fitted once but ran out of memory" in n for n in search.notes), search.notes
