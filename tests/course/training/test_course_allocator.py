"""PYTORCH_CUDA_ALLOC_CONF, the 'allowed' part of a capped CUDA OOM message, TensorFlow's GPU memory settings and
OOM text (gpulab.course.training.allocator), and the memory-budget challenge (gpulab.course.training.memory_fit): the GPU paths
run against fakes."""
import json
import subprocess
from types import SimpleNamespace as S

import pytest
import torch

import gpulab as gl
from gpulab import course
from gpulab.course.training import allocator

# The current CUDA wording (c10/cuda/CUDACachingAllocator.cpp): proc_info, then allowed_info ("X allowed; ") when
# set_per_process_memory_fraction capped the allocator, then "Of the allocated memory ...".
CAPPED = ("CUDA out of memory. Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 14.74 GiB of which "
          "12.51 GiB is free. Including non-PyTorch memory, this process has 2.22 GiB memory in use. 2.00 GiB "
          "allowed; Of the allocated memory 1.71 GiB is allocated by PyTorch, and 10.00 MiB is reserved by PyTorch "
          "but unallocated. If reserved but unallocated memory is large try setting "
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")


def test_allowed_bytes_reads_the_cap_and_the_parser_still_reads_the_rest():
    assert course.allowed_bytes(CAPPED) == 2 * 2**30
    assert course.allowed_bytes(CAPPED.replace("2.00 GiB allowed; ", "")) is None
    parsed = gl.memory.parse_oom_message(CAPPED)
    assert parsed.capacity_bytes == int(round(14.74 * 2**30)) and parsed.allocated_bytes == int(round(1.71 * 2**30))
    with pytest.raises(TypeError):
        course.allowed_bytes(None)


def test_alloc_conf_values():
    assert course.alloc_conf() == ""
    assert course.alloc_conf(expandable_segments=True, max_split_size_mb=128) == \
        "expandable_segments:True,max_split_size_mb:128"
    for bad in (20, 0, 12.5, True):
        with pytest.raises(ValueError):
            course.alloc_conf(max_split_size_mb=bad)
    with pytest.raises(TypeError):
        course.alloc_conf(expandable_segments="yes")


def test_allocator_probe_runs_a_fresh_python_with_the_setting(monkeypatch):
    seen = {}

    def fake_run(cmd, capture_output, text, timeout, env):
        seen.update(cmd=cmd, env=env)
        out = {"conf": env[allocator.ALLOC_CONF_ENV], "segments": 1, "reserved_bytes": 3 * 2**30,
               "allocated_bytes": 2 * 2**30}
        return subprocess.CompletedProcess(cmd, 0, "noise\n" + json.dumps(out) + "\n", "")

    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:64")
    run = course.allocator_probe("expandable_segments:True", cuda_available=True, runner=fake_run, python="py")
    assert seen["cmd"][:2] == ["py", "-c"] and "segment.all.current" in seen["cmd"][2]
    assert seen["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_ALLOC_CONF" not in seen["env"]
    assert run.ran and run.segments == 1 and run.cached_unused_bytes == 2**30
    assert "1 segments" in repr(run)


def test_allocator_probe_reports_a_failure_and_skips_without_cuda():
    failed = course.allocator_probe("", cuda_available=True, runner=lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 1, "", "Traceback\nRuntimeError: CUDA error: out of memory\n"))
    assert not failed.ran and "out of memory" in failed.note
    skipped = course.allocator_probe("expandable_segments:True", cuda_available=False)
    assert not skipped.ran and "CUDA" in skipped.note and "not run" in repr(skipped)


def test_probe_script_uses_the_real_torch_api():
    for name in ("memory_stats", "memory_reserved", "memory_allocated", "synchronize"):
        assert callable(getattr(torch.cuda, name))
    compile(allocator.PROBE_SCRIPT, "probe", "exec")


class FakeTFConfig:
    def __init__(self, gpus, started=False):
        self.gpus, self.started, self.calls = gpus, started, []
        self.experimental = S(set_memory_growth=self._growth)
        self.LogicalDeviceConfiguration = lambda memory_limit: ("logical", memory_limit)

    def list_physical_devices(self, kind):
        assert kind == "GPU"
        return self.gpus

    def _growth(self, gpu, on):
        if self.started:
            raise RuntimeError("Physical devices cannot be modified after being initialized")
        self.calls.append(("growth", gpu.name, on))

    def set_logical_device_configuration(self, gpu, confs):
        if self.started:
            raise RuntimeError("Virtual devices cannot be modified after being initialized")
        self.calls.append(("logical", gpu.name, confs))


def test_tf_limit_gpu_memory_against_a_fake_tensorflow():
    gpus = [S(name="/physical_device:GPU:0"), S(name="/physical_device:GPU:1")]
    cfg = FakeTFConfig(gpus)
    tf = S(config=cfg)
    assert len(course.tf_limit_gpu_memory(tf, memory_limit_mb=1024)) == 2
    assert cfg.calls[0] == ("logical", "/physical_device:GPU:0", [("logical", 1024)])
    cfg.calls.clear()
    lines = course.tf_limit_gpu_memory(tf, growth=True)
    assert cfg.calls == [("growth", g.name, True) for g in gpus] and "growth on" in lines[0]
    late = course.tf_limit_gpu_memory(S(config=FakeTFConfig(gpus, started=True)), growth=True)
    assert all("unchanged" in line for line in late)
    assert "default" in course.tf_limit_gpu_memory(tf)[0]
    assert course.tf_limit_gpu_memory(S(config=FakeTFConfig([])), growth=True) == []
    with pytest.raises(ValueError):
        course.tf_limit_gpu_memory(tf, growth=True, memory_limit_mb=1024)
    with pytest.raises(ValueError):
        course.tf_limit_gpu_memory(tf, memory_limit_mb=0)


def test_tf_limit_gpu_memory_names_match_real_tensorflow():
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("TensorFlow not installed")
    code = ("import tensorflow as tf; c = tf.config; "
            "print(all(callable(x) for x in (c.experimental.set_memory_growth, c.set_logical_device_configuration, "
            "c.LogicalDeviceConfiguration, c.list_physical_devices)), issubclass(tf.errors.ResourceExhaustedError, "
            "tf.errors.OpError))")
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.stdout.strip().splitlines()[-1] == "True True", out.stderr[-500:]


def test_parse_tf_oom():
    oom = course.parse_tf_oom(course.TF_OOM_EXAMPLE)
    assert oom.shape == (500, 512, 4, 4) and oom.dtype == "float" and oom.allocator == "GPU_0_bfc"
    assert oom.device.endswith("device:GPU:0") and oom.op == "conv_grad_input_ops" and oom.elements == 500 * 512 * 16
    assert course.parse_tf_oom("ResourceExhaustedError: OOM when allocating tensor with shape[2,3] and type half on "
                               "/device:GPU:0 by allocator GPU_0_bfc [Op:MatMul]").op == "MatMul"
    assert course.parse_tf_oom("CUDA out of memory") is None


def test_fit_challenge_passes_fails_and_waits():
    assert isinstance(course.fit_challenge("x", None, budget_bytes=gl.MiB, reference=1.0), course.NotAnswered)
    ok = course.fit_challenge("fits", lambda: torch.ones(1000).sum(), budget_bytes=gl.MiB, reference=1000.0,
                              device="cpu")
    assert ok.passed and "[ok]" in repr(ok) and ok.peak_bytes >= 4000
    with pytest.raises(AssertionError, match="out of memory"):
        course.fit_challenge("too big", lambda: torch.ones(2**20).sum(), budget_bytes=gl.MiB, reference=2.0**20,
                             device="cpu")
    with pytest.raises(AssertionError, match="outside"):
        course.fit_challenge("wrong loss", lambda: torch.ones(10).sum(), budget_bytes=gl.MiB, reference=11.0,
                             rtol=0.01, device="cpu")
