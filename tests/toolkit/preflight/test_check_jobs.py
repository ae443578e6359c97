"""``python -m gpulab check`` as one command for a whole GPU session: notebooks N at a time beside the tests, what
failed beside others re-run alone, "not run" never passed, Ctrl-C ending every child with the report still
written, a notebook file that is no notebook one failed row, a rehearsed T4 refused without CUDA, and a ledger
record per profile that the schema accepts."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gpulab import rehearsal
from gpulab.preflight import Interrupted, check
from gpulab.preflight.ledger import problems, read_ledger
from gpulab.preflight.plan import default_jobs, order_notebooks, profiles_arg
from gpulab.preflight.run import Outcome

ROOT = Path(__file__).resolve().parents[3]
nbformat = pytest.importorskip("nbformat", reason="nbformat and nbclient run the notebooks (the course's stack)")
pytest.importorskip("nbclient", reason="nbclient runs the notebooks (the course's stack)")


def _course(tmp_path: Path, notebooks: dict[str, list[str]], tests: str | None = None) -> Path:
    course = tmp_path / "course"
    (course / "tests" / "gpu").mkdir(parents=True)
    (course / "notebooks").mkdir()
    if tests is not None:
        (course / "tests" / "gpu" / "test_x.py").write_text(tests)
    for name, sources in notebooks.items():
        nb = nbformat.v4.new_notebook()
        nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(nb, course / "notebooks" / f"{name}.ipynb")
    return course


def _cli(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "gpulab", "check", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, **kw)


def test_two_at_a_time_each_outcome_says_it_ran_beside_others_and_the_record_follows_the_schema(tmp_path):
    course = _course(tmp_path, {"00_a": ["import time; time.sleep(2)"], "01_b": ["import time; time.sleep(2)"],
                                "A1_c": ["print('alone at the end')"]})
    report = check(course, out=tmp_path / "out", tests=False, limits=False, jobs=2, cell_timeout_s=60)
    assert report.ok and report.jobs == 2 and "2 at a time" in report.headline
    rows = {o.name: o for o in report.notebooks}
    assert rows["00_a.ipynb"].beside and rows["01_b.ipynb"].beside, rows
    assert all(o.started_s is not None and o.seconds > 0 for o in report.notebooks)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "beside others" in md and "| profile |" in md
    records = read_ledger(tmp_path / "out" / "ledger")
    assert len(records) == 1 and records[0]["profile"] == "native" and records[0]["jobs"] == 2
    assert records[0]["device"]["kind"] == "cpu" and records[0]["ok"] is True
    assert not problems({k: v for k, v in records[0].items() if k != "_file"})
    # a CPU run never files a record into the course's ledger of GPU runs
    assert not (course / "tests" / "gpu" / "runs").exists()


def test_a_notebook_that_fails_beside_others_is_re_run_alone_and_the_report_says_both(tmp_path):
    fussy = ("import os\nassert os.environ.get('OMP_NUM_THREADS') != '1', "
             "'planted: fails when it shares the machine (one thread)'")
    course = _course(tmp_path, {"00_slow": ["import time; time.sleep(3)"], "01_fussy": [fussy]})
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    saved = os.environ.pop("OMP_NUM_THREADS", None)
    try:
        report = check(course, out=None, tests=False, limits=False, jobs=2, cell_timeout_s=60)
    finally:
        if saved is not None:
            os.environ["OMP_NUM_THREADS"] = saved
    fussy_row = next(o for o in report.notebooks if o.name == "01_fussy.ipynb")
    assert env is not None
    assert fussy_row.status == "passed" and fussy_row.alone == "passed" and fussy_row.beside, fussy_row
    assert "beside others: failed" in fussy_row.detail and "planted" in fussy_row.detail
    assert report.ok


def test_a_spent_budget_is_not_run_never_passed_and_the_command_exits_1(tmp_path):
    course = _course(tmp_path, {"00_a": ["print(1)"]})
    proc = _cli("--root", str(course), "--no-limits", "--no-tests", "--budget", "5", "--out", str(tmp_path / "o"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, out + err
    data = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [o["status"] for o in data["notebooks"]] == ["not run"] and data["ok"] is False
    record = json.loads(next((tmp_path / "o" / "ledger").glob("*.json")).read_text())
    assert record["ok"] is False and record["counts"] == {"not run": 1}
    assert "not run" in err


def test_a_file_that_is_no_notebook_is_one_failed_row_and_the_rest_still_run(tmp_path):
    course = _course(tmp_path, {"01_good": ["print('fine')"]})
    (course / "notebooks" / "00_broken.ipynb").write_text("{ this is not JSON")
    report = check(course, out=None, tests=False, limits=False, jobs=1)
    rows = {o.name: o for o in report.notebooks}
    assert rows["00_broken.ipynb"].status == "failed" and "not a readable notebook" in rows["00_broken.ipynb"].detail
    assert rows["01_good.ipynb"].status == "passed"


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def _wait_for(cond, timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError("timed out waiting")


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def test_ctrl_c_during_a_notebook_ends_its_kernel_and_writes_the_report(tmp_path):
    course = _course(tmp_path, {"00_long": ["import time; time.sleep(300)"], "01_next": ["print(1)"]})
    out = tmp_path / "o"
    proc = _cli("--root", str(course), "--no-limits", "--no-tests", "--out", str(out))
    pgids = out / "results" / "00_long.json.pgids"
    _wait_for(lambda: pgids.exists())                            # the kernel runs
    time.sleep(1.0)
    children = _descendants(proc.pid)
    assert len(children) >= 2, children                          # the notebook's runner and its kernel
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert not _alive(children), _alive(children)
    data = json.loads((out / "report.json").read_text())
    statuses = {o["name"]: o["status"] for o in data["notebooks"]}
    assert statuses == {"00_long.ipynb": "interrupted", "01_next.ipynb": "interrupted"}, statuses
    assert data["interrupted"] is True and data["ok"] is False and "INTERRUPTED" in data["headline"]


def test_ctrl_c_during_the_tests_ends_pytest_and_keeps_what_finished(tmp_path):
    tests = "import time\n\ndef test_quick():\n    pass\n\ndef test_long():\n    time.sleep(300)\n"
    course = _course(tmp_path, {}, tests=tests)
    (course / "tests" / "gpu" / "conftest.py").write_text((ROOT / "tests" / "gpu" / "conftest.py").read_text())
    out = tmp_path / "o"
    proc = _cli("--root", str(course), "--no-limits", "--notebooks", "none", "--out", str(out))
    lines = out / "gpu-tests.jsonl"
    _wait_for(lambda: lines.exists() and "test_quick" in lines.read_text())
    time.sleep(1.0)
    children = _descendants(proc.pid)
    assert children, "pytest is not running"
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert not _alive(children), _alive(children)
    data = json.loads((out / "report.json").read_text())
    statuses = {o["name"]: o["status"] for o in data["tests"]}
    assert any(n.endswith("test_quick") for n in statuses), statuses   # what finished is kept
    assert statuses.get("tests/gpu (the rest)") == "interrupted", statuses


def test_a_t4_rehearsal_without_cuda_is_refused_in_one_line(tmp_path):
    proc = _cli("--as", "t4", "--no-limits", "--notebooks", "none", "--out", str(tmp_path / "o"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, out + err
    assert len(err.strip().splitlines()) == 1 and "t4" in err and "CUDA" in err, err
    assert not (tmp_path / "o" / "report.json").exists()
    with pytest.raises(ValueError, match="profile 'a100' is not one the check knows"):
        profiles_arg("native,a100")


def test_a_wrong_out_folder_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _cli("--out", str(blocker / "sub"), "--no-limits", "--notebooks", "none", "--no-tests")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "cannot be written there" in err and "Traceback" not in err, err


def test_check_interrupted_in_process_raises_with_the_report(tmp_path, monkeypatch):
    course = _course(tmp_path, {"00_a": ["print(1)"]})
    import gpulab.preflight as pre

    def stop(*a, **k):
        raise KeyboardInterrupt([])

    monkeypatch.setattr(pre, "run_jobs", stop)
    with pytest.raises(Interrupted) as caught:
        check(course, out=tmp_path / "o", tests=False, limits=False)
    assert caught.value.report.interrupted and (tmp_path / "o" / "report.json").exists()


def test_notebooks_never_passed_on_a_gpu_go_first_then_the_oldest_pass():
    paths = [Path(f"{p}_x.ipynb") for p in ("00", "01", "02", "03")]
    rec = lambda day, rows, kind="cuda", profile="native": {
        "device": {"kind": kind}, "profile": profile, "started_at": f"2026-11-{day}",
        "notebooks": [{"name": f"{p}_x.ipynb", "status": s} for p, s in rows]}
    records = [rec(20, [("00", "passed"), ("01", "passed"), ("02", "failed")]), rec(25, [("00", "passed")]),
               rec(27, [("03", "passed")], kind="cpu"), rec(27, [("02", "passed")], profile="t4")]
    assert [p.name[:2] for p in order_notebooks(paths, records, ("native",))] == ["02", "03", "01", "00"]
    assert [p.name[:2] for p in order_notebooks(paths, records, ("native", "t4"))] == ["03", "01", "00", "02"]


def test_the_default_fits_the_host():
    class Sys:
        def __init__(self, gpus):
            self.gpus = gpus

    class G:
        visible, memory_total_bytes = True, 80 * 2**30

    class Env:
        def __init__(self, n, gpus):
            self.gpus, self.system = n, Sys(gpus)

    assert default_jobs(Env(0, [])) == 1
    expected = max(1, min((os.cpu_count() or 1) // 3, 5, 6))
    assert default_jobs(Env(1, [G()])) == expected


def test_outcomes_round_trip_through_the_childs_result_file():
    o = Outcome("00_x.ipynb", "failed", 1.5, "why", ("w",), "t4", True, "passed", 3.0)
    assert Outcome.from_dict(json.loads(json.dumps(o.to_dict()))) == o


def test_rehearsal_profiles_and_caps_are_read_from_the_environment(monkeypatch):
    assert rehearsal.active({"GPULAB_AS": "T4"}).compute_capability == (7, 5)
    assert rehearsal.active({"GPULAB_AS": "native"}) is None
    with pytest.raises(ValueError, match="GPULAB_AS='a100' names no GPU to rehearse"):
        rehearsal.active({"GPULAB_AS": "a100"})
    t4 = rehearsal.PROFILES["t4"].memory_bytes
    assert 14 * 2**30 < t4 < 14.75 * 2**30
    assert rehearsal.memory_cap_bytes({"GPULAB_AS": "t4", "GPULAB_GPU_MEMORY_CAP": str(20 * 2**30)}) == t4
    assert rehearsal.memory_cap_bytes({"GPULAB_GPU_MEMORY_CAP": str(2**30)}) == 2**30
    with pytest.raises(ValueError, match="GPULAB_GPU_MEMORY_CAP='lots'"):
        rehearsal.memory_cap_bytes({"GPULAB_GPU_MEMORY_CAP": "lots"})
    assert rehearsal.label("NVIDIA H200", {"GPULAB_AS": "t4"}) == "T4 rehearsal on NVIDIA H200: speeds are not a T4's"


def test_a_rehearsal_on_a_machine_without_cuda_is_said_by_setup_and_refused_by_apply(monkeypatch):
    import torch

    import gpulab as gl

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the rehearsal would run")
    monkeypatch.setenv("GPULAB_AS", "t4")
    session = gl.setup()
    assert any("GPULAB_AS='t4' is ignored" in n for n in session.notes), session.notes
    monkeypatch.setattr(rehearsal, "_applied", {})
    with pytest.raises(RuntimeError, match="need a CUDA GPU to rehearse on"):
        rehearsal.apply()


def test_a_rehearsed_t4_chooses_fp16_with_a_scaler_on_a_bigger_gpu(gpu_info, monkeypatch):
    import gpulab as gl

    monkeypatch.setenv("GPULAB_AS", "t4")
    c = gl.choose_precision(gpu_info)                        # an A100 rehearsing a T4
    assert c.precision == "fp16" and c.needs_scaler and "T4 rehearsed on" in c.device
    monkeypatch.delenv("GPULAB_AS")
    assert gl.choose_precision(gpu_info).precision == "bf16"


def test_every_record_in_the_ledger_follows_the_schema_and_the_readme_reads_it():
    files = sorted((ROOT / "tests" / "gpu" / "runs").glob("*.json"))
    assert files, "the ledger of GPU runs is empty: the first H200 record belongs there"
    for path in files:
        rec = json.loads(path.read_text())
        assert problems(rec) == [], (path.name, problems(rec))
        assert path.name.startswith(f"{rec['started_at'][:10]}_") and rec["profile"] in path.name
    h200 = json.loads((ROOT / "tests" / "gpu" / "runs" / "2026-11-26_nvidia-h200_native.json").read_text())
    assert h200["transcribed"] and h200["commit"].startswith("6052abd")
    figs = {f["name"]: f for f in h200["figures"]}
    assert figs["matmul_ceiling_bfloat16"]["value"] == 685 and figs["gpt2_small_train_tokens_per_s"]["value"] == 289000
    assert all(f["share"] is None or f["share"] <= 1.0 for f in h200["figures"])
    proc = subprocess.run([sys.executable, "tools/course.py", "check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_catches_what_a_hand_edit_breaks():
    h200 = json.loads((ROOT / "tests" / "gpu" / "runs" / "2026-11-26_nvidia-h200_native.json").read_text())
    bad = json.loads(json.dumps(h200))
    bad["notebooks"][0]["status"] = "ok"
    bad["figures"][0]["share"] = 0.99
    bad["ok"] = True
    del bad["commit"]
    found = problems(bad)
    assert "missing field: commit" in found
    assert any("status is 'ok'" in p for p in found) and any("is not value / datasheet" in p for p in found)
    assert any("not run is never passed" in p for p in found)


def test_the_readme_column_is_rendered_from_the_runs():
    from support import course_tool as loader

    course_tool = loader.load()                      # tools/course.py
    text = ("| # | notebook | what you learn | CPU run time* | Colab |\n|---|---|---|---|---|\n"
            "| 00 | [A](notebooks/00_a.ipynb) | x | 1 s | badge |\n| 01 | [B](notebooks/01_b.ipynb) | y | 2 s | badge |")
    runs = {"00": {"native": {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-01", "status": "passed", "seconds": 41,
                              "commit": "abcdef0123", "transcribed": False},
                   "t4": {"gpu": "NVIDIA H100 80GB HBM3", "date": "2026-12-01", "status": "failed", "seconds": 12,
                          "commit": "abcdef0123", "transcribed": False}}}
    out = course_tool.readme_with_gpu_runs(text, runs)
    assert "| last GPU run† |" in out.splitlines()[0] and out.splitlines()[1] == "|---|---|---|---|---|---|"
    assert ("H100 80GB HBM3, 2026-12-01 (abcdef0): passed, 41 s; T4 rehearsal on H100 80GB HBM3, 2026-12-01 "
            "(abcdef0): failed, 12 s") in out
    assert "| 2 s | not yet run on a GPU | badge |" in out
    assert course_tool.readme_with_gpu_runs(out, runs) == out          # rendering twice changes nothing


def test_a_kernel_that_does_not_start_leaves_the_callers_signal_handlers_alone(tmp_path):
    course = _course(tmp_path, {"00_a": ["print(1)"]})
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    report = check(course, out=None, tests=False, limits=False, kernel_name="no-such-kernel-xyz")
    assert report.notebooks[0].status == "failed" and "no-such-kernel-xyz" in report.notebooks[0].detail
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_notebooks_by_spaces_or_commas_and_a_gpu_torch_cannot_use_fails_the_check(tmp_path, monkeypatch):
    course = _course(tmp_path, {"00_a": ["print(0)"], "01_b": ["print(1)"], "A1_c": ["print(2)"]})
    proc = _cli("--root", str(course), "--no-limits", "--no-tests", "--notebooks", "00", "01,A1", "--jobs", "2",
                "--out", str(tmp_path / "o"))
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert len(json.loads((tmp_path / "o" / "report.json").read_text())["notebooks"]) == 3
    # NVML sees a GPU that torch cannot use: the check fails instead of passing with everything skipped
    import dataclasses

    import gpulab.preflight as pre
    from gpulab.system import GPUInfo

    real = pre.environment

    def unusable(**kw):
        env = real(**kw)
        system = dataclasses.replace(env.system, gpus=(GPUInfo(0, "Tesla T4", "GPU-1", 15 * 2**30, (7, 5)),))
        return dataclasses.replace(env, system=system)

    monkeypatch.setattr(pre, "environment", unusable)
    report = check(course, out=None, tests=False, notebooks=(), limits=False)
    if report.environment.gpus:
        pytest.skip("torch can use a GPU here")
    assert not report.ok and report.tests[0].name == "GPU usable by torch" and report.tests[0].status == "failed"


def test_a_conformance_test_that_fails_beside_others_is_re_run_alone(tmp_path):
    tests = ("import os, time\n\ndef test_fussy():\n    time.sleep(1)\n"
             "    assert os.environ.get('OMP_NUM_THREADS') != '1', 'planted: fails when it shares the machine'\n\n"
             "def test_fine():\n    pass\n")
    course = _course(tmp_path, {"00_slow": ["import time; time.sleep(4)"]}, tests=tests)
    saved = os.environ.pop("OMP_NUM_THREADS", None)
    try:
        report = check(course, out=tmp_path / "o", limits=False, jobs=2, cell_timeout_s=60)
    finally:
        if saved is not None:
            os.environ["OMP_NUM_THREADS"] = saved
    rows = {o.name.split("::")[-1]: o for o in report.tests}
    fussy = rows["test_fussy"]
    assert fussy.status == "passed" and fussy.alone == "passed" and fussy.beside, fussy
    assert "beside others: failed" in fussy.detail and "planted" in fussy.detail
    assert rows["test_fine"].status == "passed" and not rows["test_fine"].alone
    assert report.ok


def test_tests_marked_alone_run_first_with_nothing_beside_them(tmp_path):
    """Seen on an H200 with six jobs at once: idle power read beside other notebooks' matmuls (557 W "idle") failed
    the energy tests. Tests marked ``alone`` run first, by themselves; the rest beside the notebooks."""
    tests = ("import os, time\nimport pytest\n\n"
             "@pytest.mark.alone\ndef test_whole_gpu():\n"
             "    time.sleep(1.5)\n\n"
             "def test_shared():\n    time.sleep(1.5)\n")
    course = _course(tmp_path, {"00_a": ["import time; time.sleep(1)"], "01_b": ["import time; time.sleep(1)"]},
                     tests=tests)
    (course / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: the whole GPU\n")
    report = check(course, out=tmp_path / "out", limits=False, jobs=2, cell_timeout_s=60)
    rows = {o.name.split("::")[-1]: o for o in report.tests}
    assert set(rows) == {"test_whole_gpu", "test_shared"}, rows
    assert rows["test_whole_gpu"].status == rows["test_shared"].status == "passed", rows
    assert not rows["test_whole_gpu"].beside and rows["test_shared"].beside, rows
    alone_end = rows["test_whole_gpu"].started_s + 1.5
    assert all(o.started_s >= alone_end for o in report.notebooks), (rows, report.notebooks)
    assert report.ok, report


def test_each_job_gets_its_share_of_the_cores_for_openmp_and_inductors_compile_workers(monkeypatch, tmp_path):
    """Inductor starts one compile worker per core in every process that compiles: six notebooks at once on the
    H200's 16-core host killed lesson 10's kernel while it compiled. Each job gets cores // jobs of both pools."""
    from gpulab.preflight.plan import _env_for

    for name in ("OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 16)

    class Env:
        gpus, system = 0, None

    shared = _env_for("native", 4, Env(), tmp_path)
    assert shared["OMP_NUM_THREADS"] == shared["TORCHINDUCTOR_COMPILE_THREADS"] == "4", shared
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in _env_for("native", 1, Env(), tmp_path)
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")          # the caller's own setting wins
    assert "TORCHINDUCTOR_COMPILE_THREADS" not in _env_for("native", 4, Env(), tmp_path)


def test_figures_measured_beside_other_jobs_are_not_shown_as_the_gpus_and_a_changed_tree_is_said():
    """The H200's first whole check ran every test beside five notebooks: GPT-2-small eager at 7.8% of the datasheet
    (26% alone, a run before). Such a figure is not what the GPU gives: left out unless measured again alone."""
    from gpulab.preflight.ledger import figure_runs, last_runs

    def test(name, beside):
        return {"name": f"tests.gpu.test_x::{name}", "status": "passed", "seconds": 1.0, "beside": beside}

    def fig(name, value, test_name, note=""):
        return {"name": name, "value": value, "unit": "x", "source": f"tests/gpu/test_x.py::{test_name}", "note": note}

    rec = {"device": {"kind": "cuda", "name": "NVIDIA H200"}, "profile": "native", "started_at": "2026-11-28T16:47:00",
           "commit": "8dd6876abc", "dirty": True, "transcribed": False,
           "tests": [test("test_shared", True), test("test_alone", False)],
           "notebooks": [{"name": "00_a.ipynb", "status": "passed", "seconds": 3.0, "beside": True}],
           "figures": [fig("a", 1.0, "test_shared"), fig("b", 2.0, "test_alone"),
                       fig("a", 3.0, "test_shared", "0.3 ms; re-run alone")]}
    assert [f["value"] for f in figure_runs([rec], "a")] == [3.0]
    assert [f["value"] for f in figure_runs([rec], "b")] == [2.0] and figure_runs([rec], "b")[0]["dirty"] is True
    from support import course_tool as loader

    cell = loader.load().gpu_run_cell(last_runs([rec])["00"])
    assert cell == "H200, 2026-11-28 (8dd6876, with changes): passed, 3 s", cell
