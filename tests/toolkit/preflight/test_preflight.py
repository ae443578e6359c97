"""``python -m gpulab check``: the preflight runs on a CPU-only machine too (says there is no GPU, runs the CPU
parts, writes its report), runs notebooks under time limits and tells passed, failed, timed-out and not-run apart."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpulab.preflight import check, environment, find_course
from gpulab.preflight import stack as env_mod
from gpulab.preflight.run import parse_junit, run_notebook

ROOT = Path(__file__).resolve().parents[3]


def _notebook(path: Path, *sources: str) -> Path:
    nbformat = pytest.importorskip("nbformat", reason="nbformat and nbclient run the notebooks (the course's stack)")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a lesson")] + [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


def test_the_command_line_check_on_a_cpu_says_so_and_writes_its_report(tmp_path):
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "gpulab", "check", "--notebooks", "none", "--no-limits",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "report.json").read_text())
    md = (out / "report.md").read_text()
    assert data["ok"] and "no GPU here" in data["headline"]
    assert any("no CUDA GPU is usable here" in n for n in data["notes"])
    # the conformance tests ran and skipped, each with its reason, on a machine without CUDA
    assert data["tests"], "the GPU conformance tests were not run"
    assert {t["status"] for t in data["tests"]} == {"skipped"}, data["tests"]
    assert all(t["detail"] for t in data["tests"])
    assert "## Machine" in md and "## GPU conformance tests" in md and "torch" in md
    assert "PASSED" in proc.stdout and str(out / "report.md") in proc.stdout


def test_notebooks_run_in_order_and_each_outcome_is_told_apart(tmp_path):
    good = _notebook(tmp_path / "00_good.ipynb", "import os\nprint('solutions', os.environ.get('GPULAB_SOLUTIONS'))")
    bad = _notebook(tmp_path / "01_bad.ipynb", "x = 1", "raise RuntimeError('planted failure')")
    slow = _notebook(tmp_path / "02_slow.ipynb", "import time\ntime.sleep(60)")
    pytest.importorskip("nbclient", reason="nbclient runs the notebooks (the course's stack)")
    rows = [run_notebook(p, timeout_s=40, cell_timeout_s=6, save_to=tmp_path / "out" / p.name) for p in (good, bad, slow)]
    assert [r.status for r in rows] == ["passed", "failed", "timed out"], rows
    assert "RuntimeError: planted failure" in rows[1].detail and "cell 3" in rows[1].detail
    assert "cell 2" in rows[2].detail and "6 s" in rows[2].detail
    import nbformat

    executed = nbformat.read(tmp_path / "out" / good.name, as_version=4)
    assert "solutions 1" in executed.cells[1].outputs[0]["text"]         # the reference solutions were on


def test_a_spent_budget_reports_the_rest_as_not_run(tmp_path):
    pytest.importorskip("nbclient", reason="nbclient runs the notebooks (the course's stack): without it none is planned")
    course = tmp_path / "course"
    (course / "tests" / "gpu").mkdir(parents=True)
    (course / "notebooks").mkdir()
    for name in ("00_a", "01_b"):
        _notebook(course / "notebooks" / f"{name}.ipynb", "print('hi')")
    report = check(course, out=None, tests=False, limits=False, budget_s=5)     # too little to start a notebook
    assert [o.status for o in report.notebooks] == ["not run", "not run"]
    assert not report.ok and "budget of 5 s" in report.notebooks[0].detail


def test_notebook_selection_and_a_wrong_root_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="notebooks: no notebook starts with '99'"):
        check(ROOT, out=None, tests=False, notebooks=["99"], limits=False)
    with pytest.raises(ValueError, match="holds no notebooks/ and tests/gpu/"):
        check(tmp_path, out=None, tests=False, notebooks=(), limits=False)
    with pytest.raises(TypeError, match="notebooks must be"):
        check(ROOT, out=None, tests=False, notebooks="00", limits=False)
    assert find_course() == ROOT


def test_nvcc_of_another_cuda_major_than_torch_is_reported_with_what_it_costs(monkeypatch):
    monkeypatch.setattr(env_mod, "nvcc_version", lambda nvcc=None: ("/opt/cuda/bin/nvcc", "12.4"))
    env = environment()
    if env.torch_cuda is None:
        pytest.skip("this torch is a CPU-only build: no CUDA major to compare")
    if env.torch_cuda.split(".")[0] == "12":
        pytest.skip("torch is a CUDA 12 build here")
    assert any("nvcc is CUDA 12.4" in n and "load_inline" in n for n in env.notes), env.notes


def test_nvcc_version_is_read_from_nvcc_itself(tmp_path):
    fake = tmp_path / "nvcc"
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 12.6, V12.6.85'\n")
    fake.chmod(0o755)
    assert env_mod.nvcc_version(str(fake)) == (str(fake), "12.6")


def test_a_missing_package_names_what_it_costs_and_its_install_line(monkeypatch):
    real = env_mod._installed
    monkeypatch.setattr(env_mod, "_installed", lambda m: False if m == "tensorflow" else real(m))
    env = environment(probe_frameworks=False)
    tf = next(p for p in env.packages if p.name == "tensorflow")
    assert tf.status == "missing" and "pip install" in tf.install
    assert any(n.startswith("tensorflow is missing") and "Keras" in n for n in env.notes)


def test_junit_failures_and_errors_are_failed_with_their_message():
    xml = ('<testsuites><testsuite><testcase classname="gpu.t" name="a" time="1.5">'
           '<failure message="assert 1 == 2">trace</failure></testcase>'
           '<testcase classname="gpu.t" name="b" time="0.1"><error message="fixture broke"/></testcase>'
           '</testsuite></testsuites>')
    rows = parse_junit(xml)
    assert [(r.status, r.detail) for r in rows] == [("failed", "assert 1 == 2"), ("failed", "fixture broke")]
    assert rows[0].seconds == 1.5
