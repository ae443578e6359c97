"""course.nvidia_smi: the labelled illustration where nvidia-smi is missing, the real tool where it exists
(faked here: this machine has no NVIDIA driver), and the header's versions."""
from __future__ import annotations

import importlib
import re
import subprocess
import types

from gpulab import course
smi_mod = importlib.import_module("gpulab.course.machine.nvidia_smi")   # the module (course.nvidia_smi is the function)


def test_without_the_tool_it_shows_a_labelled_illustration():
    out = course.nvidia_smi(which=lambda _: None)
    assert out.ran is False and "ILLUSTRATION, not your machine" in repr(out) and "Tesla T4" in repr(out)
    assert "Processes:" in out.text
    dmon = course.nvidia_smi(["dmon", "-s", "pucm", "-c", "5"], which=lambda _: None)
    assert dmon.text.startswith("# gpu") and " sm " in dmon.text.splitlines()[0] + " "
    assert len(dmon.text.splitlines()) == 2 + 5
    assert len(course.nvidia_smi(["dmon", "-c", "3"], which=lambda _: None).text.splitlines()) == 2 + 3
    apps = course.nvidia_smi(["--query-compute-apps=pid,used_memory", "--format=csv"], which=lambda _: None)
    assert apps.text.startswith("pid,")


def test_the_illustration_keeps_nvidia_smi_s_layout():
    lines = smi_mod._SMI.splitlines()[1:]
    assert {len(line) for line in lines if line} == {91}


def test_with_the_tool_it_runs_it(monkeypatch):
    calls = []

    def run(cmd, capture_output, text, timeout):
        calls.append(cmd)
        return types.SimpleNamespace(returncode=0, stdout="| Driver Version: 580.82.07   CUDA Version: 13.0 |\n",
                                     stderr="")

    monkeypatch.setattr(subprocess, "run", run)
    out = course.nvidia_smi(["-L"], which=lambda name: "/usr/bin/" + name)
    assert calls == [["/usr/bin/nvidia-smi", "-L"]]
    assert out.ran and repr(out).splitlines()[0] == "$ nvidia-smi -L"
    assert course.smi_header(out.text) == course.SmiHeader("580.82.07", "13.0")


def test_a_hung_driver_is_reported_not_raised(monkeypatch):
    def run(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(subprocess, "run", run)
    out = course.nvidia_smi(which=lambda name: name, timeout_s=1)
    assert out.ran and "no answer" in out.text


def test_header_versions():
    assert course.smi_header(smi_mod._SMI) == course.SmiHeader("580.65.06", "13.0")
    assert course.smi_header("Driver Version: 470.1   CUDA Version: N/A") == course.SmiHeader("470.1", None)
    assert course.smi_header("no header") == course.SmiHeader(None, None)


def test_the_illustrated_t4_could_run_the_course_and_runs_capped_as_lesson_00_says():
    """Its driver supports the CUDA the course's PyTorch wheels are built for (cu130), in every illustrated report;
    under the long matmul (SM 100%) it sits at its 70 W limit with its SM clock far below the 1590 MHz boost, as a T4
    sustaining about a third of its peak does, and returns to the boost clock when the load ends."""
    assert tuple(int(v) for v in course.smi_header(smi_mod._SMI).cuda_version.split(".")) >= (13, 0)
    assert re.search(r"CUDA Version\s+: 13\.0", smi_mod._PERFORMANCE)
    head = smi_mod._DMON.splitlines()[0].lstrip("# ").split()
    rows = [dict(zip(head, line.split())) for line in smi_mod._DMON.splitlines()[2:]]
    loaded = [r for r in rows if int(r["sm"]) == 100]
    assert loaded and all(int(r["pwr"]) >= 68 and int(r["pclk"]) <= 0.75 * 1590 for r in loaded)
    assert int(rows[-1]["pclk"]) == 1590 and int(rows[-1]["pwr"]) < 40
