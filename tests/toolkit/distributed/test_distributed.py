"""gpulab.distributed: torchrun launches that succeed, fail loudly, time out without orphans; bad arguments;
the worker-side helpers; the DDP script's pieces; the NCCL/GPU paths against fakes of the real APIs."""
from __future__ import annotations

import importlib.util

import doctest
import json
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

import gpulab
from gpulab import course
import gpulab.distributed as dist_mod
from gpulab.distributed import agents, torchrun as launch_mod, worker
from gpulab.course.scripts import ddp_train

FIXTURES = Path(__file__).resolve().parents[2] / "support" / "fixtures"


def _processes_with(token: str) -> list[str]:
    """Command lines of live processes that mention ``token`` (zombies excluded)."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and token in " ".join(p.info["cmdline"] or []):
                found.append(" ".join(p.info["cmdline"]))
        except psutil.Error:
            pass
    return found


def _no_orphans(token: str, within_s: float = 5.0) -> list[str]:
    end = time.monotonic() + within_s
    while True:
        left = _processes_with(token)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


# ------------------------------------------------------------------------------------ real launches (gloo)

def test_doctests():
    """The module's examples, including a real 2-process launch of the DDP script."""
    assert doctest.testmod(dist_mod).failed == 0
    assert doctest.testmod(ddp_train).failed == 0


def test_two_nodes_on_localhost_run_the_ddp_script_and_its_checks():
    """Two torchrun agents meet through a c10d rendezvous; ranks report data; output is rank-prefixed."""
    lines: list[str] = []
    run = gpulab.launch("gpulab.course.scripts.ddp_train", "--steps", "2", "--batch", "8", "--no-baseline", "--allreduce-reps",
                        "2", nproc=1, nnodes=2, echo=lines.append, timeout_s=180)
    assert run.world_size == 2 and [r["rank"] for r in run.results] == [0, 1]
    assert {r["node"] for r in run.results} == {0, 1}                  # one rank per "node"
    assert all("--rdzv-backend=c10d" in c and "--nnodes=2" in c and "is_host=0" in c for c in run.commands)
    assert not any("TCPStore" in line or "recvVector" in line for line in lines), lines   # a clean shutdown
    assert len(set(run.commands)) == 2                                  # same command but its log directory
    r0, r1 = run.results
    # self-checks: DDP step == single-process full-batch step; replicas bit-identical; shards disjoint and complete
    assert r0["param_max_abs_diff"] <= 1e-5 * max(1.0, r0["param_max_abs"])
    assert r0["param_digest"] == r1["param_digest"]
    assert not set(r0["shard"]) & set(r1["shard"])
    assert sorted(r0["shard"] + r1["shard"]) == list(range(r0["check_items"]))
    assert r0["no_sync_max_abs_diff"] <= 1e-6
    assert r0["allreduces_sync_every"] == r0["accumulation"] * r0["allreduces_no_sync"]
    assert r0["params_digest_after_training"] == r1["params_digest_after_training"]
    assert r0["ddp_items_per_s"] > 0 and r0["allreduce_bus_bytes_per_s"] > 0
    assert any(line.startswith("[rank 1] rank 1/2") for line in lines), lines[-10:]
    assert "torchrun" in repr(run) and "<table" in run._repr_html_()
    assert run.to_dataframe().shape[0] == 2


def test_a_rank_that_raises_surfaces_its_traceback_and_stops_the_others():
    token = f"tok{uuid.uuid4().hex}"
    start = time.monotonic()
    with pytest.raises(gpulab.distributed.DistributedError) as info:
        gpulab.launch(FIXTURES / "dist_raise.py", token, nproc=2, timeout_s=120)
    assert time.monotonic() - start < 100                # rank 0 sleeps 120 s: it was stopped, not waited for
    err = info.value
    assert not isinstance(err, gpulab.distributed.LaunchTimeout)
    assert "rank 1" in str(err) and "ZeroDivisionError: rank 1 broke on purpose" in str(err)
    assert "dist_raise.py" in str(err)                   # the frame of the failing line
    assert err.failures[0].rank == 1 and "ZeroDivisionError" in err.failures[0].traceback
    assert err.returncode and err.log_dir and Path(err.log_dir).is_dir()
    assert _no_orphans(token) == []
    shutil.rmtree(Path(err.log_dir).parent, ignore_errors=True)   # a failed launch keeps its logs for the learner


def test_a_rank_that_hangs_is_stopped_by_the_timeout():
    token = f"tok{uuid.uuid4().hex}"
    start = time.monotonic()
    with pytest.raises(gpulab.distributed.LaunchTimeout) as info:
        gpulab.launch(FIXTURES / "dist_hang.py", token, nproc=2, timeout_s=20)
    assert time.monotonic() - start < 20 + 15            # the timeout, then a few seconds to stop everything
    err = info.value
    assert isinstance(err, TimeoutError) and isinstance(err, gpulab.distributed.DistributedError)
    assert "did not finish within 20 s" in str(err)
    # the hung rank's stack, dumped by faulthandler (SIGUSR1, registered by init_worker) before the kill
    assert [f.rank for f in err.failures] == [1], str(err)
    assert "wait_forever" in err.failures[0].traceback
    assert _no_orphans(token) == []
    shutil.rmtree(Path(err.log_dir).parent, ignore_errors=True)


# ------------------------------------------------------------------------------------------- bad arguments

@pytest.mark.parametrize("kwargs, error, match", [
    (dict(nproc=0), ValueError, "nproc"),
    (dict(nproc=1.5), TypeError, "nproc"),
    (dict(nproc=True), TypeError, "nproc"),
    (dict(nnodes=0), ValueError, "nnodes"),
    (dict(timeout_s=0), ValueError, "timeout_s"),
    (dict(backend="mpi"), ValueError, "backend"),
    (dict(echo="yes"), TypeError, "echo"),
    (dict(threads_per_process=0), ValueError, "threads_per_process"),
])
def test_bad_arguments_are_refused_before_anything_starts(kwargs, error, match):
    with pytest.raises(error, match=match):
        gpulab.launch(FIXTURES / "dist_hello.py", **kwargs)


def test_missing_script_or_module_is_refused(tmp_path):
    with pytest.raises(ValueError, match="no training script"):
        gpulab.launch(tmp_path / "nope.py")
    with pytest.raises(ValueError, match="no training script"):
        gpulab.launch(str(tmp_path / "nope.py"))
    with pytest.raises(ValueError, match="no module 'gpulab.course.scripts.nope'"):
        gpulab.launch("gpulab.course.scripts.nope")
    with pytest.raises(ValueError, match="neither"):
        gpulab.launch("not a module!")
    with pytest.raises(TypeError, match="script"):
        gpulab.launch(42)


def test_nccl_needs_a_gpu_per_process(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="one CUDA GPU per process: 2 processes here, 1 GPU"):
        gpulab.launch(FIXTURES / "dist_hello.py", nproc=2, backend="nccl")


# ------------------------------------------------------------------------- commands, backends, fakes of GPUs

def test_torchrun_command_single_and_multi_node():
    single = gpulab.torchrun_command("gpulab.course.scripts.ddp_train", ["--steps", "3"], nproc=2)
    assert single[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert "--standalone" in single and single[-4:] == ["-m", "gpulab.course.scripts.ddp_train", "--steps", "3"]
    multi = gpulab.torchrun_command(FIXTURES / "dist_hello.py", nproc=4, nnodes=2, rdzv_endpoint="10.0.0.1:29400",
                                    rdzv_id="job7")
    assert "--rdzv-endpoint=10.0.0.1:29400" in multi and "--rdzv-id=job7" in multi and "-m" not in multi[3:]
    assert multi[-1] == str((FIXTURES / "dist_hello.py").resolve())
    with pytest.raises(ValueError, match="rdzv_endpoint"):
        gpulab.torchrun_command("gpulab.course.scripts.ddp_train", nnodes=2)


def test_default_backend_follows_the_gpus(monkeypatch):
    import torch
    import torch.distributed as dist

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpulab.distributed.default_backend(2) == "gloo"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert gpulab.distributed.default_backend(2) == "nccl"
    assert gpulab.distributed.default_backend(3) == "gloo"           # a GPU per process, or gloo
    with pytest.raises(ValueError):
        gpulab.distributed.default_backend(0)


def test_init_worker_on_nccl_uses_its_own_gpu(monkeypatch, tmp_path):
    """The NCCL path against fakes shaped like torch's API: device cuda:LOCAL_RANK, set_device before
    init_process_group, no device_id (a TypeError before torch 2.3; random NCCL hangs on 2.6-2.7, pytorch#153960)."""
    import inspect

    import torch
    import torch.distributed as dist

    real_init = inspect.signature(dist.init_process_group)
    calls = {}
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.setdefault("set_device", d))
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: calls.update(backend=backend, **kw))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("GROUP_RANK", "1")
    monkeypatch.setenv(dist_mod.BACKEND_ENV, "nccl")
    monkeypatch.setenv(dist_mod.RESULTS_ENV, str(tmp_path))
    monkeypatch.setenv(launch_mod.TIMEOUT_ENV, "42")
    info = dist_mod.init_worker()
    assert (info.rank, info.local_rank, info.world_size, info.node, info.backend) == (3, 1, 4, 1, "nccl")
    assert info.device == torch.device("cuda", 1) and calls["set_device"] == torch.device("cuda", 1)
    assert calls["backend"] == "nccl" and "device_id" not in calls
    assert set(calls) - {"set_device", "backend"} <= set(real_init.parameters)   # only arguments torch has
    real_barrier = inspect.signature(dist.barrier)
    barriers = []
    monkeypatch.setattr(dist, "barrier", lambda **kw: barriers.append(kw))
    dist_mod.barrier(info)
    assert barriers == [{"device_ids": [1]}]                       # NCCL is told this rank's GPU
    assert set(barriers[0]) <= set(real_barrier.parameters)
    assert calls["timeout"].total_seconds() == 42
    marker = json.loads((tmp_path / "rank-3.started").read_text())
    assert marker["local_rank"] == 1 and marker["group_rank"] == 1


def test_simulated_nodes_get_their_own_gpus():
    env = {"CUDA_VISIBLE_DEVICES": "3,5,6,7"}
    assert [launch_mod._node_gpus(env, "nccl", i, 2, 2) for i in (0, 1)] == [{"CUDA_VISIBLE_DEVICES": "3,5"},
                                                                          {"CUDA_VISIBLE_DEVICES": "6,7"}]
    assert launch_mod._node_gpus({}, "nccl", 1, 1, 2) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert launch_mod._node_gpus({}, "gloo", 1, 1, 2) == {} and launch_mod._node_gpus({}, "nccl", 0, 2, 1) == {}


def test_report_merges_into_the_rank_file(monkeypatch, tmp_path):
    import numpy as np
    import torch

    monkeypatch.setattr(worker, "_REPORTED", {})
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(dist_mod.RESULTS_ENV, str(tmp_path))
    dist_mod.report(a=1, t=torch.tensor([1.5, 2.0]))
    out = dist_mod.report(a=2, n=np.float32(0.5))
    assert out == {"rank": 1, "a": 2, "t": [1.5, 2.0], "n": 0.5}
    assert json.loads((tmp_path / "rank-1.json").read_text()) == out
    with pytest.raises(TypeError, match="report"):
        dist_mod.report(bad=object())


def test_traceback_and_root_cause_parsing():
    text = textwrap.dedent("""\
        some warning
        [rank3]: Traceback (most recent call last):
        [rank3]:   File "train.py", line 9, in <module>
        [rank3]: KeyError: 'x'
        """)
    tb, rank = agents._traceback_from(text)
    assert rank == 3 and tb.startswith("Traceback") and tb.endswith("KeyError: 'x'")
    dump = "Thread 0x01 (most recent call first):\n  File \"a.py\", line 1 in f\n\nCurrent thread 0x02 (most recent " \
           "call first):\n  File \"b.py\", line 2 in wait_forever\n"
    tb, rank = agents._traceback_from("noise\n" + dump)
    assert rank is None and tb.startswith("Thread 0x01") and "wait_forever" in tb
    summary = ["Failures:", "  rank      : 0 (local_rank: 0)", "Root Cause (first observed failure):", "[0]:",
               "  rank      : 1 (local_rank: 1)"]
    assert agents._root_cause_rank(summary) == 1 and agents._root_cause_rank(["nothing"]) is None


def test_allreduce_estimate_and_scaling_table():
    assert gpulab.distributed.allreduce_seconds(1e9, 1e9, workers=2) == pytest.approx(1.0)
    assert gpulab.distributed.allreduce_seconds(1e9, 1e9, workers=8) == pytest.approx(1.75)   # hardly grows with workers
    assert gpulab.distributed.allreduce_seconds(0, 1e9) == 0
    with pytest.raises(ValueError):
        gpulab.distributed.allreduce_seconds(1e9, 0)
    t = gpulab.distributed.scaling({"1 process": (1, 100.0), "2 processes": (2, 150.0)}, baseline="1 process",
                       published={"ddp-resnet50-dgxa100-tf32": 8})
    assert t.speedup("2 processes") == pytest.approx(1.5) and t.efficiency("2 processes") == pytest.approx(0.75)
    assert "75%" in repr(t) and "DGX A100" in repr(t) and "<table" in t._repr_html_()
    assert t.to_dataframe().loc["2 processes", "efficiency"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="baseline"):
        gpulab.distributed.scaling({"a": (1, 1.0)}, baseline="b")
    with pytest.raises(ValueError):
        gpulab.distributed.scaling({"a": (0, 1.0)}, baseline="a")


def test_shard_indices_and_script_arguments():
    shards = gpulab.distributed.shard_indices(10, 2, seed=3)
    assert sorted(shards[0] + shards[1]) == list(range(10)) and not set(shards[0]) & set(shards[1])
    padded = gpulab.distributed.shard_indices(11, 2, seed=3)          # 11 items: one repeated to make 12
    assert len(padded[0]) == len(padded[1]) == 6 and len(set(padded[0]) | set(padded[1])) == 11
    dropped = gpulab.distributed.shard_indices(11, 2, seed=3, drop_last=True)
    assert len(dropped[0]) == 5 and not set(dropped[0]) & set(dropped[1])
    assert ddp_train.parse_args(["--steps", "0"]).steps == 0
    with pytest.raises(SystemExit):
        ddp_train.parse_args(["--batch", "0"])


def test_train_step_uses_no_sync_with_ddp_like_models():
    """course.train_step enters model.no_sync() for all but the last micro-batch (unless ddp_no_sync=False)."""
    import contextlib

    import torch

    class FakeDDP(torch.nn.Linear):           # what train_step sees of DDP: a module with no_sync()
        def __init__(self):
            super().__init__(4, 2)
            self.entered = 0

        @contextlib.contextmanager
        def no_sync(self):
            self.entered += 1
            yield

    batch = (torch.randn(8, 4), torch.randint(0, 2, (8,)))
    for no_sync, expected in ((True, 3), (False, 0)):
        m = FakeDDP()
        cfg = course.TrainConfig(accumulation_steps=4, ddp_no_sync=no_sync, progress=False)
        course.train_step(m, torch.optim.SGD(m.parameters(), lr=0.1), batch, cfg)
        assert m.entered == expected


@pytest.mark.slow
def test_mirrored_strategy_on_logical_cpus_and_on_fake_gpus():
    if importlib.util.find_spec("tensorflow") is None:   # found, not imported (TF before Triton crashes)
        pytest.skip("tensorflow not installed")   # runs it in a child process; absent in the `make compat` venv
    code = textwrap.dedent("""
        import os
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf
        import gpulab as gl
        calls = []
        real_list, real_ms = tf.config.list_physical_devices, tf.distribute.MirroredStrategy
        tf.config.list_physical_devices = lambda kind=None: ["GPU:0", "GPU:1"] if kind == "GPU" else real_list(kind)
        tf.distribute.MirroredStrategy = lambda *a, **k: calls.append((a, k)) or "all GPUs"
        assert gl.distributed.mirrored_strategy() == "all GPUs" and calls == [((), {})]
        tf.config.list_physical_devices, tf.distribute.MirroredStrategy = real_list, real_ms
        s = gl.distributed.mirrored_strategy(cpu_devices=2)
        assert s.num_replicas_in_sync == 2, s.extended.worker_devices
        try:
            gl.distributed.mirrored_strategy(cpu_devices=3)
        except RuntimeError as e:
            assert "before the first TensorFlow operation" in str(e)
        else:
            raise AssertionError("3 devices after initialisation must fail")
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


def test_ddp_script_pieces_run_in_one_process(monkeypatch):
    """The script is importable: its steps run in a one-process gloo group (world size 1)."""
    import torch.distributed as dist

    for k, v in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(gpulab.distributed.free_port()), "RANK": "0",
                 "LOCAL_RANK": "0", "WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv(dist_mod.RESULTS_ENV, raising=False)
    args = ddp_train.parse_args(["--batch", "8", "--steps", "1", "--warmup", "1", "--accumulation", "2"])
    info = dist_mod.init_worker("gloo")
    try:
        checks = ddp_train.self_checks(info, args)
        alone = ddp_train.baseline_alone(info, args)
        timed = ddp_train.ddp_throughput(info, args)
        comm = ddp_train.allreduce_timing(info, 4096, reps=2)
    finally:
        dist.destroy_process_group()
    assert checks["param_max_abs_diff"] < 1e-6 and checks["no_sync_max_abs_diff"] < 1e-6
    assert (checks["allreduces_no_sync"], checks["allreduces_sync_every"]) == (1, 2)
    assert sorted(checks["shard"]) == list(range(8))
    assert alone["alone_items_per_s"] > 0 and timed["ddp_items_per_s"] > 0 and len(timed["ddp_losses"]) == 2
    assert comm["allreduce_bytes"] == 4096 and comm["allreduce_bus_bytes_per_s"] is None   # one rank: no traffic
