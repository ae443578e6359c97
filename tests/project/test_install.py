"""What `make` installs: torch's CUDA build chosen by the NVIDIA driver (tools/torch_wheel.py), seen through a
fake `nvidia-smi` on PATH, and the Makefile using that choice in its pip command and its stamp hash."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "torch_wheel.py"
PINS = dict(re.findall(r"^(torch|torchvision)==(\S+)", (ROOT / "requirements/course.txt").read_text(), re.M))
TORCH, TORCHVISION = PINS["torch"], PINS["torchvision"]
CU126 = ["--extra-index-url", "https://download.pytorch.org/whl/cu126",
         f"torch=={TORCH}+cu126", f"torchvision=={TORCHVISION}+cu126"]


def fake_smi(bin_dir: Path, gpus=(("580.95.05", "8.0"),), *, compute_cap=True, broken=False) -> Path:
    """An `nvidia-smi` answering the queries tools/torch_wheel.py and the Makefile make.

    ``compute_cap=False`` behaves like drivers before R510, which reject that field; ``broken=True`` like
    an installed nvidia-smi whose driver is not loaded."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    rows = "\\n".join(f"{d}, {c}" for d, c in gpus)
    drivers = "\\n".join(d for d, _ in gpus)
    names = "\\n".join(f"GPU {i}: NVIDIA Fake (UUID: GPU-{i:08d})" for i in range(len(gpus)))
    if broken:
        body = ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver. '
                'Make sure that the latest NVIDIA driver is installed and running."; exit 9')
    else:
        cap_case = (f'*compute_cap*) printf "{rows}\\n" ;;' if compute_cap else
                    '*compute_cap*) echo \'Field "compute_cap" is not a valid field to query.\'; exit 2 ;;')
        body = f"""case "$*" in
  -L) printf "{names}\\n" ;;
  {cap_case}
  *--query-gpu=driver_version*) printf "{drivers}\\n" ;;
  *) echo "fake nvidia-smi: unexpected arguments: $*" >&2; exit 1 ;;
esac"""
    path = bin_dir / "nvidia-smi"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def decide(tmp_path: Path, *args: str, smi: dict | None = None, env: dict | None = None):
    """Run the script with only the fake (or nothing) on PATH: (exit code, pip arguments, stderr)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if smi is not None:
        fake_smi(bin_dir, **smi)
    run_env = {"PATH": str(bin_dir), "HOME": str(tmp_path), **(env or {})}
    p = subprocess.run([sys.executable, str(SCRIPT), "--explain", *args], capture_output=True, text=True,
                       env=run_env, timeout=60)
    return p.returncode, p.stdout.split(), p.stderr.strip()


def test_no_nvidia_smi_installs_the_pypi_wheel(tmp_path):
    code, args, why = decide(tmp_path)
    assert (code, args) == (0, [])
    assert "PyPI (CUDA 13.0)" in why and "no NVIDIA driver" in why


def test_nvidia_smi_that_fails_installs_the_pypi_wheel(tmp_path):
    code, args, why = decide(tmp_path, smi={"broken": True})
    assert (code, args) == (0, []) and "PyPI" in why


def test_r580_driver_takes_pypis_cuda13_wheel(tmp_path):
    code, args, why = decide(tmp_path, smi={"gpus": [("580.95.05", "8.0")]})
    assert (code, args) == (0, [])
    assert "PyPI (CUDA 13.0)" in why and "driver 580.95.05" in why


@pytest.mark.parametrize("driver", ["570.133.07", "575.57.08", "560.35.05", "550.54.15", "535.247.01"])
def test_r525_to_r579_take_the_cuda12_build(tmp_path, driver):
    # torch 2.12+ publishes no cu128 wheels: cu126 is the only CUDA 12 build of the pinned torch
    code, args, why = decide(tmp_path, smi={"gpus": [(driver, "8.6")]})
    assert (code, args) == (0, CU126), why
    assert "needs driver >= 580.65.06" in why


def test_volta_takes_cu126_even_with_r580(tmp_path):
    code, args, why = decide(tmp_path, smi={"gpus": [("580.95.05", "7.0")]})   # V100
    assert (code, args) == (0, CU126)
    assert "older than the PyPI build's kernels (sm_75+)" in why


def test_several_gpus_need_a_build_for_every_one(tmp_path):
    code, args, _ = decide(tmp_path, smi={"gpus": [("580.95.05", "8.0"), ("580.95.05", "7.0")]})
    assert (code, args) == (0, CU126)
    code, args, _ = decide(tmp_path, smi={"gpus": [("580.95.05", "8.0"), ("580.95.05", "9.0")]})
    assert (code, args) == (0, [])


def test_too_old_driver_is_a_clear_error(tmp_path):
    # R470 predates nvidia-smi's compute_cap field: the script falls back to the driver alone
    code, args, why = decide(tmp_path, smi={"gpus": [("470.256.02", "")], "compute_cap": False})
    assert code == 2 and args == []
    assert "470.256.02" in why and "too old" in why and "525.60.13" in why
    assert "R580" in why and "TORCH_WHEEL=pypi" in why


def test_blackwell_below_r580_is_a_clear_error(tmp_path):
    # cu126 has no Blackwell kernels and 2.14 has no cu128: only the R580 CUDA 13 build runs on it
    code, _, why = decide(tmp_path, smi={"gpus": [("575.57.08", "12.0")]})
    assert code == 2 and "R580" in why and "12.0" in why


def test_the_choice_can_be_forced(tmp_path):
    old = {"gpus": [("470.256.02", "")], "compute_cap": False}
    assert decide(tmp_path, "--wheel", "pypi", smi=old)[:2] == (0, [])
    assert decide(tmp_path, smi=old, env={"TORCH_WHEEL": "pypi"})[:2] == (0, [])
    assert decide(tmp_path, "--wheel", "cu126")[:2] == (0, CU126)
    code, _, why = decide(tmp_path, "--wheel", "cu128")
    assert code == 2 and "no cu128 build" in why


@pytest.mark.parametrize("torch_v, vision, gpus, expected", [
    # torch 2.11: PyPI's wheel is CUDA 13.0, cu128 is still published (without Volta), cu126 too
    ("2.11.0", "0.26.0", [("580.95.05", "8.0")], "pypi"),
    ("2.11.0", "0.26.0", [("570.133.07", "8.6")], "cu128"),
    ("2.11.0", "0.26.0", [("550.54.15", "8.0")], "cu126"),
    ("2.11.0", "0.26.0", [("580.95.05", "7.0")], "cu126"),
    ("2.11.0", "0.26.0", [("570.133.07", "7.0")], "cu126"),
    # torch 2.13 also has cu129 (R575)
    ("2.13.0", "0.28.0", [("575.64.05", "8.9")], "cu129"),
    ("2.13.0", "0.28.0", [("570.133.07", "8.9")], "cu126"),
    # torch 2.10: PyPI's wheel is CUDA 12.8, whose kernels still include sm_70
    ("2.10.0", "0.25.0", [("570.133.07", "7.0")], "pypi"),
    ("2.10.0", "0.25.0", [("550.54.15", "8.0")], "cu126"),
])
def test_other_releases_and_their_cuda_builds(tmp_path, torch_v, vision, gpus, expected):
    code, args, why = decide(tmp_path, "--torch", torch_v, "--torchvision", vision, smi={"gpus": gpus})
    assert code == 0, why
    if expected == "pypi":
        assert args == [] and "from PyPI" in why
    else:
        assert args == ["--extra-index-url", f"https://download.pytorch.org/whl/{expected}",
                        f"torch=={torch_v}+{expected}", f"torchvision=={vision}+{expected}"], why


def test_the_pinned_torch_is_in_the_table(tmp_path):
    """Bumping the torch pin must come with its CUDA builds in tools/torch_wheel.py (else GPU machines fail)."""
    code, _, why = decide(tmp_path, smi={"gpus": [("550.54.15", "8.0")]})
    assert code == 0, why


# --- the Makefile ---------------------------------------------------------------------------------

def make_n(tmp_path: Path, smi: dict) -> str:
    bin_dir = tmp_path / "bin"
    fake_smi(bin_dir, **smi)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "TORCH_WHEEL", "TF_FLAVOUR"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run(["make", "-n", "--no-print-directory", "install", f"VENV={tmp_path / 'venv'}"],
                       cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_uses_the_chosen_index_and_hashes_it(tmp_path):
    old = make_n(tmp_path / "a", {"gpus": [("550.54.15", "8.0")]})
    pip_line = next(ln for ln in old.splitlines() if "pip install -r requirements/course.txt" in ln)
    # numba-cuda's CUDA libraries follow torch's CUDA major: cu12 beside a CUDA 12 torch, cu13 beside PyPI's
    assert pip_line.endswith(" ".join(["-r", "requirements/tf-gpu.txt", *CU126, '"numba-cuda[cu12]"', "-e", "."])), \
        pip_line
    new = make_n(tmp_path / "b", {"gpus": [("580.95.05", "8.0")]})
    pip_line = next(ln for ln in new.splitlines() if "pip install -r requirements/course.txt" in ln)
    assert pip_line.endswith('-r requirements/tf-gpu.txt "numba-cuda[cu13]" -e .'), pip_line
    none = make_n(tmp_path / "c", {"broken": True})
    pip_line = next(ln for ln in none.splitlines() if "pip install -r requirements/course.txt" in ln)
    assert pip_line.endswith("-r requirements/tf-cpu.txt -e ."), pip_line   # exactly as without a GPU

    def stamp(out):
        return re.search(r"\.gpulab-installed-([0-9a-f]{16})", out).group(1)

    assert stamp(old) != stamp(new), "a changed torch build must rebuild the venv"


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_install_stops_on_a_too_old_driver(tmp_path):
    out = make_n(tmp_path, {"gpus": [("470.256.02", "")], "compute_cap": False})
    assert "tools/torch_wheel.py --wheel auto --explain" in out.splitlines()[0]   # runs first, and fails
    bin_dir = tmp_path / "bin"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS", "TORCH_WHEEL"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    p = subprocess.run(["make", "--no-print-directory", "install", f"VENV={tmp_path / 'venv'}"], cwd=ROOT,
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode != 0 and "470.256.02" in p.stderr and "too old" in p.stderr
    assert not (tmp_path / "venv").exists(), "nothing is installed for a driver no torch build runs on"


# --- CI and the compat venv -----------------------------------------------------------------------

def test_ci_runs_compat_after_test_with_venvs_keyed_by_their_requirements():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make test VENV=") < ci.index("floor compat-unit ")
    assert ci.index("floor compat-unit ") < ci.index("floor compat-notebooks ")
    assert "compat_hash=$(sha256sum < requirements/compat.txt" in ci
    # the course venv's key leaves compat.txt out (a change of the floor does not rebuild the 9 GB venv) and addons.txt
    # (small tools make adds to the cached venv), and keeps every other requirement file
    assert "grep -v -e '/compat\\.txt$' -e '/addons\\.txt$'" in ci and "return 0" in ci   # prune() must not end CI
    make = (ROOT / "Makefile").read_text()
    reqs = re.search(r"^REQS := (.*)$", make, re.M).group(1).split()
    assert "requirements/addons.txt" in reqs, "make installs the addons (and reinstalls when they change)"
    assert re.search(r"pip install -r requirements/course\.txt -r requirements/addons\.txt ", make)
    assert re.search(r"^COMPAT_HASH := .*requirements/compat\.txt", make, re.M)
    assert re.search(r"^compat: compat-unit compat-notebooks$", make, re.M)
    assert re.search(r"^compat-unit: compat-install\n\t\$\(COMPAT_PY\) -m pytest .* tests --ignore=tests/ui", make, re.M)
    # ... and every notebook under nbval on the floor, gpulab from the checkout (the kernel is a child process)
    assert re.search(r"^\tPYTHONPATH=\$\(CURDIR\) GPULAB_SOLUTIONS=1 \$\(COMPAT_PY\) -m pytest .*--nbval-lax.* notebooks$",
                     make, re.M)


def _ci_floor(test_s: int, used_s: int, budget_s: int = 5100) -> str:
    """Run .ci/run's floor() with make replaced by an echo: what CI does with a half of the torch-floor pass."""
    ci = (ROOT / ".ci" / "run").read_text()
    body = ci[ci.index("floor() {"):]
    body = body[:body.index("\n}\n") + 3]
    script = (f"set -euo pipefail\nmake() {{ echo \"RAN make $*\"; }}\ncache=/nonexistent; compat_hash=h; test_s={test_s}\n"
              f"budget={budget_s}; start=$(( $(date +%s) - {used_s} ))\n{body}floor compat-unit 565\n")
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def test_ci_runs_the_torch_floor_pass_only_where_its_estimate_fits_the_time_left():
    """CI's 90 minutes: on a quiet Xeon (make test 3038 s) the floor's unit tests fit; where make test took twice as
    long and most of the budget is gone, they are left out, with the estimate (3 minutes more while the venv is still
    to build) and the time left said."""
    assert "RAN make compat-unit COMPAT_VENV=/nonexistent/compat-h" in _ci_floor(test_s=3038, used_s=3500)
    out = _ci_floor(test_s=6076, used_s=4500)
    assert "RAN" not in out and "make compat-unit left out for time: ~1310 s estimated, 600 s" in out
    assert "6076 s here" in out
