"""The repository's promises: notebooks stored clean on the course kernel, badges and install lines
derived from pyproject, environment.yml equal to the pins, gpulab usable without its heavy extras."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import gpulab as gl

from support import course_tool

ROOT = Path(__file__).resolve().parents[2]
course = course_tool.load()       # tools/course.py

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks():
    names = [p.name for p in NOTEBOOKS]
    assert "00_why_gpus.ipynb" in names and "01_setup_verification.ipynb" in names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean_and_agrees_with_pyproject(path):
    assert course.problems(path) == []


def test_a_cell_without_an_id_of_its_own_is_named(tmp_path):
    nb = json.loads(NOTEBOOKS[0].read_text())
    del nb["cells"][3]["id"]
    nb["cells"][5]["id"] = nb["cells"][4]["id"]
    planted = tmp_path / NOTEBOOKS[0].name
    planted.write_text(json.dumps(nb))
    assert [p for p in course.problems(planted) if "needs an id of its own" in p and "cells [3, 4, 5]" in p]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_template(path):
    nb = json.loads(path.read_text())
    md = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    for heading in ("Learning goals", "Predict", "What happened", "Exercise", "Takeaways"):
        assert heading in md, f"{path.name} lacks a '{heading}' section"
    assert re.search(r"^session = course\.setup\((adapt_threads=False)?\)", code, re.M) and "course.check(" in code
    imports = re.findall(r"^\s*(?:from|import)\s+([\w.]+)", code, re.M)
    assert not [m for m in imports if m.startswith("gpulab.")], "notebooks use gpulab's public face only"


def test_badge_and_install_line_derive_from_pyproject():
    url = course.repo_url()
    assert url.startswith("https://github.com/")
    ref = course.ref()   # the main branch until a release is tagged, then this version's tag, never another's
    assert ref in ("main", course.release_tag()) and course.ref_problems() == []
    assert course.install_line().endswith(f'@{ref}"')
    assert course.colab_url("x.ipynb").endswith(f"/blob/{ref}/notebooks/x.ipynb")
    assert course.readme_problems() == []   # the README's badges and Colab install line too
    import gpulab
    assert course.version() == gpulab.__version__


def _pins(lines):
    out = {}
    for line in lines:
        line = line.split("#")[0].strip()
        if "==" in line:
            name, ver = line.split("==")
            out[name.strip().lower()] = ver.strip()
    return out


def test_environment_yml_agrees_with_requirements():
    req = _pins((ROOT / "requirements" / "course.txt").read_text().splitlines())
    req.update(_pins((ROOT / "requirements" / "tf-cpu.txt").read_text().splitlines()))
    env_lines = [l.strip().lstrip("- ").strip() for l in (ROOT / "environment.yml").read_text().splitlines()
                 if l.strip().startswith("- ") and "==" in l]
    env = _pins(env_lines)
    assert env == req
    assert re.search(r"python=3\.11", (ROOT / "environment.yml").read_text())
    gpu = (ROOT / "requirements" / "tf-gpu.txt").read_text()
    assert f"tensorflow[and-cuda]=={req['tensorflow-cpu']}" in gpu


def test_make_targets_and_ci_call_make_test():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab:", make, re.M) and re.search(r"^test:", make, re.M)
    assert "--nbval-lax" in make
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    assert "make lab" in readme and "make test" in readme


def test_docs_build_every_public_module(tmp_path):
    """`make docs` (tools/docs.py, pdoc): one page per public module, the package page first."""
    pytest.importorskip("pdoc")
    import runpy

    docs = runpy.run_path(str(ROOT / "tools" / "docs.py"))
    mods = docs["modules"]()
    assert mods[0] == "gpulab" and "gpulab.telemetry.nvml" in mods and not any("._" in m for m in mods)
    assert docs["main"](str(tmp_path)) == 0
    page = (tmp_path / "gpulab.html").read_text()
    assert "gpulab in your own notebook" in page and "find_max_batch_size" in page
    assert "&gt;&gt;&gt;" not in page.split("<main")[1].split("gpulab in your own notebook")[0]   # no doctest shown
    for title, names in gl.GROUPS:                     # the sidebar by topic
        assert f'<h2 class="group">{title}</h2>' in page
    landing = (tmp_path / "index.html").read_text()
    assert "pip install" in landing and "data:image/png;base64," in landing and "% of peak FLOP/s" in landing
    toolkit, course_part = landing.split('id="course"')
    assert "gpulab/course/training/batching.html" in course_part and "gpulab/course/" not in toolkit
    # the course by part: a heading per part, with the lessons it serves below it
    import gpulab.course
    parts = [p.name for p in sorted(Path(gpulab.course.__file__).parent.iterdir()) if (p / "__init__.py").exists()]
    for part in parts:
        assert f'<h3><a href="gpulab/course/{part}.html">course.{part}</a></h3>' in course_part, part
    assert (tmp_path / "gpulab" / "telemetry" / "nvml.html").exists()
    assert not [p for p in tmp_path.rglob("_*.html")], "private modules have no page (nor are they imported)"
    assert re.search(r"^docs:", (ROOT / "Makefile").read_text(), re.M) and "make docs" in (ROOT / ".ci" / "run").read_text()


def test_course_kernel_env_matches_quiet_env():
    """The kernel `make install` registers and gl.setup() on other kernels (Colab) quiet the same logs."""
    from gpulab.session import QUIET_ENV

    line = re.search(r"^KERNEL_ENV := (.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    kernel_env = dict(zip(line[::2], line[1::2]))
    assert {k: kernel_env.get(k) for k in QUIET_ENV} == QUIET_ENV


BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {"torch", "torchvision", "tensorflow", "keras", "nvidia", "pynvml"}:
                raise ImportError(f"{name} is blocked for this test")
    sys.meta_path.insert(0, _Block())
""")


def test_gpulab_works_without_torch_tf_dali_nvml():
    code = BLOCKER + textwrap.dedent("""
        import sys, runpy, gpulab as gl
        assert "torch" not in sys.modules
        r = gl.doctor()
        assert r.healthy and "torch-missing" in r.codes(), r.codes()
        m = gl.benchmark(sum, range(100), min_run_time=0.05)
        assert m.backend == "perf_counter"
        print(gl.compare([m]))
        sys.argv = ["gpulab", "doctor"]
        runpy.run_module("gpulab", run_name="__main__")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "PyTorch is not installed" in out.stdout and "gpulab doctor: healthy" in out.stdout


def test_import_has_no_side_effects():
    code = textwrap.dedent("""
        import os, sys, threading
        before = dict(os.environ); n = threading.active_count()
        import gpulab
        assert dict(os.environ) == before and threading.active_count() == n
        heavy = {"torch", "tensorflow", "pandas", "matplotlib", "pynvml", "mlflow", "tensorboard"} & set(sys.modules)
        assert not heavy, heavy
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_pip_install_core_alone(tmp_path):
    """`pip install .` into an empty venv gives a working `python -m gpulab doctor` (no torch)."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    inst = subprocess.run([str(py), "-m", "pip", "install", "-q", str(ROOT)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert inst.returncode == 0, inst.stderr[-2000:]
    out = subprocess.run([str(py), "-m", "gpulab", "doctor"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert "PyTorch is not installed" in out.stdout
    names = subprocess.run([str(py), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                           env=env).stdout
    assert "torch" not in {p["name"] for p in json.loads(names)}


def test_every_notebook_names_the_kernel_make_installs():
    """The Makefile installs the course kernel as ``python3`` (KERNEL): a notebook naming another kernelspec
    (the lessons, the UI suite's fixtures) fails to start in a fresh venv."""
    kernel = next(line.split(":=")[1].strip() for line in (ROOT / "Makefile").read_text().splitlines()
                  if line.startswith("KERNEL :="))
    skip = {"build", ".ipynb_checkpoints", ".venv", ".venv-compat", "site-packages", "node_modules", ".git"}
    books = [p for p in ROOT.rglob("*.ipynb") if not skip & set(p.parts)]
    assert len(books) >= 14
    wrong = {str(p.relative_to(ROOT)): json.loads(p.read_text())["metadata"].get("kernelspec", {}).get("name")
             for p in books}
    assert {p: k for p, k in wrong.items() if k != kernel} == {}
