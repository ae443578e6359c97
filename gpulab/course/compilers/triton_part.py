"""Whether the installed Triton runs lessons 11 and 13's Triton parts: 3.4 or newer (PyTorch 2.8 and later bring it).

Older releases fail there in two ways a learner cannot fix from the notebook: before 3.4, Triton's compiler has no
ahead-of-time ``ASTSource(constexprs=...)``, so ``gl.kernels.kernel_resources`` cannot read a kernel's registers;
and the interpreter of Triton 3.1 (PyTorch 2.5's) looks for ``triton.language`` among the kernel's globals with
``==``, which raises on a notebook's pandas DataFrame, and converts one-element arrays to int, which NumPy 2.4
refuses. The lesson asks once and runs its Triton cells under the answer; the rest of it (Numba,
streams, the C++ extension) runs either way.

Example:
    >>> part = triton_part("section 3 (Triton)", version="3.1.0")
    >>> bool(part), part.line.startswith("Skipping section 3 (Triton): Triton 3.1.0")
    (False, True)
"""
from __future__ import annotations

from dataclasses import dataclass

from ..lesson.optional import PartAnswer

__all__ = ["TritonPart", "triton_part", "TRITON_FOR_LESSONS"]

#: the oldest Triton the lessons' Triton parts run on (PyTorch 2.8's)
TRITON_FOR_LESSONS = (3, 4)


@dataclass(frozen=True, repr=False)
class TritonPart(PartAnswer):
    """Whether a lesson's ``part`` can run on this Triton (``version``; None where Triton is not installed): true in
    an ``if``; its one line says the part runs, or is skipped and what to install."""

    part: str
    version: str | None

    @property
    def available(self) -> bool:  # type: ignore[override]
        return self.version is not None and _release(self.version) >= TRITON_FOR_LESSONS

    @property
    def line(self) -> str:  # type: ignore[override]
        need = ".".join(map(str, TRITON_FOR_LESSONS))
        if self.version is None:
            return (f"Skipping {self.part}: Triton is not installed (it comes with PyTorch's Linux wheels); to run "
                    f"it: pip install 'triton>={need}', then restart the kernel.")
        if self.available:
            return f"Triton {self.version} is installed: {self.part} runs."
        return (f"Skipping {self.part}: Triton {self.version} is older than {need}, which it needs (its interpreter "
                "fails inside a notebook, and it cannot compile a kernel ahead of time to read its registers); to run "
                f"it: pip install -U 'torch>=2.8' (which brings Triton {need} or newer), then restart the kernel.")


def _release(version: str) -> tuple[int, ...]:
    out = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def triton_part(part: str, *, version: str | None = "installed") -> TritonPart:
    """Whether the lesson's ``part`` can run on the installed Triton (read from its package metadata: nothing is
    imported); ``version`` replaces the installed one (None: as if Triton were missing)."""
    if not isinstance(part, str) or not part.strip():
        raise TypeError(f"part must name the lesson's part that needs Triton, e.g. 'section 3', got {part!r}")
    if version == "installed":
        from importlib import metadata

        try:
            version = metadata.version("triton")
        except metadata.PackageNotFoundError:
            version = None
    elif version is not None and not isinstance(version, str):
        raise TypeError(f"version must be a Triton version such as '3.4.0', or None, got {version!r}")
    return TritonPart(part, version)
