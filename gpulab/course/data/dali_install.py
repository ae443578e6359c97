"""Installing NVIDIA DALI into a running notebook (Colab has no DALI) without breaking it: NVIDIA's wheel for the
runtime's CUDA major version, pinned, from NVIDIA's package index, with the installed ``torch`` and ``numpy`` held
at their versions (a pip constraints file), and a restart asked for only when a package already imported changed.

- :func:`dali_wheel`: ``nvidia-dali-cuda120`` for CUDA 12 (and for a CPU-only torch: DALI's CPU pipeline runs with
  it), ``nvidia-dali-cuda130`` for CUDA 13, as NVIDIA's installation guide names them.
- :func:`dali_install_args`: the ``pip install`` arguments (no ``--upgrade``: what is installed stays unless DALI
  needs another version, and the constraints forbid that for torch and numpy).
- :func:`install_dali`: runs it (once: nothing when DALI is importable) and returns a :class:`DaliInstall`.

Example:
    >>> from gpulab import course
    >>> course.dali_install_args("12.6")[-1]
    'nvidia-dali-cuda120==2.4.0'
"""
from __future__ import annotations

import html
import importlib
import importlib.metadata as metadata
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Callable, Sequence

__all__ = ["DALI_VERSION", "DALI_INDEX", "DaliInstall", "dali_wheel", "dali_install_args", "install_dali"]

DALI_VERSION = "2.4.0"                         # the course's pin (built for CUDA 12 and 13)
DALI_INDEX = "https://pypi.nvidia.com"         # NVIDIA's package index, as its installation guide gives it
KEEP = ("torch", "numpy")                      # what the install must not replace


def dali_wheel(cuda: str | None) -> str:
    """NVIDIA's DALI wheel for a CUDA version such as ``torch.version.cuda`` (``"12.6"``): ``nvidia-dali-cuda120``
    for CUDA 12, ``nvidia-dali-cuda130`` for 13; ``None`` (a CPU-only torch) gets the CUDA 12 wheel, whose CPU
    pipeline needs no GPU.

    Example:
        >>> dali_wheel("12.8"), dali_wheel("13.0"), dali_wheel(None)
        ('nvidia-dali-cuda120', 'nvidia-dali-cuda130', 'nvidia-dali-cuda120')
    """
    if cuda is None:
        return "nvidia-dali-cuda120"
    if not isinstance(cuda, str):
        raise TypeError(f"cuda must be a CUDA version text such as torch.version.cuda ('12.6'), or None, got {cuda!r}")
    major = cuda.strip().split(".")[0]
    if major not in ("12", "13"):
        raise ValueError(f"cuda must be a CUDA 12 or 13 version (DALI {DALI_VERSION} has wheels for these), got "
                         f"{cuda!r}: install a torch built for CUDA 12 or 13, or DALI from NVIDIA's guide by hand")
    return f"nvidia-dali-cuda{major}0"


def dali_install_args(cuda: str | None, *, constraints: str | None = None, version: str = DALI_VERSION) -> list[str]:
    """The ``python -m pip`` arguments that install DALI ``version`` for ``cuda`` (see :func:`dali_wheel`) from
    NVIDIA's index, with a pip constraints file ``constraints`` when given. Nothing is upgraded that DALI does not
    need.

    Example:
        >>> dali_install_args("13.0", constraints="keep.txt")
        ['install', '-q', '--extra-index-url', 'https://pypi.nvidia.com', '-c', 'keep.txt', 'nvidia-dali-cuda130==2.4.0']
    """
    if not isinstance(version, str) or not version.strip():
        raise TypeError(f"version must be a DALI version text such as {DALI_VERSION!r}, got {version!r}")
    if constraints is not None and not isinstance(constraints, str):
        raise TypeError(f"constraints must be the path of a pip constraints file, or None, got {constraints!r}")
    return ["install", "-q", "--extra-index-url", DALI_INDEX, *(["-c", constraints] if constraints else []),
            f"{dali_wheel(cuda)}=={version.strip()}"]


@dataclass(frozen=True)
class DaliInstall:
    """What :func:`install_dali` did: the ``command`` (empty when DALI was already there), pip's ``returncode``,
    the installed packages whose version ``changed``, and whether the runtime must be restarted (``restart``: a
    changed package was already imported)."""

    command: tuple[str, ...]
    returncode: int | None
    changed: tuple[str, ...]
    restart: bool
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode in (None, 0)

    @property
    def line(self) -> str:
        if self.returncode is None:
            return "NVIDIA DALI is already installed: nothing to do."
        if not self.ok:
            tail = self.output.strip().splitlines()[-1:] or ["(no output)"]
            return (f"pip could not install DALI (exit {self.returncode}): {tail[0][:200]}. The lesson runs on without "
                    f"its DALI parts. Command: {' '.join(self.command)}")
        kept = ", ".join(KEEP)
        if self.restart:
            return (f"DALI is installed, and it changed packages this notebook had already imported "
                    f"({', '.join(self.changed)}): restart the runtime (Runtime > Restart session), then run the "
                    f"notebook from the top; {kept} stayed as they were.")
        return f"DALI is installed; {kept} and every imported package stayed as they were: no restart needed."

    def __repr__(self) -> str:
        return self.line

    def _repr_html_(self) -> str:
        colour = "#e8710a" if self.restart or not self.ok else "#1e8e3e"
        return f'<div style="border-left:4px solid {colour};padding:2px 8px">{html.escape(self.line)}</div>'


def _versions() -> dict[str, str]:
    out = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name:
            out[name] = dist.version
    return out


def _imported(changed: Sequence[str]) -> bool:
    """Whether a distribution in ``changed`` provides a module this process has imported."""
    providers = metadata.packages_distributions()
    loaded = {name.split(".")[0] for name in sys.modules}
    wanted = {c.lower() for c in changed}
    return any(module in loaded and any(d.lower().replace("_", "-") in wanted for d in dists)
               for module, dists in providers.items())


def _pip(args: Sequence[str]) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, timeout=900)
    return done.returncode, (done.stdout or "") + (done.stderr or "")


def install_dali(*, cuda: str | None = None, run: Callable[[Sequence[str]], tuple[int, str]] | None = None
                 ) -> DaliInstall:
    """Install DALI into this Python (on Colab: the notebook's runtime) unless it is importable already: the wheel
    for ``cuda`` (default: ``torch.version.cuda``), with ``torch`` and ``numpy`` held at their installed versions.
    ``run`` takes the pip arguments and returns ``(exit code, output)`` (default: ``python -m pip`` in a
    subprocess; tests pass a fake). The result says whether a restart is needed.
    """
    from .dali import dali_available

    if run is not None and not callable(run):
        raise TypeError(f"run must be a function taking pip's arguments, or None, got {run!r}")
    if dali_available():
        return DaliInstall((), None, (), False)
    if cuda is None:
        try:
            import torch

            cuda = torch.version.cuda
        except ImportError:
            cuda = None
    before = _versions()
    with tempfile.TemporaryDirectory() as folder:
        constraints = os.path.join(folder, "keep.txt")
        with open(constraints, "w") as f:
            f.writelines(f"{name}=={before[name]}\n" for name in KEEP if name in before)
        args = dali_install_args(cuda, constraints=constraints)
        code, output = (run or _pip)(args)
    importlib.invalidate_caches()                 # let find_spec see nvidia.dali now
    after = _versions()
    changed = tuple(sorted(n for n, v in before.items() if n in after and after[n] != v))
    command = ("pip", *[a if a != constraints else "<torch and numpy pinned>" for a in args])
    return DaliInstall(command, code, changed, bool(changed) and _imported(changed), output[-2000:])
