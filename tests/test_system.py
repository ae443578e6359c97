from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import gpulab as gl
from gpulab.system import FrameworkInfo, GPUInfo, cuda_hidden_by_env, diagnose


# ---- device choice ---------------------------------------------------------------------------
@pytest.mark.parametrize("value,hidden", [("", True), ("-1", True), (" ", True), ("none", True),
                                          ("0", False), ("0,1", False), ("GPU-abc", False)])
def test_cuda_hidden_by_env(value, hidden):
    assert cuda_hidden_by_env({"CUDA_VISIBLE_DEVICES": value}) is hidden
    assert cuda_hidden_by_env({}) is False


@pytest.fixture
def fake_cuda(monkeypatch):
    """Pretend torch sees one CUDA GPU (no GPU exists here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_device_prefers_cuda_when_visible(fake_cuda, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gl.device_kind() == "cuda"
    assert gl.device() == torch.device("cuda", 0)


def test_device_honours_empty_cuda_visible_devices(fake_cuda, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gl.device_kind() in ("cpu", "mps")
    assert gl.device().type != "cuda"


def test_device_on_this_machine_is_cpu():
    assert gl.device() == torch.device("cpu")
    assert gl.device("cpu") == torch.device("cpu")


def test_device_bad_requests_raise_clear_errors():
    with pytest.raises(ValueError, match="CUDA is not available"):
        gl.device("cuda")
    with pytest.raises(ValueError, match="unknown device"):
        gl.device("tpu:0")
    with pytest.raises(TypeError, match="device string"):
        gl.device(0)


def test_device_index_beyond_count(fake_cuda, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(ValueError, match="only 1 GPU"):
        gl.device("cuda:3")


# ---- system info -------------------------------------------------------------------------------
def test_system_info_on_this_machine():
    info = gl.system_info(frameworks=("torch",))
    assert info.logical_cpus >= 1 and info.ram_bytes > 0
    assert info.nvml_available is False and "NVML" in (info.nvml_error or "")
    fw = info.framework("torch")
    assert fw.installed and fw.version == torch.__version__
    assert info.capabilities.device == "cpu" and info.capabilities.gloo
    assert "torch" in repr(info) and "<table" in info._repr_html_()
    json.dumps(info.to_dict(), default=str)


def test_system_info_rejects_unknown_framework():
    with pytest.raises(ValueError, match="unknown framework"):
        gl.system_info(frameworks=("jax",))


def test_env_allow_list_never_leaks_secrets(monkeypatch):
    monkeypatch.setenv("MY_API_TOKEN", "s3cret-value")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    info = gl.system_info(frameworks=())
    assert info.env.get("CUDA_VISIBLE_DEVICES") == "0"
    text = repr(info) + json.dumps(info.to_dict(), default=str)
    assert "s3cret-value" not in text and "MY_API_TOKEN" not in text


def test_system_info_with_fake_nvml_gpu(fake_nvml):
    fake_nvml()
    info = gl.system_info(frameworks=())
    assert info.nvml_available and info.driver_version == "550.54.15"
    (g,) = info.gpus
    assert g.name == "NVIDIA A100-SXM4-40GB" and g.compute_capability == (8, 0)
    assert g.memory_total_bytes == 40 * 2**30 and g.uuid.startswith("GPU-")


# ---- capabilities -------------------------------------------------------------------------------
def test_capabilities_from_fabricated_facts(cpu_info, gpu_info):
    c = cpu_info.capabilities
    assert (c.device, c.bf16, c.amx, c.nccl) == ("cpu", False, False, False)
    amx = replace(cpu_info, cpu_flags=("avx512f", "amx_tile", "amx_bf16")).capabilities
    assert amx.amx and amx.bf16
    g = gpu_info.capabilities
    assert (g.device, g.gpu_count, g.bf16, g.tf32, g.fp16_tensor_cores, g.fp8, g.nccl) == \
        ("cuda", 1, True, True, True, False, True)
    t4 = replace(gpu_info, gpus=(GPUInfo(0, "Tesla T4", "GPU-2", 16 * 2**30, (7, 5)),)).capabilities
    assert t4.fp16_tensor_cores and not t4.bf16 and not t4.tf32


# ---- diagnoses on fabricated SystemInfo values ---------------------------------------------
def test_healthy_cpu_machine(cpu_info):
    d = diagnose(cpu_info)
    codes = [x.code for x in d]
    assert "nvml-missing" in codes and "no-gpu" in codes and "torch-cpu-build" in codes
    assert not any(x.level == "error" for x in d)


def test_healthy_gpu_machine(gpu_info):
    d = diagnose(gpu_info)
    assert [x.code for x in d if x.level in ("error", "warning")] == []
    assert "torch-cuda" in [x.code for x in d]


def test_cpu_only_torch_on_gpu_machine(gpu_info):
    info = replace(gpu_info, frameworks=(FrameworkInfo("torch", True, "2.5.1+cpu", None, detail={}),))
    (err,) = [x for x in diagnose(info) if x.level == "error"]
    assert err.code == "torch-cpu-build" and "CPU-only build" in err.message and "pip install" in err.fix


def test_driver_older_than_runtime(gpu_info):
    old = replace(gpu_info, cuda_driver_version=11080,
                  frameworks=(FrameworkInfo("torch", True, "2.14.1+cu130", "13.0", None, 0, detail={}),))
    codes = {x.code: x for x in diagnose(old)}
    assert codes["driver-too-old"].level == "error"
    assert "11.8" in codes["driver-too-old"].message and "13.0" in codes["driver-too-old"].message
    assert "torch-no-cuda" not in codes  # one root cause, one error
    minor = replace(gpu_info, cuda_driver_version=12020)
    assert "driver-older-minor" in [x.code for x in diagnose(minor)]


def test_cuda_visible_devices_hides_every_gpu(gpu_info):
    hidden = replace(gpu_info, env={"CUDA_VISIBLE_DEVICES": ""},
                     frameworks=(FrameworkInfo("torch", True, "2.5.1", "12.4", None, 0, detail={}),))
    d = {x.code: x for x in diagnose(hidden)}
    assert d["cuda-visible-devices-hides-all"].level == "error"
    assert "torch-no-cuda" not in d
    bad = replace(gpu_info, env={"CUDA_VISIBLE_DEVICES": "3"})
    assert "cuda-visible-devices-invalid" in [x.code for x in diagnose(bad)]


def test_torch_cannot_use_cuda(gpu_info):
    broken = replace(gpu_info, frameworks=(FrameworkInfo("torch", True, "2.5.1", "12.4", None, 0,
                                                         error="CUDA driver initialization failed", detail={}),))
    (err,) = [x for x in diagnose(broken) if x.level == "error"]
    assert err.code == "torch-no-cuda" and "initialization failed" in err.message


def test_tf_sees_no_gpu_while_torch_does(gpu_info):
    tf_cpu = replace(gpu_info, frameworks=(gpu_info.frameworks[0],
                                           FrameworkInfo("tensorflow", True, "2.21.0", None, None, 0,
                                                         detail={"package": "tensorflow-cpu"})))
    w = {x.code: x for x in diagnose(tf_cpu)}["tf-no-gpu"]
    assert w.level == "warning" and "tensorflow-cpu" in w.message and "and-cuda" in w.fix


def test_few_threads_warning(cpu_info):
    assert "few-threads" in [x.code for x in diagnose(replace(cpu_info, torch_threads=1))]


def test_torch_missing(cpu_info):
    info = replace(cpu_info, frameworks=(FrameworkInfo("torch", False),))
    assert "torch-missing" in [x.code for x in diagnose(info)]


def test_doctor_report_on_this_machine():
    r = gl.doctor(frameworks=("torch",))
    assert r.healthy
    assert r.diagnoses[0].level in ("error", "warning", "info")  # sorted worst first
    assert "gpulab doctor: healthy" in repr(r) and "<table" in r._repr_html_()
    assert "nvml-missing" in r.codes()


def test_cli_doctor_json_and_exit_code():
    out = subprocess.run([sys.executable, "-m", "gpulab", "doctor", "--json", "--frameworks", "torch"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["healthy"] is True and data["system"]["capabilities"]["device"] == "cpu"
    bad = subprocess.run([sys.executable, "-m", "gpulab", "doctor", "--frameworks", "jax"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown framework" in bad.stderr
