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

import datetime as _dt
import importlib
import importlib.metadata as md
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Literal

from ._format import fmt_bytes, html_table, text_table

if TYPE_CHECKING:  # pragma: no cover
    import torch

__all__ = [
    "device", "device_kind", "cuda_hidden_by_env", "GPUInfo", "FrameworkInfo", "Capabilities",
    "SystemInfo", "system_info", "Diagnosis", "Report", "diagnose", "doctor",
]

DeviceKind = Literal["cuda", "mps", "cpu"]

# Environment variables worth showing: an allow-list, so no secret ever reaches a report.
SHOWN_ENV = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF", "NVIDIA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TF_CPP_MIN_LOG_LEVEL", "TF_FORCE_GPU_ALLOW_GROWTH",
    "COLAB_GPU", "COLAB_RELEASE_TAG",
)
_CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "fma")


# ----------------------------------------------------------------------------------------------
# device choice
def cuda_hidden_by_env(env: dict[str, str] | None = None) -> bool:
    """True when ``CUDA_VISIBLE_DEVICES`` is set to a value that hides every GPU ("", "-1", "none")."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" not in env:
        return False
    v = env["CUDA_VISIBLE_DEVICES"].strip().lower()
    return v in ("", "-1", "none", "nodevfiles") or v.startswith("-")


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
    """The torch device lessons run on: CUDA > MPS > CPU, honouring ``CUDA_VISIBLE_DEVICES``.

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
        raise ImportError("gpulab.device() needs PyTorch: pip install 'gpulab[torch]'") from e
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

        for name, probe in (("amx_tile", "_is_amx_tile_supported"), ("avx512_bf16", "_is_avx512_bf16_supported")):
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
        "float32_matmul_precision": torch.get_float32_matmul_precision(),  # "highest": TF32 off for matmuls
        "cudnn_tf32": bool(torch.backends.cudnn.allow_tf32),
    }
    return FrameworkInfo("torch", True, torch.__version__, torch.version.cuda, cudnn, count, err, detail)


def _probe_tensorflow() -> FrameworkInfo:
    version = _dist_version("tensorflow", "tensorflow-cpu", "tf-nightly")
    if version is None:
        return FrameworkInfo("tensorflow", installed=False)
    from .notebook import QUIET_ENV

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


def system_info(frameworks: Iterable[str] = ("torch", "tensorflow", "dali")) -> SystemInfo:
    """Take a :class:`SystemInfo` snapshot. ``frameworks`` picks what to probe (TF import costs ~4 s).

    Example:
        >>> import gpulab as gl
        >>> gl.system_info(frameworks=()).logical_cpus >= 1
        True
    """
    frameworks = tuple(frameworks)
    unknown = [f for f in frameworks if f not in _PROBES]
    if unknown:
        raise ValueError(f"unknown framework(s) {unknown}: choose from {sorted(_PROBES)}")
    import psutil

    from .telemetry import nvml

    env = {k: os.environ[k] for k in SHOWN_ENV if k in os.environ}  # before probes set any
    st = nvml.status()
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


# ----------------------------------------------------------------------------------------------
# diagnosis
Level = Literal["ok", "info", "warning", "error"]
_MARK = {"ok": "[ok]", "info": "[i]", "warning": "[!]", "error": "[x]"}


@dataclass(frozen=True)
class Diagnosis:
    """One finding: what is true, and what to do about it (``fix`` is empty when nothing is needed)."""

    level: Level
    code: str
    message: str
    fix: str = ""


@dataclass(frozen=True)
class Report:
    """What :func:`doctor` found: the system snapshot and its diagnoses, worst first."""

    system: SystemInfo
    diagnoses: tuple[Diagnosis, ...]

    @property
    def healthy(self) -> bool:
        """No diagnosis at level ``error``."""
        return not any(d.level == "error" for d in self.diagnoses)

    def codes(self) -> list[str]:
        """The diagnosis codes, e.g. ``["nvml-missing", "no-gpu"]``."""
        return [d.code for d in self.diagnoses]

    def to_dict(self) -> dict[str, Any]:
        return {"healthy": self.healthy, "system": self.system.to_dict(),
                "diagnoses": [asdict(d) for d in self.diagnoses]}

    def __repr__(self) -> str:
        head = f"gpulab doctor: {'healthy' if self.healthy else 'PROBLEMS FOUND'}"
        lines = [head, repr(self.system), "", "Diagnoses"]
        for d in self.diagnoses:
            lines.append(f"{_MARK[d.level]} {d.message}")
            if d.fix:
                lines.append(f"    fix: {d.fix}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        rows = [(_MARK[d.level], d.message, d.fix) for d in self.diagnoses]
        verdict = "healthy" if self.healthy else "problems found"
        return (self.system._repr_html_()
                + html_table(("", "diagnosis", "what to do"), rows, caption=f"gpulab doctor: {verdict}"))


def _version_tuple(v: str | None) -> tuple[int, int] | None:
    try:
        major, minor = (v or "").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        return None


def _has_kernels(arch_list: list[str], cc: tuple[int, int]) -> bool:
    """Can a wheel built for ``arch_list`` (``torch.cuda.get_arch_list()``) run on compute capability ``cc``?
    A cubin ``sm_XY`` runs on the same major version with minor >= Y; PTX ``compute_XY`` is compiled by the
    driver for any newer GPU."""
    for a in arch_list:
        kind, _, num = a.partition("_")
        digits = "".join(ch for ch in num if ch.isdigit())      # "90a" -> "90", "120" -> "120"
        if len(digits) < 2:
            continue
        major, minor = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and major == cc[0] and minor <= cc[1]:
            return True
        if kind == "compute" and (major, minor) <= cc:
            return True
    return False


def diagnose(info: SystemInfo) -> list[Diagnosis]:
    """Turn a :class:`SystemInfo` into actionable findings (pure: testable on fabricated values)."""
    out: list[Diagnosis] = []
    add = lambda *a: out.append(Diagnosis(*a))
    torch_fw, tf_fw = info.framework("torch"), info.framework("tensorflow")
    nv_gpus = [g for g in info.gpus if g.source == "nvml" and not g.mig_slice]
    cvd = info.env.get("CUDA_VISIBLE_DEVICES")
    hidden = cuda_hidden_by_env(info.env)

    if not info.nvml_available:
        add("info", "nvml-missing", f"NVML not found ({info.nvml_error}): GPU telemetry off, host metrics only.",
            "" if not info.gpus else "Install the NVIDIA driver's NVML library (libnvidia-ml.so) for GPU telemetry.")
    if hidden:
        add("error" if nv_gpus else "warning", "cuda-visible-devices-hides-all",
            f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU"
            + (f" (the driver sees {len(nv_gpus)})." if nv_gpus else "."),
            "Unset it (os.environ.pop('CUDA_VISIBLE_DEVICES') before importing torch, then restart the kernel) "
            "or set it to the GPU indices to use, e.g. '0'.")
    elif cvd and nv_gpus:
        wanted = [t.strip() for t in cvd.split(",") if t.strip()]
        bad = [t for t in wanted if t.isdigit() and int(t) >= len(nv_gpus)]
        if bad:
            add("error", "cuda-visible-devices-invalid",
                f"CUDA_VISIBLE_DEVICES={cvd!r} names GPU index {', '.join(bad)} but the driver sees only "
                f"{len(nv_gpus)} GPU(s); CUDA stops at the first invalid entry.",
                f"Use indices 0..{len(nv_gpus) - 1} or GPU UUIDs (nvidia-smi -L).")

    if torch_fw is None or not torch_fw.installed:
        add("info", "torch-missing", "PyTorch is not installed: the lessons need it.",
            "pip install 'gpulab[torch]' (or run `make lab`, which installs the course stack).")
    else:
        if torch_fw.cuda_build is None and not torch_fw.detail.get("hip"):
            if nv_gpus:
                add("error", "torch-cpu-build",
                    f"torch {torch_fw.version} is a CPU-only build but this machine has {len(nv_gpus)} NVIDIA GPU(s).",
                    "Install a CUDA build: pip install torch --index-url https://download.pytorch.org/whl/cu126 "
                    "(pick the CUDA version your driver supports; see pytorch.org/get-started).")
            else:
                add("info", "torch-cpu-build", f"torch {torch_fw.version} is a CPU-only build (fine without a GPU).")
        drv, need = info.cuda_driver_version, _version_tuple(torch_fw.cuda_build)
        if drv is not None and need is not None:
            have = (drv // 1000, (drv % 1000) // 10)
            if have[0] < need[0]:
                add("error", "driver-too-old",
                    f"The NVIDIA driver {info.driver_version} supports CUDA up to {have[0]}.{have[1]}, "
                    f"but torch {torch_fw.version} was built for CUDA {torch_fw.cuda_build}"
                    + (" (CUDA 13 wheels need an R580 or newer driver)." if need[0] >= 13 else "."),
                    f"Update the driver to one supporting CUDA {need[0]}.{need[1]}, or install the same torch built "
                    f"for CUDA {have[0]}.x from PyTorch's index (`make lab` picks the wheel from the driver).")
            elif have < need:
                add("warning", "driver-older-minor",
                    f"The driver supports CUDA {have[0]}.{have[1]}; torch was built for {torch_fw.cuda_build}. "
                    "CUDA minor-version compatibility usually makes this work, but PTX JIT and some new "
                    "features may fail.",
                    "Update the NVIDIA driver when you can.")
        if nv_gpus and not hidden and torch_fw.cuda_build and torch_fw.gpu_count == 0 \
                and not any(d.code == "driver-too-old" for d in out):
            add("error", "torch-no-cuda",
                f"The driver sees {len(nv_gpus)} GPU(s) but torch cannot use CUDA"
                + (f": {torch_fw.error}" if torch_fw.error else "."),
                "Restart the kernel (a forked process or an earlier CUDA error can break CUDA), check "
                "`nvidia-smi`, and compare the driver's CUDA version with torch.version.cuda.")
        arch = torch_fw.detail.get("arch_list") or []
        for g in {g.compute_capability: g for g in info.gpus if g.visible and g.compute_capability}.values():
            if arch and not _has_kernels(arch, g.compute_capability):
                cc = ".".join(map(str, g.compute_capability))
                add("error", "no-kernels-for-gpu",
                    f"torch {torch_fw.version} carries kernels for {', '.join(arch)} but not for the {g.name} "
                    f"(compute capability {cc}): CUDA calls will fail with 'no kernel image is available'.",
                    "Install the same torch built for CUDA 12.6 (it still includes Volta and Pascal): "
                    "pip install torch --index-url https://download.pytorch.org/whl/cu126 - `make lab` does "
                    "this when it sees such a GPU.")
        if torch_fw.gpu_count:
            names = ", ".join(torch_fw.detail.get("devices", [])) or f"{torch_fw.gpu_count} GPU(s)"
            add("ok", "torch-cuda", f"torch sees {torch_fw.gpu_count} GPU(s): {names}.")
            precision = torch_fw.detail.get("float32_matmul_precision")
            ccs = [g.compute_capability for g in info.gpus if g.visible and g.compute_capability]
            if precision and ccs and min(ccs) >= (8, 0):
                on = precision != "highest"
                add("info", "tf32",
                    f"TF32 for fp32 matmuls is {'on' if on else 'off'} in torch "
                    f"(float32_matmul_precision={precision!r}; cuDNN convolutions "
                    f"{'use' if torch_fw.detail.get('cudnn_tf32') else 'do not use'} TF32). "
                    + ("fp32 matmuls run on tensor cores with a 10-bit mantissa." if on else
                       "fp32 matmuls run at full fp32 precision and speed."),
                    "" if on else "torch.set_float32_matmul_precision('high') turns TF32 on (lesson 04 measures it); "
                    "TensorFlow uses TF32 by default on this GPU.")
        elif torch_fw.detail.get("mps"):
            add("ok", "torch-mps", "torch uses Apple's GPU through MPS.")
        if info.torch_threads is not None and info.torch_threads < max(1, (info.physical_cores or 1)):
            add("warning", "few-threads",
                f"torch uses {info.torch_threads} thread(s) but this CPU has {info.physical_cores} cores: "
                "CPU figures will be low.",
                "Unset OMP_NUM_THREADS / MKL_NUM_THREADS or call torch.set_num_threads().")

    if tf_fw is not None and tf_fw.installed:
        if tf_fw.error:
            add("warning", "tf-broken", f"TensorFlow is installed but failed to load: {tf_fw.error}",
                "Reinstall it: `make lab` re-creates the course environment.")
        elif torch_fw and torch_fw.gpu_count and tf_fw.gpu_count == 0:
            cpu_pkg = tf_fw.detail.get("package") == "tensorflow-cpu"
            add("warning", "tf-no-gpu",
                f"TensorFlow {tf_fw.version} sees no GPU while torch sees {torch_fw.gpu_count}"
                + (" (the tensorflow-cpu package is installed)." if cpu_pkg else "."),
                "pip install 'tensorflow[and-cuda]' (Linux) - `make lab` does this on a GPU machine.")
        elif tf_fw.gpu_count:
            add("ok", "tf-gpu", f"TensorFlow sees {tf_fw.gpu_count} GPU(s).")
            if tf_fw.detail.get("memory_growth") is False and tf_fw.detail.get("gpus_started"):
                add("error", "tf-grabbed-memory",
                    "TensorFlow has started its GPUs without memory growth: it holds nearly all of their memory, "
                    "and PyTorch (or a second notebook) on the same card will run out of memory.",
                    "Restart the kernel and call gl.setup() before importing TensorFlow (it sets "
                    "TF_FORCE_GPU_ALLOW_GROWTH=true).")
            elif tf_fw.detail.get("memory_growth") is False:
                add("warning", "tf-grabs-memory",
                    "TensorFlow will reserve nearly all memory of every GPU the first time it runs on one, "
                    "leaving none for PyTorch (or a second notebook) on the same card.",
                    "Call gl.setup() before importing TensorFlow (it sets TF_FORCE_GPU_ALLOW_GROWTH=true), or "
                    "tf.config.experimental.set_memory_growth(gpu, True) for each GPU before using it; if TF "
                    "already ran, restart the kernel.")

    if info.gpu_order_ambiguous or info.gpu_order_notes:
        add("warning" if info.gpu_order_ambiguous else "info", "gpu-order",
            " ".join(info.gpu_order_notes) or "CUDA's GPU order may differ from nvidia-smi's.",
            "export CUDA_DEVICE_ORDER=PCI_BUS_ID (before Python starts, or before importing torch) so CUDA and "
            "nvidia-smi number the GPUs alike; pick a MIG slice with CUDA_VISIBLE_DEVICES=MIG-<uuid>."
            if info.gpu_order_ambiguous else "")

    caps = info.capabilities
    if caps.device == "cpu":
        add("info", "no-gpu", "No GPU in use: lessons run in CPU mode with reduced sizes and show published GPU "
            "figures beside yours.",
            "On Colab: Runtime > Change runtime type > T4 GPU, then re-run." if info.colab else "")
        if caps.amx:
            add("ok", "cpu-bf16", "This CPU has AMX: bf16 autocast runs matrix math on tensor tiles, "
                "the CPU cousin of a GPU's tensor cores.")
        elif "avx512_bf16" in info.cpu_flags:
            add("info", "cpu-bf16", "This CPU has AVX512-BF16 instructions but no AMX: bf16 halves memory traffic, "
                "yet bf16 matmuls may run slower than fp32 here - lesson 04 measures it.")
    elif caps.device == "cuda" and not caps.bf16:
        add("info", "no-bf16", "This GPU has no bf16 tensor cores (compute capability < 8.0): "
            "use fp16 autocast with GradScaler.")

    order = {"error": 0, "warning": 1, "info": 2, "ok": 3}
    return sorted(out, key=lambda d: order[d.level])


def doctor(frameworks: Iterable[str] = ("torch", "tensorflow", "dali")) -> Report:
    """Check the machine and stack; return a :class:`Report` with actionable diagnoses.

    Example:
        >>> import gpulab as gl
        >>> report = gl.doctor(frameworks=("torch",))
        >>> isinstance(report.healthy, bool)
        True
    """
    info = system_info(frameworks)
    return Report(info, tuple(diagnose(info)))
