from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import gpulab as gl
from gpulab.diagnosis import diagnose
from gpulab.system import FrameworkInfo, GPUInfo, cuda_hidden_by_env


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
    assert gl.system.device_kind() == "cuda"
    assert gl.device() == torch.device("cuda", 0)


def test_device_honours_empty_cuda_visible_devices(fake_cuda, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gl.system.device_kind() in ("cpu", "mps")
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
    with pytest.raises(ValueError, match=r"frameworks: unknown \['jax'\]"):
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
    assert bad.returncode == 2 and "frameworks: unknown ['jax']" in bad.stderr


# ---- GPU-only diagnoses on fabricated facts ---------------------------------------------------------------
def _torch_fw(info, **detail):
    fw = info.framework("torch")
    return replace(fw, detail={**fw.detail, **detail})


def test_volta_on_a_wheel_without_sm_70_kernels(gpu_info):
    from gpulab.system import FrameworkInfo

    v100 = replace(gpu_info, gpus=(GPUInfo(0, "Tesla V100-SXM2-16GB", "GPU-1", 16 * 2**30, (7, 0)),),
                   driver_version="580.65.06", cuda_driver_version=13000)
    cu130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    info = replace(v100, frameworks=(replace(_torch_fw(v100, arch_list=cu130), version="2.14.1+cu130",
                                             cuda_build="13.0"),))
    d = next(d for d in gl.diagnosis.diagnose(info) if d.code == "no-kernels-for-gpu")
    assert d.level == "error" and "7.0" in d.message and "cu126" in d.fix
    cu126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]
    ok = replace(info, frameworks=(replace(_torch_fw(v100, arch_list=cu126), cuda_build="12.6"),))
    assert "no-kernels-for-gpu" not in [d.code for d in gl.diagnosis.diagnose(ok)]
    # an L4 (8.9) runs sm_86 cubins; an RTX 5090 (12.0) only through PTX or sm_120
    from gpulab.diagnosis import _has_kernels
    assert _has_kernels(["sm_80", "sm_86"], (8, 9)) and not _has_kernels(["sm_80", "sm_90"], (12, 0))
    assert _has_kernels(["sm_90", "compute_90"], (12, 0)) and _has_kernels(["sm_90a", "sm_100"], (10, 0))
    assert FrameworkInfo  # imported for the fixture's shape


def test_driver_older_than_a_cuda_13_wheel(gpu_info):
    info = replace(gpu_info, driver_version="550.54.15", cuda_driver_version=12040,
                   frameworks=(replace(gpu_info.framework("torch"), version="2.14.1+cu130", cuda_build="13.0"),))
    d = next(d for d in gl.diagnosis.diagnose(info) if d.code == "driver-too-old")
    assert "R580" in d.message and "CUDA 12" in d.fix


def test_tf_that_will_grab_the_card(gpu_info):
    tf = replace(gpu_info.framework("tensorflow"), detail={"package": "tensorflow", "memory_growth": False})
    info = replace(gpu_info, frameworks=(gpu_info.framework("torch"), tf))
    d = next(d for d in gl.diagnosis.diagnose(info) if d.code == "tf-grabs-memory")
    assert d.level == "warning" and "gl.setup()" in d.fix
    grows = replace(info, frameworks=(gpu_info.framework("torch"), replace(tf, detail={"memory_growth": True})))
    assert "tf-grabs-memory" not in [d.code for d in gl.diagnosis.diagnose(grows)]
    grabbed = replace(info, frameworks=(gpu_info.framework("torch"),
                                        replace(tf, detail={"memory_growth": False, "gpus_started": True})))
    d = next(d for d in gl.diagnosis.diagnose(grabbed) if d.code == "tf-grabbed-memory")
    assert d.level == "error" and "Restart the kernel" in d.fix
    assert "tf-grabs-memory" not in [d.code for d in gl.diagnosis.diagnose(grabbed)]


def test_tf32_state_on_ampere_only(gpu_info):
    off = replace(gpu_info, frameworks=(_torch_fw(gpu_info, float32_matmul_precision="highest", cudnn_tf32=True),))
    d = next(d for d in gl.diagnosis.diagnose(off) if d.code == "tf32")
    assert "off" in d.message and "set_float32_matmul_precision('high')" in d.fix       # torch before 2.7
    new = replace(gpu_info, frameworks=(_torch_fw(gpu_info, float32_matmul_precision="highest", cudnn_tf32=True,
                                                  tf32_api="fp32_precision"),))
    d = next(d for d in gl.diagnosis.diagnose(new) if d.code == "tf32")   # torch 2.7+: the switch 2.9 keeps
    assert "torch.backends.cuda.matmul.fp32_precision = 'tf32'" in d.fix and "set_float32" not in d.fix
    on = replace(gpu_info, frameworks=(_torch_fw(gpu_info, float32_matmul_precision="high", cudnn_tf32=True),))
    assert "is on" in next(d for d in gl.diagnosis.diagnose(on) if d.code == "tf32").message
    t4 = replace(off, gpus=(GPUInfo(0, "Tesla T4", "GPU-2", 16 * 2**30, (7, 5)),))
    assert "tf32" not in [d.code for d in gl.diagnosis.diagnose(t4)]


def test_mixed_gpus_without_a_pinned_order(fake_nvml):
    fake_nvml(machine="mixed")
    info = gl.system_info(frameworks=())
    assert info.gpu_order_ambiguous and len(info.gpus) == 2
    d = next(d for d in gl.diagnosis.diagnose(info) if d.code == "gpu-order")
    assert d.level == "warning" and "CUDA_DEVICE_ORDER=PCI_BUS_ID" in d.fix


def test_mig_slices_in_system_info_and_capabilities_from_visible_gpus_only(fake_nvml, monkeypatch):
    fake_nvml(machine="a100_mig")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-a1b2c3d4-0002-5e6f-7a8b-9c0d1e2f3a4b")
    info = gl.system_info(frameworks=())
    slices = [g for g in info.gpus if g.mig_slice]
    assert [g.name for g in slices] == ["NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA A100-SXM4-40GB MIG 2g.10gb"]
    assert [g.visible for g in slices] == [False, True] and "MIG slice" in repr(info)
    # capability flags come from the GPUs CUDA can see: a hidden A100 does not make a T4 machine bf16-capable
    t4_and_hidden_a100 = (GPUInfo(0, "Tesla T4", "GPU-t", 16 * 2**30, (7, 5)),
                          GPUInfo(1, "NVIDIA A100-SXM4-40GB", "GPU-a", 40 * 2**30, (8, 0), visible=False))
    from gpulab.system import FrameworkInfo
    caps = replace(info, gpus=t4_and_hidden_a100,
                   frameworks=(FrameworkInfo("torch", True, "2.14.1", "13.0", gpu_count=1),)).capabilities
    assert caps.device == "cuda" and not caps.bf16 and caps.fp16_tensor_cores


def test_cudnn_versions_decode_for_8_and_9():
    from gpulab.system import _cudnn_version_str

    assert _cudnn_version_str(8902) == "8.9.2" and _cudnn_version_str(90100) == "9.1.0"
    assert _cudnn_version_str(91002) == "9.10.2" and _cudnn_version_str(0) is None


def test_both_allocator_variables_are_shown(monkeypatch):
    monkeypatch.setenv("PYTORCH_ALLOC_CONF", "expandable_segments:True")
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:128")
    env = gl.system_info(frameworks=()).env
    assert env["PYTORCH_ALLOC_CONF"] == "expandable_segments:True" and "PYTORCH_CUDA_ALLOC_CONF" in env


def test_setup_on_cuda_makes_tensorflow_allocate_on_demand_once(fake_cuda, monkeypatch):
    import gpulab.session as nb

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda d: type("P", (), {"name": "Tesla T4", "total_memory": 15 * 2**30})())
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    monkeypatch.setattr(nb, "_said", set())
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)          # TF not started yet
    s = gl.setup()
    assert os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] == "true" and "Tesla T4" in s.banner
    assert any("as it needs it" in n for n in s.notes) and "as it needs it" in repr(s)
    assert gl.setup().notes == ()                                           # said once

    grown = []
    gpus = ["GPU:0"]
    fake_tf = type(sys)("tensorflow")
    fake_tf.config = type("C", (), {"list_physical_devices": staticmethod(lambda kind: gpus),
                                    "experimental": type("E", (), {"set_memory_growth": staticmethod(
                                        lambda g, on: grown.append((g, on)))})})
    monkeypatch.setitem(sys.modules, "tensorflow", fake_tf)               # TF imported before setup()
    monkeypatch.setattr(nb, "_said", set())
    assert gl.setup().notes and grown == [("GPU:0", True)]


def test_setup_on_cpu_leaves_tensorflow_alone(monkeypatch):
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    s = gl.setup()
    assert s.kind == "cpu" and s.notes == () and "TF_FORCE_GPU_ALLOW_GROWTH" not in os.environ


def test_tensorflow_probe_sees_growth_off_and_gpus_started(monkeypatch):
    """The probe against a fake TensorFlow whose GPU calls have the real ones' names and parameters."""
    import inspect

    from gpulab._tf import import_tensorflow
    from gpulab.system import _probe_tensorflow

    _needs("tensorflow")
    real_tf = import_tensorflow()   # Triton first: TensorFlow then Triton would crash this test process

    exp = real_tf.config.experimental
    real = {n: inspect.signature(getattr(exp, n)) for n in ("get_memory_growth", "set_memory_growth")}

    def get_memory_growth(device):
        return False

    def set_memory_growth(device, enable):
        raise RuntimeError("Physical devices cannot be modified after being initialized")

    for fn in (get_memory_growth, set_memory_growth):
        assert list(inspect.signature(fn).parameters) == list(real[fn.__name__].parameters)
    fake = type(sys)("tensorflow")
    fake.__version__ = real_tf.__version__
    fake.sysconfig = type("S", (), {"get_build_info": staticmethod(lambda: {"is_cuda_build": True,
                                                                           "cuda_version": "12.5.1"})})
    fake.config = type("C", (), {"list_physical_devices": staticmethod(lambda kind: ["GPU:0"]),
                                 "experimental": type("E", (), {"get_memory_growth": staticmethod(get_memory_growth),
                                                                "set_memory_growth": staticmethod(set_memory_growth)})})
    monkeypatch.setitem(sys.modules, "tensorflow", fake)
    monkeypatch.delenv("TF_FORCE_GPU_ALLOW_GROWTH", raising=False)
    fw = _probe_tensorflow()
    assert fw.gpu_count == 1 and fw.detail["memory_growth"] is False and fw.detail["gpus_started"] is True


@pytest.mark.slow
def test_setup_makes_a_later_tensorflow_import_safe_for_triton(tmp_path):
    """TensorFlow 2.20+ then Triton (torch's first optimizer or torch.compile) crashes the process
    (tensorflow/tensorflow#124205); after gl.setup() the same notebook order works."""
    _needs("triton", "tensorflow")   # found, not imported: this process must not load TensorFlow first
    use = "import torch; import triton; torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1); print('ok')"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                      timeout=180)
    safe = run(f"import gpulab as gl; gl.setup(); import tensorflow; {use}")
    assert safe.returncode == 0 and "ok" in safe.stdout, safe.stderr[-2000:]
    via_gpulab = run(f"import gpulab as gl; gl.system_info(frameworks=('tensorflow',)); {use}")
    assert via_gpulab.returncode == 0, via_gpulab.stderr[-2000:]


def _needs(*packages: str) -> None:
    import importlib.util

    missing = [p for p in packages if importlib.util.find_spec(p) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed")


def test_the_framework_probes_leave_the_callers_environment_as_it_was(monkeypatch):
    """doctor() imports TensorFlow with gpulab's quiet-log settings: none of them, nor what TensorFlow sets on import,
    stays in os.environ for the caller's child processes."""
    import os

    for k in ("TF_CPP_MIN_LOG_LEVEL", "TF_ENABLE_ONEDNN_OPTS", "KINETO_LOG_LEVEL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("GPULAB_PROBE_CANARY", "kept")
    before = dict(os.environ)
    gl.system_info(frameworks=("torch", "tensorflow"))
    assert dict(os.environ) == before
