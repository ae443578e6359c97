"""Diagnoses of a machine and its stack, each with the fix: :func:`doctor` for a notebook, :func:`diagnose` for code.

Example:
    >>> import gpulab as gl
    >>> report = gl.doctor(frameworks=("torch",))
    >>> all(d.level in ("ok", "info", "warning", "error") for d in report.diagnoses)
    True"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Iterable, Literal

from ._check import install_hint
from ._links import see
from ._format import html_table

if TYPE_CHECKING:  # pragma: no cover
    pass

from .system import SystemInfo, cuda_hidden_by_env, system_info

__all__ = ['Diagnosis', 'Report', 'diagnose', 'doctor', 'energy_diagnoses']


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
        add("info", "torch-missing", "PyTorch is not installed: timing, the CPU's ceilings and telemetry work "
            "without it (numpy); profiling, memory tools and every GPU path need it.",
            f"{install_hint('torch')}; on Linux without an NVIDIA GPU, pip install torch torchvision --index-url "
            "https://download.pytorch.org/whl/cpu takes the CPU-only build instead of several GB of CUDA libraries.")
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
                    f"for CUDA {have[0]}.x from PyTorch's index ({see('install')}).")
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
                    "pip install torch --index-url https://download.pytorch.org/whl/cu126.")
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
                    "" if on else ("torch.backends.cuda.matmul.fp32_precision = 'tf32'"
                                   if torch_fw.detail.get("tf32_api") == "fp32_precision" else
                                   "torch.set_float32_matmul_precision('high')")
                    + f" turns TF32 on ({see('tf32')}); TensorFlow uses TF32 by default on this GPU.")
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
                "Reinstall it: pip install --force-reinstall tensorflow (the version you use).")
        elif torch_fw and torch_fw.gpu_count and tf_fw.gpu_count == 0:
            cpu_pkg = tf_fw.detail.get("package") == "tensorflow-cpu"
            add("warning", "tf-no-gpu",
                f"TensorFlow {tf_fw.version} sees no GPU while torch sees {torch_fw.gpu_count}"
                + (" (the tensorflow-cpu package is installed)." if cpu_pkg else "."),
                "pip install 'tensorflow[and-cuda]' (Linux).")
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
        add("info", "no-gpu", "No GPU in use: work runs on the CPU; gl.published and gl.gpu_spec give GPU figures "
            "with their sources to set beside yours.",
            "On Colab: Runtime > Change runtime type > T4 GPU, then re-run." if info.colab else "")
        if caps.amx:
            add("ok", "cpu-bf16", "This CPU has AMX: bf16 autocast runs matrix math on tensor tiles, "
                "the CPU cousin of a GPU's tensor cores.")
        elif "avx512_bf16" in info.cpu_flags:
            add("info", "cpu-bf16", "This CPU has AVX512-BF16 instructions but no AMX: bf16 halves memory traffic, "
                "yet bf16 matmuls may run slower than fp32 here: time both (gl.machine_limits(dtypes=['float32', "
                "'bfloat16'])) before choosing.")
    elif caps.device == "cuda" and not caps.bf16:
        add("info", "no-bf16", "This GPU has no bf16 tensor cores (compute capability < 8.0): "
            "use fp16 autocast with GradScaler.")

    order = {"error": 0, "warning": 1, "info": 2, "ok": 3}
    return sorted(out, key=lambda d: order[d.level])


def energy_diagnoses(device: str, rapl: Any, gpu_counter: bool | None) -> list[Diagnosis]:
    """What energy figures this machine can give: the CPU's RAPL counters (``rapl``: a
    :class:`~gpulab.telemetry.rapl.RaplStatus`) on a CPU, NVML's energy counter on a GPU (``gpu_counter``: True, False
    when NVML answers without one, None without NVML).

    Example:
        >>> from gpulab.telemetry.rapl import rapl_zones
        >>> [d.code for d in energy_diagnoses("cpu", rapl_zones("/no/such/folder"), None)]
        ['energy-cpu']
    """
    if device == "cuda":
        if gpu_counter:
            return [Diagnosis("ok", "energy-gpu", "The GPU's energy counter (NVML) is readable: gl.benchmark, gl.timer "
                              "and gl.compare show joules per call and item.")]
        return [Diagnosis("info", "energy-gpu", "The GPU gives no energy counter (NVML has none before Volta, per "
                          "MIG slice or on some vGPUs" + ("" if gpu_counter is False else "; NVML is not available")
                          + "): energy is integrated from sampled power where NVML reports power, else not measurable.")]
    if rapl.readable:
        return [Diagnosis("ok", "energy-cpu", f"The CPU's RAPL energy counters are readable "
                          f"({', '.join(z.name for z in rapl.zones)}): tables show joules (every program on the "
                          "packages counts).")]
    fix = ("sudo chmod o+r /sys/class/powercap/intel-rapl:*/energy_uj (until the next boot)" if rapl.unreadable
           else "")
    return [Diagnosis("info", "energy-cpu", f"CPU energy is not measurable here ({rapl.cause}): tables show "
                      "'not measurable' instead of joules.", fix)]


def _energy(info: SystemInfo) -> list[Diagnosis]:
    from .telemetry import nvml
    from .telemetry.rapl import rapl_zones

    device = info.capabilities.device
    counter = None
    if device == "cuda" and nvml.status().available:
        handle = nvml.cuda_handle(0)
        counter = handle is not None and nvml.query("nvmlDeviceGetTotalEnergyConsumption", handle) is not None
    return energy_diagnoses(device, rapl_zones(), counter) if device in ("cpu", "cuda") else []


def doctor(frameworks: Iterable[str] = ("torch", "tensorflow", "dali")) -> Report:
    """Check the machine and stack; return a :class:`Report` with actionable diagnoses.

    Example:
        >>> import gpulab as gl
        >>> report = gl.doctor(frameworks=("torch",))
        >>> isinstance(report.healthy, bool)
        True
    """
    info = system_info(frameworks)
    order = {"error": 0, "warning": 1, "info": 2, "ok": 3}
    return Report(info, tuple(sorted(diagnose(info) + _energy(info), key=lambda d: order[d.level])))
