"""Which device, which stack: :func:`device`, :func:`system_info`, capability flags and :func:`doctor`.

Everything here works without torch, TensorFlow, DALI, NVML or a GPU; what is missing is
reported as missing (``None`` or ``False``), never raised.

Example:
    >>> import gpulab as gl
    >>> info = gl.system_info(frameworks=("torch",))
    >>> info.logical_cpus >= 1
    True
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.metadata as md
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Literal

from ._check import checked, cuda_hidden_by_env, install_hint
from ._format import fmt_bytes, html_table, text_table

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = ['cuda_hidden_by_env', 'device_kind', 'device', 'GPUInfo', 'FrameworkInfo', 'Capabilities', 'SystemInfo', 'system_info', 'SHOWN_ENV',
           'TF32State', 'tf32_state', 'tf32_switched']

DeviceKind = Literal["cuda", "mps", "cpu"]

# Environment variables worth showing: an allow-list, so no secret ever reaches a report.
SHOWN_ENV = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF", "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "TF_FORCE_GPU_ALLOW_GROWTH",
    "COLAB_GPU", "COLAB_RELEASE_TAG",
)
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_fp16", "amx_int8", "fma")


# ----------------------------------------------------------------------------------------------
# device choice
def device_kind() -> DeviceKind:
    """The best available device kind, ``"cuda"`` > ``"mps"`` > ``"cpu"`` (``"cpu"`` without torch).

    Example:
        >>> device_kind() in ("cuda", "mps", "cpu")
        True
    """
    try:
        import torch
    except ImportError:
        return "cpu"
    if not cuda_hidden_by_env() and torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return "cuda"
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return "mps"
    return "cpu"


def device(prefer: str | None = None) -> "torch.device":
    """The torch device work runs on: CUDA > MPS > CPU, honouring ``CUDA_VISIBLE_DEVICES``.

    ``prefer="cpu"`` (or ``"cuda:1"``) forces a choice; asking for a device that is not there
    raises ``ValueError`` saying what is available.

    Example:
        >>> import gpulab as gl
        >>> gl.device("cpu")
        device(type='cpu')
    """
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised in a no-torch venv
        raise ImportError(f"gpulab.device() needs PyTorch: {install_hint('torch')}") from e
    if prefer is None:
        kind = device_kind()
        return torch.device("cuda", torch.cuda.current_device()) if kind == "cuda" else torch.device(kind)
    if not isinstance(prefer, str):
        raise TypeError(f"prefer must be a device string like 'cpu' or 'cuda:0', not {type(prefer).__name__}")
    try:
        dev = torch.device(prefer)
    except RuntimeError as e:
        raise ValueError(f"unknown device {prefer!r}: use 'cpu', 'cuda', 'cuda:N' or 'mps'") from e
    available = device_kind()
    if dev.type == "cuda":
        if available != "cuda":
            raise ValueError(f"device {prefer!r} requested but CUDA is not available here "
                             f"(best device: {available}); run gl.doctor() to see why")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"device {prefer!r} requested but only {torch.cuda.device_count()} GPU(s) are visible")
    elif dev.type == "mps" and available != "mps":
        raise ValueError(f"device {prefer!r} requested but MPS is not available here (best device: {available})")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device type {dev.type!r} is not supported by gpulab: use 'cpu', 'cuda' or 'mps'")
    return dev


# TF32: read and set in gpulab._tf32 (the one place), re-exported here
from ._tf32 import TF32State, _tf32_switches, tf32_state, tf32_switched  # noqa: E402,F401

# ----------------------------------------------------------------------------------------------
# facts
@dataclass(frozen=True)
class GPUInfo:
    """One GPU as NVML and/or torch see it."""

    index: int
    name: str
    uuid: str | None = None
    memory_total_bytes: int | None = None
    compute_capability: tuple[int, int] | None = None
    source: Literal["nvml", "torch"] = "nvml"
    visible: bool = True          # CUDA processes see it (CUDA_VISIBLE_DEVICES, one MIG slice per process)
    mig_slice: bool = False       # a MIG slice (``MIG-…`` UUID), not a whole card


@dataclass(frozen=True)
class FrameworkInfo:
    """A framework's version and what it sees. ``installed=False`` when absent."""

    name: str
    installed: bool
    version: str | None = None
    cuda_build: str | None = None     # CUDA version the build targets; None for a CPU-only build
    cudnn: str | None = None
    gpu_count: int | None = 0         # None when the framework cannot tell
    error: str | None = None          # why probing failed or the GPU is not usable, if known
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Capabilities:
    """Flags the notebooks branch on, derived once from :class:`SystemInfo`."""

    device: DeviceKind
    gpu_count: int
    multi_gpu: bool
    bf16: bool                 # bf16 matmuls beat fp32 (Ampere+ GPU, Apple GPU, or a CPU with AMX)
    fp16_tensor_cores: bool    # Volta+ GPU: fp16 autocast + GradScaler pays off
    tf32: bool                 # Ampere+ GPU: TF32 tensor cores for fp32 matmuls
    fp8: bool                  # Ada/Hopper+ GPU
    amx: bool                  # Intel AMX tiles on this CPU
    nccl: bool                 # torch.distributed can use NCCL (several CUDA processes)
    gloo: bool


@dataclass(frozen=True)
class SystemInfo:
    """A snapshot of the machine and the ML stack, taken at ``captured_at``."""

    captured_at: str
    python: str
    os: str
    cpu_model: str
    physical_cores: int | None
    logical_cpus: int
    cpu_flags: tuple[str, ...]
    ram_bytes: int | None
    torch_threads: int | None
    gpus: tuple[GPUInfo, ...]
    nvml_available: bool
    nvml_error: str | None
    driver_version: str | None
    cuda_driver_version: int | None   # what the driver supports, e.g. 12040
    frameworks: tuple[FrameworkInfo, ...]
    env: dict[str, str]
    colab: bool
    gpu_order_ambiguous: bool = False      # CUDA's order of the GPUs may differ from nvidia-smi's
    gpu_order_notes: tuple[str, ...] = ()  # why, and which MIG slice CUDA uses

    def framework(self, name: str) -> FrameworkInfo | None:
        """The :class:`FrameworkInfo` called ``name`` ("torch", "tensorflow", "dali"), if probed."""
        return next((f for f in self.frameworks if f.name == name), None)

    @property
    def capabilities(self) -> Capabilities:
        """The capability flags lessons branch on."""
        torch_fw = self.framework("torch")
        torch_gpus = torch_fw.gpu_count if torch_fw and torch_fw.installed else 0
        kind: DeviceKind = "cuda" if torch_gpus else ("mps" if torch_fw and torch_fw.detail.get("mps") else "cpu")
        ccs = [g.compute_capability for g in self.gpus if g.compute_capability and g.visible]
        cc = min(ccs) if ccs and kind == "cuda" else None
        amx = "amx_bf16" in self.cpu_flags or "amx_tile" in self.cpu_flags
        return Capabilities(
            device=kind,
            gpu_count=torch_gpus,
            multi_gpu=torch_gpus >= 2,
            bf16=(cc is not None and cc >= (8, 0)) if kind == "cuda" else (kind == "mps" or amx),
            fp16_tensor_cores=cc is not None and cc >= (7, 0),
            tf32=cc is not None and cc >= (8, 0),
            fp8=cc is not None and cc >= (8, 9),
            amx=amx,
            nccl=bool(torch_fw and torch_fw.detail.get("nccl")) and kind == "cuda",
            gloo=bool(torch_fw and torch_fw.detail.get("gloo")),
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (capabilities included)."""
        d = asdict(self)
        d["capabilities"] = asdict(self.capabilities)
        return d

    def _rows(self) -> list[tuple[str, str]]:
        rows = [
            ("Python", f"{self.python} on {self.os}"),
            ("CPU", f"{self.cpu_model} ({self.physical_cores or '?'} cores, {self.logical_cpus} threads)"),
            ("CPU features", ", ".join(f for f in self.cpu_flags if f != "fma") or "none of note"),
            ("RAM", fmt_bytes(self.ram_bytes)),
        ]
        if self.nvml_available:
            rows.append(("NVIDIA driver", f"{self.driver_version} (supports CUDA {_cuda_str(self.cuda_driver_version)})"))
        else:
            rows.append(("NVML", f"not available: {self.nvml_error}"))
        for g in self.gpus:
            cc = ".".join(map(str, g.compute_capability)) if g.compute_capability else "?"
            what = "MIG slice" if g.mig_slice else f"GPU {g.index}"
            rows.append((what, f"{g.name}, {fmt_bytes(g.memory_total_bytes)}, compute capability {cc}"
                         + ("" if g.visible else " (not visible to CUDA here)")))
        for f in self.frameworks:
            if not f.installed:
                rows.append((f.name, "not installed"))
                continue
            build = f"CUDA {f.cuda_build}" if f.cuda_build else "CPU-only build"
            extra = f", cuDNN {f.cudnn}" if f.cudnn else ""
            sees = "" if f.gpu_count is None else f"; sees {f.gpu_count} GPU(s)"
            rows.append((f.name, f"{f.version} ({build}{extra}){sees}"))
        caps = self.capabilities
        flags = [k for k, v in asdict(caps).items() if v is True]
        rows.append(("Capabilities", f"device={caps.device}; " + (", ".join(flags) or "none")))
        for k, v in self.env.items():
            rows.append((k, repr(v)))
        return rows

    def __repr__(self) -> str:
        return "SystemInfo\n" + text_table(("item", "value"), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("item", "value"), self._rows(), caption=f"System ({self.captured_at})")


def _cuda_str(v: int | None) -> str:
    return "?" if v is None else f"{v // 1000}.{(v % 1000) // 10}"


def _cpu_model_and_flags() -> tuple[str, tuple[str, ...]]:
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key = key.strip()
                if key == "model name" and model in ("", platform.machine(), platform.processor()):
                    model = val.strip()
                elif key in ("flags", "Features") and not flags:
                    flags = set(val.split())
    except OSError:
        if sys.platform == "darwin":
            model = platform.processor() or "Apple"
    try:  # cpuid through torch, when present: hypervisors sometimes hide flags from /proc/cpuinfo
        import torch.cpu as tcpu

        for name, probe in (("amx_tile", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported"),
                            ("amx_fp16", "_is_amx_fp16_supported")):
            if getattr(tcpu, probe, lambda: False)():
                flags.add(name)
    except ImportError:
        pass
    return model, tuple(f for f in _CPU_FLAGS if f in flags)


def _dist_version(*names: str) -> str | None:
    for n in names:
        try:
            return md.version(n)
        except md.PackageNotFoundError:
            continue
    return None


def _cudnn_version_str(v: int | None) -> str | None:
    """cuDNN's version number as text: 90100 -> "9.1.0" (cuDNN 9+: major*10000), 8902 -> "8.9.2" (cuDNN 8:
    major*1000 + minor*100 + patch).

    Example:
        >>> _cudnn_version_str(90100), _cudnn_version_str(8902), _cudnn_version_str(None)
        ('9.1.0', '8.9.2', None)
    """
    if not v:
        return None
    if v >= 10000:
        return f"{v // 10000}.{(v % 10000) // 100}.{v % 100}"
    return f"{v // 1000}.{(v % 1000) // 100}.{v % 100}"


def _probe_torch() -> FrameworkInfo:
    try:
        import torch
    except ImportError:
        return FrameworkInfo("torch", installed=False)
    import warnings

    err = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            count = torch.cuda.device_count() if torch.cuda.is_available() and not cuda_hidden_by_env() else 0
        except Exception as e:  # a broken driver makes CUDA calls raise
            count, err = 0, str(e)
    if caught and err is None and torch.version.cuda and count == 0:
        err = str(caught[0].message).strip().splitlines()[0]
    cudnn = None
    if torch.version.cuda and count:
        try:
            cudnn = _cudnn_version_str(torch.backends.cudnn.version())
        except Exception:
            cudnn = None
    dist = torch.distributed
    mps = getattr(torch.backends, "mps", None)
    detail = {
        "mps": bool(mps is not None and mps.is_available()),
        "nccl": bool(dist.is_available() and dist.is_nccl_available()),
        "gloo": bool(dist.is_available() and dist.is_gloo_available()),
        "hip": getattr(torch.version, "hip", None),
        "devices": [torch.cuda.get_device_name(i) for i in range(count)],
        "arch_list": list(torch.cuda.get_arch_list()) if count else [],   # kernels this wheel carries
    }
    with contextlib.suppress(RuntimeError):   # set through both of torch's TF32 APIs: torch refuses to say
        t = tf32_state(torch)
        detail.update({"float32_matmul_precision": "high" if t.matmul else "highest", "matmul_tf32": t.matmul,
                       "cudnn_tf32": t.cudnn, "tf32_api": t.api})
    return FrameworkInfo("torch", True, torch.__version__, torch.version.cuda, cudnn, count, err, detail)


def _probe_tensorflow() -> FrameworkInfo:
    version = _dist_version("tensorflow", "tensorflow-cpu", "tf-nightly")
    if version is None:
        return FrameworkInfo("tensorflow", installed=False)
    from ._tf import QUIET_ENV

    for k, v in QUIET_ENV.items():
        os.environ.setdefault(k, v)
    try:
        from ._tf import import_tensorflow

        tf = import_tensorflow()

        build = tf.sysconfig.get_build_info()
        gpus = tf.config.list_physical_devices("GPU")
    except Exception as e:
        return FrameworkInfo("tensorflow", True, version, error=f"import failed: {e}")
    package = "tensorflow-cpu" if _dist_version("tensorflow-cpu") else "tensorflow"
    cuda = build.get("cuda_version") if build.get("is_cuda_build") else None
    growth = started = None
    if gpus:   # TF takes (nearly) all of every GPU's memory at start-up unless memory growth is on
        try:
            growth = os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true" or \
                all(tf.config.experimental.get_memory_growth(g) for g in gpus)
        except Exception:
            growth = None
        try:   # setting a GPU's growth to the value it has changes nothing, but raises once TF has started it
            g0 = gpus[0]
            tf.config.experimental.set_memory_growth(g0, tf.config.experimental.get_memory_growth(g0))
            started = False
        except RuntimeError:
            started = True
        except Exception:
            started = None
    return FrameworkInfo("tensorflow", True, tf.__version__, cuda, build.get("cudnn_version"), len(gpus),
                         detail={"package": package, "memory_growth": growth, "gpus_started": started})


def _probe_dali() -> FrameworkInfo:
    version = _dist_version("nvidia-dali-cuda120", "nvidia-dali-cuda130", "nvidia-dali-cuda110", "nvidia-dali")
    if version is None:
        return FrameworkInfo("dali", installed=False)
    cuda = None
    for n in ("cuda130", "cuda120", "cuda110"):
        if _dist_version(f"nvidia-dali-{n}"):
            cuda = f"{n[4:-1]}.x"
            break
    return FrameworkInfo("dali", True, version, cuda, gpu_count=None,
                         detail={"gpu_ops": "need a CUDA GPU; CPU pipelines use device_id=None"})


_PROBES = {"torch": _probe_torch, "tensorflow": _probe_tensorflow, "dali": _probe_dali}


@contextlib.contextmanager
def _environ_kept() -> Iterator[None]:
    """``os.environ`` as it was before the block, after it: variables the block set are removed, changed ones
    restored (child processes of the caller inherit nothing a probe set)."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        for k in set(os.environ) - set(saved):
            del os.environ[k]
        for k, v in saved.items():
            if os.environ.get(k) != v:
                os.environ[k] = v


def system_info(frameworks: Iterable[str] = ("torch", "tensorflow", "dali")) -> SystemInfo:
    """Take a :class:`SystemInfo` snapshot. ``frameworks`` picks what to probe (TF import costs ~4 s).

    Example:
        >>> import gpulab as gl
        >>> gl.system_info(frameworks=()).logical_cpus >= 1
        True
    """
    from ._check import texts

    frameworks = texts("frameworks", frameworks, sorted(_PROBES))
    import psutil

    from .telemetry import nvml

    env = {k: os.environ[k] for k in SHOWN_ENV if k in os.environ}  # before probes set any
    st = nvml.status()
    with _environ_kept():          # the probes' quiet-log settings and what TensorFlow sets on import stay here
        fws = tuple(_PROBES[f]() for f in frameworks)
    order = nvml.device_order()        # after the probes: torch's UUIDs, when CUDA is up, make it exact
    seen = {d.uuid for d in order.devices}
    gpus: list[GPUInfo] = []
    for d in nvml.devices():
        gpus.append(GPUInfo(d.index, d.name, d.uuid, d.memory_total_bytes, d.compute_capability, "nvml",
                            visible=d.uuid in seen))
        for sl in nvml.mig_devices(d):
            gpus.append(GPUInfo(sl.index, sl.name, sl.uuid, sl.memory_total_bytes, sl.compute_capability, "nvml",
                                visible=sl.uuid in seen, mig_slice=True))
    torch_fw = next((f for f in fws if f.name == "torch"), None)
    if not gpus and torch_fw and torch_fw.gpu_count:  # e.g. NVML blocked in a container
        import torch

        for i in range(torch_fw.gpu_count):
            p = torch.cuda.get_device_properties(i)
            gpus.append(GPUInfo(i, p.name, str(getattr(p, "uuid", "")) or None, int(p.total_memory),
                                (p.major, p.minor), "torch"))
    model, flags = _cpu_model_and_flags()
    threads = None
    if torch_fw and torch_fw.installed:
        import torch

        threads = torch.get_num_threads()
    return SystemInfo(
        captured_at=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        python=platform.python_version(),
        os=f"{platform.system()} {platform.release()} ({platform.machine()})",
        cpu_model=model,
        physical_cores=psutil.cpu_count(logical=False),
        logical_cpus=psutil.cpu_count(logical=True) or os.cpu_count() or 1,
        cpu_flags=flags,
        ram_bytes=int(psutil.virtual_memory().total),
        torch_threads=threads,
        gpus=tuple(gpus),
        nvml_available=st.available,
        nvml_error=st.error,
        driver_version=st.driver_version,
        cuda_driver_version=st.cuda_driver_version,
        frameworks=fws,
        env=env,
        colab="google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ,
        gpu_order_ambiguous=order.ambiguous,
        gpu_order_notes=order.notes,
    )
