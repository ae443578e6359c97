"""Lesson 07 on every visible GPU: gl.launch runs the lesson's DDP script with torchrun over NCCL, one process per
GPU, and every rank's self-checks and timings come back."""
from __future__ import annotations

import pytest

import gpulab as gl


@pytest.fixture(scope="module")
def run():
    import torch
    import torch.distributed as dist

    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip(f"DDP over NCCL needs 2 or more GPUs; this machine shows {n}")
    if not dist.is_nccl_available():
        pytest.fail(f"{n} GPUs but this torch ({torch.__version__}) has no NCCL: lesson 07 cannot run DDP on them")
    return gl.launch("gpulab.course.scripts.ddp_train", "--model", "small_cnn", "--batch", 64, "--steps", 5,
                     nproc=n, backend="nccl", timeout_s=240)


def test_every_rank_reports_from_its_own_gpu(run):
    import torch

    n = torch.cuda.device_count()
    assert run.backend == "nccl" and run.world_size == n, f"launched {run.world_size} ranks on {run.backend}: {run}"
    ranks = sorted(r["rank"] for r in run.results)
    assert ranks == list(range(n)), f"ranks that reported: {ranks}, expected 0..{n - 1}"
    devices = [run.result(i)["device"] for i in range(n)]
    assert devices == [f"cuda:{i}" for i in range(n)], f"each rank should train on its own GPU, got {devices}"
    assert all(run.result(i)["backend"] == "nccl" for i in range(n))


def test_ddp_self_checks_hold_on_the_gpus(run):
    results = run.results
    tol = 1e-5 * max(1.0, max(r["param_max_abs"] for r in results))
    worst = max(r["param_max_abs_diff"] for r in results)
    assert worst <= tol, (f"after one DDP step the weights differ from one process stepping on the whole batch by "
                          f"{worst:.2e} (tolerance {tol:.1e})")
    assert len({r["param_digest"] for r in results}) == 1, "the replicas are not bit-identical after one DDP step"
    shards = [set(r["shard"]) for r in results]
    assert sum(len(s) for s in shards) == len(set().union(*shards)) == results[0]["check_items"], (
        "DistributedSampler should give every item to exactly one rank")
    r0 = results[0]
    assert r0["no_sync_max_abs_diff"] <= tol, f"no_sync accumulation differs by {r0['no_sync_max_abs_diff']:.2e}"
    assert r0["allreduces_sync_every"] == r0["accumulation"] * r0["allreduces_no_sync"], (
        f"all-reduces: {r0['allreduces_no_sync']} with no_sync, {r0['allreduces_sync_every']} syncing every "
        "micro-batch")
    assert len({r["params_digest_after_training"] for r in results}) == 1, "the replicas drifted apart in training"


def test_ddp_throughput_and_allreduce_are_recorded(run, figure):
    r0 = run.result(0)
    assert r0["ddp_items_per_s"] > 0 and r0["allreduce_s"] > 0, r0
    n = run.world_size
    efficiency = r0["ddp_items_per_s"] / (n * r0["alone_items_per_s"]) if r0.get("alone_items_per_s") else None
    figure("ddp_items_per_s", r0["ddp_items_per_s"], "items/s",
           note=f"{n} GPUs, NCCL, small_cnn batch 64 per rank; one GPU alone: "
                f"{r0.get('alone_items_per_s', float('nan')):,.0f} items/s")
    figure("ddp_scaling_efficiency", None if efficiency is None else 100 * efficiency, "%",
           note=f"DDP throughput over {n} x one process alone")
    figure("ddp_allreduce_bus_bandwidth", (r0["allreduce_bus_bytes_per_s"] or 0) / 1e9, "GB/s",
           note=f"all-reduce of the gradients ({r0['allreduce_bytes'] / 1e6:.2f} MB) in "
                f"{r0['allreduce_s'] * 1e3:.2f} ms")
