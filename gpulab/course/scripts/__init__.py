"""Training scripts that ``torchrun`` runs (shipped with the wheel, so ``pip install gpulab`` has them).

Each is a module with a ``main(argv)`` and importable helpers, run as
``python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpulab.course.scripts.ddp_train`` or from a
notebook with ``gl.launch("gpulab.course.scripts.ddp_train", nproc=2)``.
"""
from __future__ import annotations

from pathlib import Path

__all__ = ["path"]


def path(name: str) -> str:
    """The file of a shipped script, for tools that take a path (``nsys profile python <path>``).

    Example:
        >>> from gpulab import course
        >>> Path(course.scripts.path("profile_train")).name
        'profile_train.py'
    """
    found = Path(__file__).with_name(f"{name}.py")
    if name.startswith("_") or not found.is_file():
        shipped = sorted(p.stem for p in Path(__file__).parent.glob("*.py") if not p.stem.startswith("_"))
        raise ValueError(f"no shipped script {name!r}; the scripts are {shipped}")
    return str(found)
