"""course.nvidia_smi: the labelled illustration where nvidia-smi is missing, the real tool where it exists
(faked here: this machine has no NVIDIA driver), and the header's versions."""
from __future__ import annotations

import importlib
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
    assert course.smi_header(smi_mod._SMI) == course.SmiHeader("550.54.15", "12.4")
    assert course.smi_header("Driver Version: 470.1   CUDA Version: N/A") == course.SmiHeader("470.1", None)
    assert course.smi_header("no header") == course.SmiHeader(None, None)
