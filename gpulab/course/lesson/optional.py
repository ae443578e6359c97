"""A lesson's part that needs an optional package (TensorFlow, DALI, MLflow, ONNX Runtime, Holistic Trace Analysis)
runs only where the package is installed; elsewhere it is skipped with one line naming the ``pip install`` that adds
it, and the rest of the lesson runs. A PyTorch-only machine thus runs every lesson's PyTorch path.

In a notebook, the part's first cell asks, and each of its cells runs under the answer::

    keras_ok = course.needs("tensorflow", "section 4 (Keras)")
    keras_ok                       # one line: it runs, or why it is skipped and how to install what it needs
    ...
    if keras_ok:
        ks = course.start_keras()

Nothing is imported: the check looks for the packages' modules (``importlib.util.find_spec``), so TensorFlow is
still imported where the lesson imports it (after Triton, with its logs quieted, by ``course.start_keras``).

Example:
    >>> part = needs("dali", "section 6")
    >>> bool(part) == part.available and repr(part).count("\\n") == 0
    True
"""
from __future__ import annotations

import html
import importlib.util
from dataclasses import dataclass
from typing import Literal

from ..._check import install_hint

__all__ = ["PartAnswer", "OptionalPart", "needs", "OPTIONAL_PACKAGES"]

# what each optional package of the lessons is called, and the modules it must provide
OPTIONAL_PACKAGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tensorflow": ("TensorFlow", ("tensorflow", "keras")),
    "dali": ("NVIDIA DALI", ("nvidia.dali",)),
    "mlflow": ("MLflow", ("mlflow",)),
    "onnx": ("ONNX Runtime", ("onnx", "onnxscript", "onnxruntime")),
    "hta": ("Holistic Trace Analysis", ("hta",)),
}
Package = Literal["tensorflow", "dali", "mlflow", "onnx", "hta"]


class PartAnswer:
    """Whether a lesson's part can run here, true in an ``if``, shown as one line (``line``: it runs, or why it is
    skipped and what adds it): the answer of :func:`needs` (an optional package) and of
    :func:`gpulab.course.torch_feature` (a newer PyTorch's call)."""

    available: bool
    line: str

    def __bool__(self) -> bool:
        return self.available

    def __repr__(self) -> str:
        return self.line

    def _repr_html_(self) -> str:
        colour = "#1e8e3e" if self.available else "#e8710a"
        return f'<div style="border-left:4px solid {colour};padding:2px 8px">{html.escape(self.line)}</div>'


@dataclass(frozen=True, repr=False)
class OptionalPart(PartAnswer):
    """Whether a lesson's ``part`` can run: true when every module of ``package`` is installed (use it in
    ``if``); its one-line text says it runs, or that it is skipped and the ``pip install`` that adds it."""

    package: str
    part: str
    missing: tuple[str, ...]
    install: str

    @property
    def available(self) -> bool:  # type: ignore[override]
        return not self.missing

    @property
    def line(self) -> str:  # type: ignore[override]
        name = OPTIONAL_PACKAGES[self.package][0]
        if self.available:
            return f"{name} is installed: {self.part} runs."
        return (f"Skipping {self.part}: {name} is not installed ({', '.join(self.missing)} not found); "
                f"to run it: {self.install}, then restart the kernel.")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):      # a parent package that is missing or broken
        return False


def needs(package: Package, part: str) -> OptionalPart:
    """Whether the lesson's ``part`` (e.g. ``"section 4 (Keras)"``) can run: ``package`` is one of
    ``"tensorflow"``, ``"dali"``, ``"mlflow"``, ``"onnx"``, ``"hta"``. Nothing is imported.

    Example:
        >>> needs("tensorflow", "section 4").install
        "pip install tensorflow (the 'gpulab[tensorflow]' extra)"
        >>> needs("torch", "section 1")
        Traceback (most recent call last):
        ...
        ValueError: package must be one of 'tensorflow', 'dali', 'mlflow', 'onnx', 'hta', got 'torch'
    """
    if package not in OPTIONAL_PACKAGES:
        raise ValueError(f"package must be one of {', '.join(map(repr, OPTIONAL_PACKAGES))}, got {package!r}")
    if not isinstance(part, str) or not part.strip():
        raise TypeError(f"part must name the lesson's part that needs {package}, e.g. 'section 4', got {part!r}")
    modules = OPTIONAL_PACKAGES[package][1]
    missing = tuple(m for m in modules if not _installed(m))
    return OptionalPart(package, part, missing, install_hint(modules[0]) or f"pip install {package}")
