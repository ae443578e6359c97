"""C++ and CUDA source compiled into a Python module at run time: ``torch.utils.cpp_extension.load_inline``,
with its one-off cost measured and the CUDA part used only where it can be built.

Example:
    >>> from gpulab.kernels import cuda_build_support
    >>> isinstance(cuda_build_support().reason, str)
    True
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Sequence

from .._check import flag, texts
from .._tf import quiet_cpp_extension_log

__all__ = ["BuildSupport", "cuda_build_support", "Extension", "cpp_extension"]


@dataclass(frozen=True)
class BuildSupport:
    """Whether CUDA source can be compiled *and run* here: a CUDA GPU, and ``nvcc`` of torch's CUDA major version
    (``nvcc_cuda`` and ``torch_cuda`` are the two versions compared, when they were read)."""

    ok: bool
    reason: str
    nvcc: str | None = None
    nvcc_cuda: str | None = None
    torch_cuda: str | None = None


def _nvcc_release(version_text: str) -> str | None:
    """The CUDA release in ``nvcc --version``'s output (``"13.0"``), read as torch reads it; None if absent.

    Example:
        >>> _nvcc_release("Cuda compilation tools, release 12.4, V12.4.131")
        '12.4'
    """
    found = re.search(r"release (\d+)\.(\d+)", version_text)
    return f"{found.group(1)}.{found.group(2)}" if found else None


def _nvcc_version_text(nvcc: str) -> str:
    try:
        done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout


def _major(version: str) -> str:
    return version.split(".")[0]


def cuda_build_support() -> BuildSupport:
    """Can ``load_inline(cuda_sources=...)`` build and run here? Needs torch built with CUDA, a GPU, and the
    ``nvcc`` torch finds (``CUDA_HOME``) at torch's CUDA major version: ``load_inline`` refuses an ``nvcc`` of
    another major version (CUDA 12 against a CUDA 13 torch), so such a machine builds the C++ part only.
    A different minor version builds (torch warns). Colab's ``nvcc`` matches its torch.

    Example:
        >>> cuda_build_support().ok in (True, False)
        True
    """
    try:
        import torch
    except ImportError:
        return BuildSupport(False, "torch is not installed")
    torch_cuda = torch.version.cuda
    if torch_cuda is None:
        return BuildSupport(False, f"this torch ({torch.__version__}) is not a CUDA build")
    if not torch.cuda.is_available():
        return BuildSupport(False, "no CUDA GPU here: CUDA kernels could be compiled but not run", None, None,
                            torch_cuda)
    with quiet_cpp_extension_log():
        from torch.utils.cpp_extension import CUDA_HOME
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc") if CUDA_HOME else None
    if not nvcc or not os.path.exists(nvcc):
        return BuildSupport(False, "no nvcc (the CUDA toolkit's compiler) found: install the CUDA toolkit of "
                                   f"torch.version.cuda = {torch_cuda}, or set CUDA_HOME", None, None, torch_cuda)
    nvcc_cuda = _nvcc_release(_nvcc_version_text(nvcc))
    if nvcc_cuda is None:
        return BuildSupport(False, f"{nvcc} --version names no CUDA release, so it cannot be matched with torch's "
                                   f"CUDA {torch_cuda}", nvcc, None, torch_cuda)
    if _major(nvcc_cuda) != _major(torch_cuda):
        return BuildSupport(False, f"nvcc is CUDA {nvcc_cuda} but torch was built with CUDA {torch_cuda}, and "
                                   f"load_inline needs the same major version: install the CUDA {_major(torch_cuda)} "
                                   "toolkit and point CUDA_HOME at it", nvcc, nvcc_cuda, torch_cuda)
    return BuildSupport(True, f"CUDA GPU and nvcc {nvcc_cuda} ({nvcc}) for torch's CUDA {torch_cuda}", nvcc,
                        nvcc_cuda, torch_cuda)


@dataclass(frozen=True)
class Extension:
    """A compiled extension: its ``module``, how long loading took (``build_s``: compile on a cold cache,
    milliseconds on a warm one) and whether its CUDA part was built (``cuda``; ``device`` says where its
    functions run: pick the function, the tensors and the lesson's text by it, not by the machine)."""

    name: str
    build_s: float
    cuda: bool
    functions: tuple[str, ...]
    note: str
    module: ModuleType = field(repr=False, compare=False)

    @property
    def device(self) -> str:
        """``"cuda"`` when the CUDA part was built and bound, else ``"cpu"`` (the C++ functions only)."""
        return "cuda" if self.cuda else "cpu"

    def __repr__(self) -> str:
        return (f"extension {self.name!r}: {', '.join(self.functions)} - loaded in {self.build_s:.1f} s "
                f"({'C++ and CUDA' if self.cuda else 'C++'}); {self.note}")


def _ensure_ninja() -> None:
    """torch's JIT builds run ``ninja`` as a program: when it is installed as a Python package but its bin
    directory is not on PATH (a Jupyter kernel started outside the venv), put it there for this process."""
    if shutil.which("ninja"):
        return
    try:
        import ninja

        os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")
    except ImportError:
        venv_bin = os.path.dirname(sys.executable)
        if os.path.exists(os.path.join(venv_bin, "ninja")):
            os.environ["PATH"] = venv_bin + os.pathsep + os.environ.get("PATH", "")
        else:
            raise RuntimeError("torch's C++ extensions need the ninja build tool: pip install ninja") from None


def _sources(name: str, value: Any) -> list[str]:
    """One source text or a list of them, as a list of texts."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise TypeError(f"{name} must be source code: a text or a list of texts, got {value!r:.60}")


def _function_names(name: str, value: Any, sources: Sequence[str]) -> list[str]:
    """Function names to bind, each a C++ identifier found in ``sources`` (a typo fails here, not in the linker)."""
    names = list(texts(name, value))
    code = "\n".join(sources)
    for f in names:
        if not f.isidentifier():
            raise ValueError(f"{name}: {f!r} is not a C++ function name")
        if not re.search(rf"\b{re.escape(f)}\s*\(", code):
            raise ValueError(f"{name}: {f!r} is not declared in the sources: declare it in cpp_sources "
                             "(torch::Tensor f(torch::Tensor x);) so it can be bound")
    return names


def cpp_extension(name: str, cpp_sources: str | Sequence[str], functions: Sequence[str], *,
                  cuda_sources: str | Sequence[str] | None = None, cuda_functions: Sequence[str] = (),
                  extra_cflags: Sequence[str] = ("-O3",), verbose: bool = False) -> Extension:
    """Compile ``cpp_sources`` (and, where :func:`cuda_build_support` says so, ``cuda_sources``) with
    ``torch.utils.cpp_extension.load_inline`` and bind ``functions`` (plus ``cuda_functions`` when the CUDA part
    is built; declare them in ``cpp_sources``, which is harmless when the CUDA part is skipped). Builds are
    cached by torch under ``~/.cache/torch_extensions``, keyed by the source: the first call compiles (tens of seconds), later ones, even in a new process, load in milliseconds.

    Example (not run here: the first build takes ~30 s):
        >>> src = "torch::Tensor twice(torch::Tensor x) { return x * 2; }"
        >>> ext = cpp_extension("twice_ext", src, ["twice"])                  # doctest: +SKIP
        >>> ext.module.twice(torch.ones(2))                                     # doctest: +SKIP
        tensor([2., 2.])
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be a Python identifier (it becomes the module's name), got {name!r}")
    cpp = _sources("cpp_sources", cpp_sources)
    cuda = _sources("cuda_sources", cuda_sources) if cuda_sources is not None else []
    functions = _function_names("functions", functions, cpp)
    if not functions:
        raise ValueError("functions must name at least one C++ function to bind")
    cuda_functions = _function_names("cuda_functions", cuda_functions, cpp + cuda)
    extra_cflags = texts("extra_cflags", extra_cflags)
    flag("verbose", verbose)
    with quiet_cpp_extension_log():
        from torch.utils import cpp_extension as ce
    _ensure_ninja()
    support = cuda_build_support() if cuda_sources else BuildSupport(False, "no CUDA source given")
    with_cuda = bool(cuda_sources) and support.ok
    kwargs: dict[str, Any] = dict(name=name, cpp_sources=cpp, functions=list(functions), extra_cflags=list(extra_cflags),
                                  verbose=verbose)
    if with_cuda:
        kwargs.update(name=f"{name}_cuda", cuda_sources=cuda_sources, functions=list(functions) + list(cuda_functions),
                      extra_cuda_cflags=["-O3"])
    with quiet_cpp_extension_log():
        t0 = time.perf_counter()
        module = ce.load_inline(**kwargs)
        build_s = time.perf_counter() - t0
    note = ("CUDA part built and bound" if with_cuda else
            f"C++ only: CUDA part skipped ({support.reason})" if cuda_sources else "C++ only")
    bound = tuple(kwargs["functions"])
    return Extension(kwargs["name"], build_s, with_cuda, bound, note, module)
