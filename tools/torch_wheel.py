#!/usr/bin/env python3
"""Which CUDA build of the pinned torch this machine's NVIDIA driver can run: the pip arguments for it.

    python3 tools/torch_wheel.py            # pip arguments on stdout; nothing for PyPI's own wheel
    python3 tools/torch_wheel.py --explain  # one line saying what was chosen and why (stderr)

The Makefile adds the printed arguments to its `pip install` and to the venv's stamp hash, so a changed
decision (a new driver, a different GPU) rebuilds the venv. Standard library only: it runs with the
system python3 before any venv exists.

PyPI's Linux x86_64 torch wheel is one CUDA build; PyTorch's own index (download.pytorch.org/whl/cuXXX)
carries the others. Which build runs depends on:
  * the driver: a CUDA 13.x build needs R580+ (>= 580.65.06, CUDA 13.0 GA); CUDA 12.x builds run on
    >= 525.60.13 through CUDA minor-version compatibility (CUDA 12.8's own driver is >= 570.26, 12.6's
    >= 560.28.03). Sources: NVIDIA's CUDA Toolkit release notes (driver table) and "CUDA Compatibility:
    Minor Version Compatibility" (13.x >= 580, 12.x >= 525).
  * the GPU: CUDA 13 cannot build for Maxwell/Pascal/Volta (< sm_75), so torch's cu130 wheels (and cu128
    from torch 2.11 on) start at Turing (7.5); only cu126 still carries 5.0-7.0, and it stops at Hopper
    (9.0): no Blackwell kernels. Sources: pytorch/pytorch#157517, #172352 (sm_70 dropped from cu128 in
    2.11), #190355 (2.14 matrix).
  * the release, as PyTorch announced each one (googlecolab/colabtools#5801, #5925, #5982, #6053, #6093;
    pytorch/pytorch#178665, #190355; pytorch/FBGEMM#5976): PyPI serves CUDA 12.8 up to torch 2.10 and
    CUDA 13.0 from 2.11 on; cu128 is published up to 2.11, cu129 for 2.13 only, cu126 throughout. torch
    2.14.1 from PyPI reports CUDA 13.0 (measured), and its only CUDA 12 build is cu126.

Exit status 0 with the arguments (possibly none); 2 with a message naming the driver when no build of
the pinned torch runs on this machine.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

INDEX = "https://download.pytorch.org/whl/{tag}"
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Build:
    tag: str                            # "cu126": the index folder and the local version label
    cuda: str                           # "12.6"
    min_driver: tuple[int, ...]         # the oldest Linux driver that runs it
    min_cc: tuple[int, int]             # the oldest GPU it has kernels for
    max_cc: tuple[int, int] | None      # the newest (None: PTX or all current GPUs)


# Linux drivers: CUDA 13.0 GA needs 580.65.06 (13.x minor-version compatibility: R580); a CUDA 12.9 or
# 12.8 build is taken from its own GA driver (575.51.03, 570.26), a 12.6 build from 525.60.13 (12.x
# minor-version compatibility; 12.6 GA's own driver is 560.28.03): cu126 is the fallback for R525-R569.
CU130 = Build("cu130", "13.0", (580, 65, 6), (7, 5), None)
CU129 = Build("cu129", "12.9", (575, 51, 3), (7, 5), None)
CU128 = Build("cu128", "12.8", (570, 26), (7, 5), None)             # 2.11 dropped sm_70 from cu128
CU128_VOLTA = Build("cu128", "12.8", (570, 26), (7, 0), None)       # 2.8-2.10 still built sm_70
CU126 = Build("cu126", "12.6", (525, 60, 13), (5, 0), (9, 0))

# torch (major, minor) -> (the build PyPI serves, every build published, preferred first)
RELEASES: dict[tuple[int, int], tuple[Build, tuple[Build, ...]]] = {
    (2, 9): (CU128_VOLTA, (CU130, CU128_VOLTA, CU126)),
    (2, 10): (CU128_VOLTA, (CU130, CU128_VOLTA, CU126)),
    (2, 11): (CU130, (CU130, CU128, CU126)),
    (2, 12): (CU130, (CU130, CU126)),
    (2, 13): (CU130, (CU130, CU129, CU126)),
    (2, 14): (CU130, (CU130, CU126)),        # (and cu132, which needs R580 like PyPI's cu130)
}

class NoBuild(Exception):
    """No CUDA build of this torch runs on this machine."""


@dataclass(frozen=True)
class Gpus:
    driver: str                                  # "580.95.05"
    caps: tuple[tuple[int, int] | None, ...]     # one per GPU; None where nvidia-smi cannot say


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def query(smi: str | None = None) -> Gpus | None:
    """The driver and each GPU's compute capability from nvidia-smi; None without a usable nvidia-smi."""
    smi = smi or shutil.which("nvidia-smi")
    if not smi:
        return None

    def run(fields: str) -> list[str] | None:
        try:
            out = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
        return lines if out.returncode == 0 and lines else None

    lines = run("driver_version,compute_cap")
    if lines is None:   # drivers before ~R510 do not know the compute_cap field
        lines = run("driver_version")
    if lines is None:
        return None
    drivers, caps = [], []
    for ln in lines:
        parts = [p.strip() for p in ln.split(",")]
        if not re.fullmatch(r"\d+(\.\d+)+", parts[0]):
            return None      # not a driver version: nvidia-smi printed an error on stdout
        drivers.append(parts[0])
        cap = parts[1] if len(parts) > 1 else ""
        caps.append(tuple(_version(cap)[:2]) if re.fullmatch(r"\d+\.\d+", cap) else None)
    return Gpus(min(drivers, key=_version), tuple(caps))  # type: ignore[arg-type]


def pins(requirements: Path) -> tuple[str, str]:
    """(torch, torchvision) versions pinned in the requirements file."""
    found = dict(re.findall(r"^(torch|torchvision)==([^\s#;]+)", requirements.read_text(), re.M))
    if "torch" not in found or "torchvision" not in found:
        raise SystemExit(f"{requirements}: needs torch==X and torchvision==Y pins")
    return found["torch"], found["torchvision"]


def _runs(build: Build, gpus: Gpus) -> bool:
    if _version(gpus.driver) < build.min_driver:
        return False
    for cc in gpus.caps:
        if cc is None:
            continue
        if cc < build.min_cc or (build.max_cc is not None and cc > build.max_cc):
            return False
    return True


def _fmt(v: tuple[int, ...]) -> str:
    return ".".join(f"{x:02d}" if i == 2 else str(x) for i, x in enumerate(v))


def choose(torch: str, gpus: Gpus | None, wheel: str = "auto") -> tuple[Build | None, str]:
    """(the build to install, None for PyPI's wheel; a one-line reason)."""
    key = tuple(_version(torch)[:2])
    if key not in RELEASES:
        if gpus is None or wheel == "pypi":
            return None, f"torch {torch} from PyPI"
        raise NoBuild(f"tools/torch_wheel.py does not know torch {torch}'s CUDA builds: add them to RELEASES "
                      f"(https://pytorch.org/get-started/previous-versions/), or run make with TORCH_WHEEL=pypi")
    pypi, builds = RELEASES[key]  # type: ignore[index]
    if wheel == "pypi":
        return None, f"torch {torch} from PyPI (CUDA {pypi.cuda}), as asked (TORCH_WHEEL=pypi)"
    if wheel != "auto":
        chosen = next((b for b in builds if b.tag == wheel), None)
        if chosen is None:
            raise NoBuild(f"torch {torch} has no {wheel} build; it has {', '.join(b.tag for b in builds)}")
        return (None if chosen == pypi else chosen), f"torch {torch}+{wheel}, as asked (TORCH_WHEEL={wheel})"
    if gpus is None:
        return None, f"torch {torch} from PyPI (CUDA {pypi.cuda}): no NVIDIA driver answered nvidia-smi"
    caps = ", ".join("?" if c is None else f"{c[0]}.{c[1]}" for c in gpus.caps)
    seen = f"driver {gpus.driver}, compute capability {caps}"
    if _runs(pypi, gpus):
        return None, f"torch {torch} from PyPI (CUDA {pypi.cuda}): {seen}"
    for b in builds:
        if _runs(b, gpus):
            why = ("the GPU is older than the PyPI build's kernels (sm_" + "".join(map(str, pypi.min_cc)) + "+)"
                   if _version(gpus.driver) >= pypi.min_driver else
                   f"CUDA {pypi.cuda} needs driver >= {_fmt(pypi.min_driver)}")
            return b, f"torch {torch}+{b.tag} (CUDA {b.cuda}) from PyTorch's index: {seen}; {why}"
    oldest = min(b.min_driver for b in builds)
    if _version(gpus.driver) < oldest:
        raise NoBuild(
            f"NVIDIA driver {gpus.driver} is too old for every CUDA build of torch {torch} (the oldest, CUDA "
            f"{min(builds, key=lambda b: b.min_driver).cuda}, needs >= {_fmt(oldest)}; PyPI's CUDA {pypi.cuda} "
            f"build needs >= {_fmt(pypi.min_driver)}). Update the NVIDIA driver (R580 or newer runs them all), "
            "or install the CPU-capable PyPI wheel anyway with: make lab TORCH_WHEEL=pypi")
    raise NoBuild(
        f"no CUDA build of torch {torch} has kernels for this GPU ({seen}): "
        + ("update the driver to R580 or newer for the CUDA 13 build" if any(c and c >= (10, 0) for c in gpus.caps)
           else "GPUs older than compute capability 5.0 are not supported by any current torch")
        + ", or install the PyPI wheel (CPU only here) with: make lab TORCH_WHEEL=pypi")


def pip_args(build: Build | None, torch: str, torchvision: str) -> list[str]:
    if build is None:
        return []
    return ["--extra-index-url", INDEX.format(tag=build.tag),
            f"torch=={torch}+{build.tag}", f"torchvision=={torchvision}+{build.tag}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requirements", type=Path, default=ROOT / "requirements" / "course.txt")
    ap.add_argument("--torch", help="torch version (default: the requirements file's pin)")
    ap.add_argument("--torchvision", help="torchvision version (default: the requirements file's pin)")
    ap.add_argument("--wheel", default=os.environ.get("TORCH_WHEEL") or "auto",
                    help="auto (default), pypi, or a build tag such as cu126")
    ap.add_argument("--explain", action="store_true", help="say what was chosen and why, on stderr")
    a = ap.parse_args(argv)
    torch, torchvision = pins(a.requirements) if not (a.torch and a.torchvision) else (a.torch, a.torchvision)
    gpus = None if a.wheel == "pypi" else query()
    try:
        build, why = choose(torch, gpus, a.wheel)
    except NoBuild as e:
        print(f"tools/torch_wheel.py: {e}", file=sys.stderr)
        return 2
    if a.explain:
        print(why, file=sys.stderr)
    print(" ".join(pip_args(build, torch, torchvision)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
