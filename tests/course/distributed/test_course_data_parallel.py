"""Lesson 07's exercises and measurements: worker counts, the noise margin, the accumulation challenge, the exercise
checks (each fails on a wrong answer), and the FSDP2 script (in one process, and launched on 2 ranks)."""
from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

import gpulab as gl  # noqa: E402
from gpulab import course  # noqa: E402
from gpulab.course.distributed import data_parallel  # noqa: E402
from gpulab.course.scripts import fsdp_train  # noqa: E402


def test_doctests():
    for mod in (data_parallel, fsdp_train):
        assert doctest.testmod(mod).failed == 0


@pytest.mark.parametrize("gpus, counts", [(1, (1,)), (2, (1, 2)), (3, (1, 2, 3)), (4, (1, 2, 4)),
                                          (8, (1, 2, 4, 8)), (6, (1, 2, 4, 6))])
def test_worker_counts(gpus, counts):
    assert course.worker_counts(gpus) == counts


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", None])
def test_worker_counts_refuses_bad_input(bad):
    with pytest.raises((TypeError, ValueError), match="gpus"):
        course.worker_counts(bad)


def test_noise_margin_target_follows_the_spread():
    assert data_parallel.NoiseMargin(16, 0.20, 1.0, 3.0, 0.03).target_speedup == 1.14     # 3 x 0.93 x 0.2 / 4
    assert data_parallel.NoiseMargin(16, 0.01, 1.10, 3.0, 0.03).target_speedup == 1.3      # the A/A ratio itself
    assert data_parallel.NoiseMargin(16, 0.001, 1.0, 3.0, 0.03).target_speedup == 1.03     # the floor
    m = course.noise_margin(lambda: sum(range(3000)), min_run_time=0.1)
    assert m.rounds >= 5 and m.spread >= 0 and m.target_speedup >= 1.03 and "x faster to count" in repr(m)
    with pytest.raises(TypeError, match="fn"):
        course.noise_margin(3)
    with pytest.raises(ValueError, match="factor"):
        course.noise_margin(lambda: None, factor=-1)


def test_a_busy_machines_margin_is_measured_longer_until_a_real_change_could_beat_it(monkeypatch):
    """Under load a few rounds give an A/A ratio of 0.8 (a 1.6x target no real change beats): measured again, twice
    as long, the target falls; the challenge is then timed as long."""
    from gpulab import interleaved

    calls = []

    def scripted(variants, *, min_run_time, device=None):
        calls.append(min_run_time)
        noisy = len(calls) == 1
        a = [1.0, 0.7, 0.8, 0.75, 0.9] if noisy else [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01]
        b = [1.0] * len(a)
        return {"a": SimpleNamespace(times_s=a, median_s=sorted(a)[len(a) // 2]),
                "b": SimpleNamespace(times_s=b, median_s=1.0)}

    monkeypatch.setattr(interleaved, "benchmark_interleaved", scripted)
    m = course.noise_margin(lambda: None, min_run_time=1.5)
    assert calls == [1.5, 3.0] and m.tries == 2 and m.min_run_time == 3.0
    assert m.target_speedup <= 1.25 and "twice as long" in repr(m)
    calls.clear()
    patient = course.noise_margin(lambda: None, min_run_time=1.5, max_tries=1)
    assert calls == [1.5] and patient.target_speedup > 1.25 and patient.tries == 1
    with pytest.raises(ValueError, match="max_target"):
        course.noise_margin(lambda: None, max_target=1.0)


def _right(model, micro_batches):
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < len(micro_batches) - 1 else course.no_sync_nullcontext():
            course.no_sync_loss(model, x, y, len(micro_batches)).backward()


def _unscaled(model, micro_batches):              # forgets to divide each loss: k times the gradient
    for i, (x, y) in enumerate(micro_batches):
        with model.no_sync() if i < len(micro_batches) - 1 else course.no_sync_nullcontext():
            course.no_sync_loss(model, x, y, 1).backward()


def test_accumulation_bench_tells_right_from_wrong_and_the_challenge_fails_a_wrong_loop():
    with gl.interleaved.threads(1), course.accumulation_bench(micro_batches=4, batch=16, hidden=64) as bench:
        base = bench.baseline()
        assert bench.same(base, bench.yours(_right)())
        assert not bench.same(base, bench.yours(_unscaled)())
        assert bench.yours(None) is None
        with pytest.raises(TypeError, match="accumulate"):
            bench.yours(3)
        with pytest.raises(AssertionError, match="does not compute the same result"):
            course.challenge("wrong loop", bench.baseline, bench.yours(_unscaled), speedup=0.01, same=bench.same,
                             min_run_time=0.1)
        with pytest.raises(AssertionError, match="missed"):   # right, but not this much faster
            course.challenge("too slow", bench.baseline, bench.yours(_right), speedup=100.0, same=bench.same,
                             min_run_time=0.1)
    with pytest.raises(ValueError, match="equal micro-batches"):
        with course.accumulation_bench(micro_batches=3, batch=16):
            pass


def test_check_allreduce_crossover_fails_wrong_answers():
    assert "is right" in repr(course.check_allreduce_crossover(4.8))
    assert "not answered" in repr(course.check_allreduce_crossover(None))
    for wrong in (0.6, 4.2, 9.6, 4.8e6):    # alpha x bandwidth alone, (N-1) for N, twice, bytes instead of MB
        with pytest.raises(AssertionError, match="latency term"):
            course.check_allreduce_crossover(wrong)


def _fake_run(world, batch_each, items_per_s):
    return SimpleNamespace(world_size=world, results=[{"batch": batch_each, "ddp_items_per_s": items_per_s}])


def test_check_strong_scaling_checks_the_launch_and_the_formula():
    run = _fake_run(2, 16, 150.0)
    assert "is right" in repr(course.check_strong_scaling(run, 0.75, 100.0, global_batch=32))
    assert "not answered" in repr(course.check_strong_scaling(None, None, 100.0, global_batch=32))
    with pytest.raises(AssertionError, match="strong-scaling"):
        course.check_strong_scaling(run, 1.5, 100.0, global_batch=32)       # the speedup, not divided by workers
    with pytest.raises(AssertionError, match="global batch"):
        course.check_strong_scaling(_fake_run(2, 32, 150.0), 0.75, 100.0, global_batch=32)   # weak scaling
    with pytest.raises(AssertionError, match="LaunchResult"):
        course.check_strong_scaling(SimpleNamespace(world_size=2, results=[{}]), 0.75, 100.0, global_batch=32)


def test_fsdp_script_helpers():
    assert fsdp_train.runs_on_cpu("2.5.1+cu124") is False and fsdp_train.runs_on_cpu("2.7.0") is True
    assert fsdp_train.runs_on_cpu("3.0") is True
    with pytest.raises(ValueError, match="version"):
        fsdp_train.runs_on_cpu("nightly")
    assert callable(fsdp_train.import_fully_shard())
    assert fsdp_train.local_bytes([torch.zeros(3), None]) == 12
    args = fsdp_train.parse_args(["--steps", "2", "--hidden", "32"])
    assert (args.steps, args.hidden, args.layers) == (2, 32, 3)
    with pytest.raises(SystemExit):
        fsdp_train.parse_args(["--steps", "0"])


def _one_process_info():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    return gl.distributed.WorkerInfo(0, 0, 1, 0, "gloo", torch.device("cpu"))


def test_fsdp_and_ddp_train_alike_in_one_process():
    import torch.distributed as dist

    args = fsdp_train.parse_args(["--steps", "2", "--hidden", "32", "--layers", "2", "--batch", "8"])
    info = _one_process_info()
    try:
        if not fsdp_train.runs_on_cpu():
            with pytest.raises(RuntimeError, match="torch 2.7"):
                fsdp_train.train_both(info, args)
            return
        out = fsdp_train.train_both(info, args)
    finally:
        dist.destroy_process_group()
    assert out["fsdp_params_bytes"] == out["ddp_params_bytes"] == out["full_param_bytes"]     # one rank: all of it
    assert out["fsdp_optimizer_bytes"] == 2 * out["full_param_bytes"]                         # Adam's two moments
    assert out["max_loss_diff"] <= 1e-6 and out["max_param_diff"] <= 1e-6 and len(out["fsdp_losses"]) == 2


@pytest.mark.skipif(not fsdp_train.runs_on_cpu(), reason="fully_shard on a CPU (gloo) needs torch 2.7+")
def test_fsdp_and_ddp_train_the_gpt_alike_and_time_their_steps():
    import torch.distributed as dist

    args = fsdp_train.parse_args(["--model", "gpt", "--hidden", "32", "--layers", "2", "--heads", "2", "--seq-len", "16",
                                  "--batch", "2", "--steps", "3"])
    info = _one_process_info()
    try:
        out = fsdp_train.train_both(info, args)
    finally:
        dist.destroy_process_group()
    assert out["model"] == "gpt" and out["fsdp_params_bytes"] == out["full_param_bytes"]
    assert out["max_loss_diff"] <= 1e-5 and out["max_param_diff"] <= 1e-5 and out["ddp_losses"][0] > 4.0  # ln 256
    assert out["ddp_step_s"] > 0 and out["fsdp_step_s"] > 0
    with pytest.raises(SystemExit):
        fsdp_train.parse_args(["--model", "gpt", "--hidden", "30", "--heads", "4"])      # 30 is not a multiple of 4


@pytest.mark.skipif(not fsdp_train.runs_on_cpu(), reason="fully_shard on a CPU (gloo) needs torch 2.7+")
def test_fsdp_under_a_bf16_mixed_precision_policy_keeps_fp32_shards_and_trains_close_to_ddp():
    import torch.distributed as dist

    args = fsdp_train.parse_args(["--model", "gpt", "--hidden", "32", "--layers", "2", "--heads", "2", "--seq-len", "16",
                                  "--batch", "2", "--steps", "3", "--mixed-precision"])
    info = _one_process_info()
    try:
        out = fsdp_train.train_both(info, args)
    finally:
        dist.destroy_process_group()
    assert out["fsdp_mp_params_bytes"] == out["fsdp_params_bytes"]          # the shards stay fp32: Adam updates them
    assert out["fsdp_mp_optimizer_bytes"] == out["fsdp_optimizer_bytes"]
    assert 0 < out["fsdp_mp_max_rel_loss_diff"] < 0.05                        # bf16 compute: close to, not equal to, fp32
    assert out["fsdp_mp_step_s"] > 0 and len(out["fsdp_mp_losses"]) == 3
    assert out["ddp_peak_bytes"] is None and out["fsdp_mp_peak_bytes"] is None   # peaks are the CUDA allocator's
    assert fsdp_train.import_mixed_precision_policy().__name__ == "MixedPrecisionPolicy"


@pytest.mark.skipif(not fsdp_train.runs_on_cpu(), reason="fully_shard on a CPU (gloo) needs torch 2.7+")
def test_fsdp_shards_on_the_ranks_device_when_the_machine_has_a_gpu(monkeypatch):
    """On a one-GPU machine the 2 ranks run gloo on the CPU while torch's accelerator is CUDA: fully_shard's default
    mesh would be a CUDA one (rank 1 then asks for a second GPU). The script names the rank's device instead."""
    import torch.distributed as dist

    monkeypatch.setattr(torch._C, "_get_accelerator", lambda: torch.device("cuda"))   # what a GPU machine answers
    args = fsdp_train.parse_args(["--steps", "1", "--hidden", "32", "--layers", "2", "--batch", "8"])
    info = _one_process_info()
    try:
        out = fsdp_train.train_both(info, args)
    finally:
        dist.destroy_process_group()
    assert out["fsdp_params_bytes"] == out["full_param_bytes"] and out["fsdp_param_type"] == "DTensor"


@pytest.mark.skipif(not fsdp_train.runs_on_cpu(), reason="fully_shard on a CPU (gloo) needs torch 2.7+")
def test_fsdp_script_shards_over_two_ranks():
    run = gl.launch("gpulab.course.scripts.fsdp_train", "--hidden", "64", "--layers", "2", "--steps", "2", nproc=2,
                    backend="gloo", timeout_s=240)
    r0, r1 = run.results
    assert r0["fsdp_params_bytes"] + r1["fsdp_params_bytes"] == r0["full_param_bytes"] == r0["ddp_params_bytes"]
    assert r0["fsdp_grads_bytes"] * 2 == r0["ddp_grads_bytes"] and r0["fsdp_param_type"] == "DTensor"
    assert r0["max_loss_diff"] <= 1e-6 and max(r["max_param_diff"] for r in run.results) <= 1e-6


def test_ddps_memory_counts_its_gradient_buckets_and_zero_its_communication():
    """Lesson 07's table: DDP keeps a second copy of the gradients in its buckets (20 bytes per parameter in fp32 with
    Adam, 16 with gradient_as_bucket_view=True); ZeRO-1/2 send what DDP's all-reduce sends, ZeRO-3 1.5 times it."""
    t = course.model_state_table({"7 B": 7e9}, gpus=8)
    row = t.loc["7 B"]
    assert row["DDP: each GPU holds (GiB)"] * 2**30 == pytest.approx(7e9 * 20)
    assert row["DDP, gradient_as_bucket_view=True (GiB)"] * 2**30 == pytest.approx(7e9 * 16)
    assert row["ZeRO-3 over 8 (GiB)"] * 2**30 == pytest.approx(7e9 * 16 / 8)
    assert row["DDP: sent per GPU per step (GB)"] == pytest.approx(2 * 7e9 * 4 * 7 / 8 / 1e9)
    assert row["ZeRO-1/2: sent per GPU per step (GB)"] == row["DDP: sent per GPU per step (GB)"]
    assert row["ZeRO-3: sent per GPU per step (GB)"] == pytest.approx(1.5 * row["DDP: sent per GPU per step (GB)"])
    assert gl.published("zero-communication").low == 1.5
    with pytest.raises(ValueError):
        course.model_state_table({"x": 1e6}, gpus=1)
    with pytest.raises(ValueError):
        course.model_state_table({"x": -1}, gpus=8)


def test_the_fsdp_script_reports_ddps_bucket_bytes():
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    _one_process_info()
    try:
        model = torch.nn.Sequential(torch.nn.Linear(100, 200), torch.nn.Linear(200, 10))
        ddp = DistributedDataParallel(model)
        ddp(torch.randn(4, 100)).sum().backward()
        view = DistributedDataParallel(torch.nn.Linear(10, 10), gradient_as_bucket_view=True)
        copies, views = fsdp_train.ddp_bucket_bytes(ddp), fsdp_train.ddp_bucket_bytes(view)
    finally:
        dist.destroy_process_group()
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    assert copies in (full, None) and views == 0           # None: a torch that does not log its buckets
    assert copies == full or not hasattr(ddp, "_get_ddp_logging_data")
