"""The stack a GPU runtime has, before a class: the GPU(s), driver and CUDA, the ML stack's versions, nvcc against
torch's CUDA major, and what each missing package costs (which lessons' sections skip).

Example:
    >>> from gpulab.preflight import environment
    >>> env = environment(probe_frameworks=False)
    >>> any(p.name == "torch" for p in env.packages)
    True
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

from .._check import PACKAGES as EXTRA_PACKAGES
from .._format import fmt_bytes, html_table, text_table
from ..system import SystemInfo, system_info

__all__ = ["Package", "Environment", "environment", "nvcc_version", "OPTIONAL"]


@dataclass(frozen=True)
class Package:
    """One package the course can use: installed or not, its version, and what its absence costs."""

    name: str                 # the import name ("nvidia.dali")
    dist: str                 # what pip installs
    installed: bool
    version: str | None
    used_by: str              # the lessons' sections that need it
    install: str              # the pip line that adds it

    @property
    def status(self) -> str:
        return (self.version or "installed") if self.installed else "missing"


# import name, pip distribution(s) to look up the version of, the sections that need it, the install line
OPTIONAL: tuple[tuple[str, tuple[str, ...], str, str], ...] = (
    ("torch", ("torch",), "every PyTorch path (all lessons)", f"pip install {EXTRA_PACKAGES['torch']}"),
    ("torchvision", ("torchvision",), "image sets and transforms (lessons 06, 12)", "pip install torchvision"),
    ("triton", ("triton",), "torch.compile on a GPU (lessons 10, 12), Triton kernels (lesson 11)", "pip install triton"),
    ("numba", ("numba-cuda", "numba"), "Numba CUDA kernels (lesson 11)",
     "pip install 'numba-cuda[cu13]' (cu12 for a CUDA 12 torch)"),
    ("pynvml", ("nvidia-ml-py",), "GPU telemetry: gl.Monitor's GPU columns, memory reconciliation (lessons 01, 08, 09)",
     "pip install nvidia-ml-py"),
    ("tensorflow", ("tensorflow", "tensorflow-cpu"), "the TensorFlow/Keras sections (lessons 01-08, 10, 12)",
     f"pip install {EXTRA_PACKAGES['tensorflow']}"),
    ("nvidia.dali", ("nvidia-dali-cuda130", "nvidia-dali-cuda120", "nvidia-dali-cuda110"),
     "the DALI pipeline (lesson 06)", f"pip install {EXTRA_PACKAGES['dali']}"),
    ("onnxruntime", ("onnxruntime-gpu", "onnxruntime"), "ONNX Runtime inference (lesson 10)",
     f"pip install {EXTRA_PACKAGES['onnx']}"),
    ("onnx", ("onnx",), "exporting to ONNX (lesson 10)", f"pip install {EXTRA_PACKAGES['onnx']}"),
    ("onnxscript", ("onnxscript",), "exporting to ONNX with torch's dynamo exporter (lesson 10)",
     f"pip install {EXTRA_PACKAGES['onnx']}"),
    ("mlflow", ("mlflow", "mlflow-skinny"), "experiment tracking to MLflow (lesson 12)",
     f"pip install {EXTRA_PACKAGES['tracking']}"),
    ("tensorboard", ("tensorboard",), "TensorBoard logs (lessons 08, 12)", "pip install tensorboard"),
    ("nbclient", ("nbclient",), "running the notebooks in this check", "pip install nbclient ipykernel"),
    ("ipykernel", ("ipykernel",), "running the notebooks in this check", "pip install nbclient ipykernel"),
)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):        # a parent package that is missing, or a broken one
        return False


def _version(dists: tuple[str, ...]) -> tuple[str, str | None]:
    """(the distribution installed, its version), or (the first one named, None)."""
    for d in dists:
        try:
            return d, importlib.metadata.version(d)
        except importlib.metadata.PackageNotFoundError:
            continue
    return dists[0], None


def nvcc_version(nvcc: str | None = None) -> tuple[str | None, str | None]:
    """``(path, "13.0")``: the nvcc a C++/CUDA extension would build with (``$CUDA_HOME/bin``, else ``PATH``, else
    ``/usr/local/cuda/bin``, as torch looks) and the CUDA release it reports; ``(None, None)`` without one."""
    from ..kernels.extension import _nvcc_release, _nvcc_version_text

    if nvcc is None:
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
        candidates = [os.path.join(home, "bin", "nvcc")] if home else []
        candidates += [shutil.which("nvcc") or "", "/usr/local/cuda/bin/nvcc"]
        nvcc = next((c for c in candidates if c and os.path.exists(c)), None)
    if nvcc is None:
        return None, None
    return nvcc, _nvcc_release(_nvcc_version_text(nvcc))


@dataclass(frozen=True)
class Environment:
    """The machine and the stack a class will run on (:func:`environment`)."""

    system: SystemInfo | None
    packages: tuple[Package, ...]
    nvcc: str | None
    nvcc_cuda: str | None
    torch_cuda: str | None
    notes: tuple[str, ...] = field(default=())

    @property
    def gpus(self) -> int:
        """The GPUs torch can use here (0 without torch or CUDA)."""
        return 0 if self.system is None else self.system.capabilities.gpu_count

    @property
    def missing(self) -> tuple[Package, ...]:
        return tuple(p for p in self.packages if not p.installed)

    def to_dict(self) -> dict[str, Any]:
        return {"system": None if self.system is None else self.system.to_dict(),
                "packages": [asdict(p) for p in self.packages], "nvcc": self.nvcc, "nvcc_cuda": self.nvcc_cuda,
                "torch_cuda": self.torch_cuda, "gpus": self.gpus, "notes": list(self.notes)}

    def machine_rows(self) -> list[tuple[str, str]]:
        """What a teacher needs to know about the machine, as (item, value) rows."""
        rows: list[tuple[str, str]] = []
        s = self.system
        if s is not None:
            rows.append(("CPU", f"{s.cpu_model} ({s.logical_cpus} threads), RAM {fmt_bytes(s.ram_bytes)}"))
            rows.append(("NVIDIA driver", f"{s.driver_version} (CUDA {_cuda(s.cuda_driver_version)})"
                         if s.driver_version else f"none found ({s.nvml_error or 'no NVML'})"))
            for g in s.gpus:
                cc = ".".join(map(str, g.compute_capability)) if g.compute_capability else "?"
                rows.append((f"GPU {g.index}", f"{g.name}, {fmt_bytes(g.memory_total_bytes)}, compute capability {cc}"))
            if not s.gpus:
                rows.append(("GPU", "none: this check runs the CPU parts only"))
        rows.append(("torch's CUDA", self.torch_cuda or "none (a CPU-only build, or no torch)"))
        rows.append(("nvcc", f"{self.nvcc} (CUDA {self.nvcc_cuda})" if self.nvcc else "not found"))
        return rows

    def package_rows(self) -> list[tuple[str, str, str]]:
        return [(p.name if p.dist == p.name else f"{p.name} ({p.dist})", p.status,
                 "" if p.installed else f"{p.used_by} skip: {p.install}") for p in self.packages]

    def __repr__(self) -> str:
        notes = "".join(f"\nnote: {n}" for n in self.notes)
        return ("Environment\n" + text_table(("item", "value"), self.machine_rows()) + "\n"
                + text_table(("package", "version", "if missing"), self.package_rows()) + notes)

    def _repr_html_(self) -> str:
        return (html_table(("item", "value"), self.machine_rows(), caption="Machine")
                + html_table(("package", "version", "if missing"), self.package_rows(), caption="Packages"))


def _cuda(v: int | None) -> str:
    return "?" if not v else f"{v // 1000}.{v % 1000 // 10}"


def _major(v: str | None) -> str | None:
    return None if not v else v.split(".")[0]


def environment(*, probe_frameworks: bool = True) -> Environment:
    """The GPU(s), driver, CUDA, versions of every package the course can use, and nvcc against torch's CUDA.

    ``probe_frameworks=False`` skips importing torch and TensorFlow (the package table still lists them).
    """
    packages = []
    for name, dists, used_by, install in OPTIONAL:
        found = _installed(name)
        dist, version = _version(dists) if found else (dists[0], None)
        packages.append(Package(name, dist, found, version, used_by, install))
    info = system_info(frameworks=("torch",)) if probe_frameworks else None
    torch_fw = info.framework("torch") if info is not None else None
    torch_cuda = torch_fw.cuda_build if torch_fw is not None and torch_fw.installed else None
    nvcc, nvcc_cuda = nvcc_version()
    notes: list[str] = []
    if nvcc and torch_cuda and _major(nvcc_cuda) != _major(torch_cuda):
        notes.append(f"nvcc is CUDA {nvcc_cuda} but torch was built with CUDA {torch_cuda}: a C++/CUDA extension "
                     f"(load_inline, lesson 11) builds without its CUDA part; install the CUDA {_major(torch_cuda)} "
                     f"toolkit's nvcc to build it")
    elif torch_cuda and not nvcc:
        notes.append("no nvcc: lesson 11's C++/CUDA extension builds its C++ part only (Triton and Numba kernels "
                     "need no nvcc)")
    if info is not None and info.gpus and not (torch_fw and torch_fw.gpu_count):
        notes.append("NVML sees a GPU but torch does not: " + (torch_fw.error if torch_fw and torch_fw.error
                                                                 else "run python -m gpulab doctor for the fix"))
    for p in packages:
        if not p.installed and p.name not in ("nbclient", "ipykernel"):
            notes.append(f"{p.name} is missing: {p.used_by} will say so and skip ({p.install})")
    return Environment(info, tuple(packages), nvcc, nvcc_cuda, torch_cuda, tuple(notes))
