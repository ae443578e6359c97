"""Which ``pynvml`` module NVML is read through, and whether its energy counter can be trusted (used by
:mod:`gpulab.telemetry.nvml`, the one module that imports it).

Two packages install a module called ``pynvml``: NVIDIA's nvidia-ml-py (one file, ``pynvml.py``) and the older
standalone ``pynvml`` package (a folder, ``pynvml/``, which Python finds first when both are installed). The standalone
package's releases before 11.0 (8.0.x) declare ``nvmlDeviceGetTotalEnergyConsumption``'s counter as a 32-bit
``c_uint`` where NVML writes a 64-bit count of millijoules: the count is cut to its low 32 bits, so the energy over a
window comes out wrong, or as 0 J once a negative difference is clamped. From 11.0 it declares 64 bits; from 12.0 it
installs no module of its own and depends on nvidia-ml-py.

Example:
    >>> import types
    >>> describe(types.ModuleType("pynvml")).problem is None       # nothing declares a 32-bit counter
    True
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from types import ModuleType

__all__ = ["Binding", "describe", "energy_bits", "nvidia_ml_py_file"]

ENERGY = "nvmlDeviceGetTotalEnergyConsumption"


@dataclass(frozen=True)
class Binding:
    """The ``pynvml`` module in use: ``name`` (its package and version), ``path`` (its file), ``problem`` (why its
    energy counter cannot be trusted; None when it can) and ``note`` (how it was chosen)."""

    name: str
    path: str | None
    problem: str | None = None
    note: str = ""

    def __str__(self) -> str:
        return self.name + (f" ({self.note})" if self.note else "")


def energy_bits(lib: ModuleType) -> int | None:
    """The width ``lib`` declares for the energy counter it reads: 64 (nvidia-ml-py; the standalone pynvml from
    11.0), 32 (the standalone pynvml 8.x: ``c_uint``), or None where its source cannot be read or says neither."""
    try:
        src = inspect.getsource(getattr(lib, ENERGY))
    except (AttributeError, OSError, TypeError):
        return None
    if re.search(r"\bc_(uint64|ulonglong|size_t)\b", src):
        return 64
    if re.search(r"\bc_(uint|uint32|ulong)\s*\(", src):
        return 32
    return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def nvidia_ml_py_file() -> str | None:
    """The ``pynvml.py`` file of the installed nvidia-ml-py, or None where it is not installed."""
    try:
        path = Path(str(metadata.distribution("nvidia-ml-py").locate_file("pynvml.py")))
    except metadata.PackageNotFoundError:
        return None
    return str(path) if path.is_file() else None


def _major(version: str | None) -> int | None:
    found = re.match(r"\d+", version or "")
    return int(found.group()) if found else None


def describe(lib: ModuleType) -> Binding:
    """Which package ``lib`` (a ``pynvml`` module) comes from, its version, and why its energy counter cannot be
    trusted (``problem``): a 32-bit declaration, or the standalone pynvml before 11.0."""
    path = getattr(lib, "__file__", None)
    ours = nvidia_ml_py_file()
    if path is not None and ours is not None and Path(path).resolve() == Path(ours).resolve():
        name = f"nvidia-ml-py {_version('nvidia-ml-py') or ''}".strip()
    elif (path is not None and Path(path).name == "__init__.py") or hasattr(lib, "__version__"):
        name = f"the standalone pynvml package {getattr(lib, '__version__', None) or _version('pynvml') or ''}".strip()
    else:
        name = f"a pynvml module ({path or 'no file'})"
    bits = energy_bits(lib)
    version = getattr(lib, "__version__", None) or (_version("pynvml") if name.startswith("the standalone") else None)
    old = bits == 32 or (bits is None and name.startswith("the standalone") and (_major(version) or 99) < 11)
    problem = None if not old else (
        f"{name} declares NVML's energy counter 32-bit (a c_uint where NVML writes 64 bits of millijoules), so "
        "energy read through it is cut to the low 32 bits and can come out wrong or as 0 J: pip install -U "
        "nvidia-ml-py, and pip uninstall pynvml")
    return Binding(name, path, problem)
