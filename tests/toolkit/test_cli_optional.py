"""``python -m gpulab`` without the optional packages (torch, TensorFlow, MLflow, TensorBoard, pytest, nbclient):
every command ends in one clear line and an exit code, never a traceback; ``runs`` says what is missing or which
port is taken before it starts anything, and what a UI that exited early printed."""
from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpulab import __main__ as cli

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("torch", "torchvision", "triton", "tensorflow", "keras", "mlflow", "tensorboard", "nvidia", "onnx",
            "onnxruntime", "onnxscript", "numba", "pytest", "nbclient", "nbformat", "ipykernel")
WITHOUT = textwrap.dedent(f"""
    import sys
    for name in {OPTIONAL!r}:
        sys.modules[name] = None          # as if never installed: import fails, importlib.util.find_spec is None
    from gpulab.__main__ import main
    sys.exit(main(sys.argv[1:]))
""")


def _run(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", WITHOUT, *argv], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=180)


@pytest.mark.parametrize("argv, codes, last", [
    (("version",), {0}, None),
    (("doctor",), {0}, None),
    (("limits", "--device", "cpu"), {0, 2}, "gpulab limits: "),        # numpy's ceilings, or one line
    (("limits", "--device", "cuda"), {2}, "python -m gpulab: error: device='cuda' needs PyTorch"),
    (("devicequery",), {0}, None),
    (("monitor", "--duration", "0.3", "--interval", "0.1"), {0}, None),
    (("runs",), {2}, "gpulab runs: mlflow and tensorboard are not installed: pip install mlflow tensorboard"),
    (("check", "--no-limits", "--notebooks", "00", "--out", "{tmp}"), {1},
     "gpulab check: FAILED: tests/gpu not run: pytest is not installed"),
    (("check", "--no-limits", "--no-tests", "--notebooks", "00", "--out", "{tmp}"), {1},
     "gpulab check: incomplete: notebooks not run: nbclient and ipykernel are missing"),
    (("nonsense",), {2}, "python -m gpulab: error: argument command: invalid choice"),
    (("monitor", "--interval", "0"), {2}, "python -m gpulab: error: --interval: interval must be"),
])
def test_every_command_ends_in_one_clear_line(tmp_path, argv, codes, last):
    out = _run(*(a.replace("{tmp}", str(tmp_path / "check")) for a in argv), cwd=tmp_path)
    assert out.returncode in codes, out.stdout + out.stderr
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    err = [line for line in out.stderr.splitlines() if line.strip()]
    if out.returncode:
        assert err and err[-1].startswith(last), out.stdout + out.stderr
        if last.startswith("gpulab "):                          # not a usage error: that one line is all
            assert err == [err[-1]], err
    if argv[0] == "runs":
        assert "gpulab[tracking]" in err[-1] and not (tmp_path / "runs").exists()


# ---- the boundary, in process ------------------------------------------------------------------------------------
def test_an_optional_packages_import_error_is_one_line_with_exit_code_2(monkeypatch, capsys):
    import gpulab.limits

    def needs_mlflow(device=None):
        monkeypatch.setitem(sys.modules, "mlflow", None)
        import mlflow  # noqa: F401

    monkeypatch.setattr(gpulab.limits, "machine_limits", needs_mlflow)
    assert cli.main(["limits"]) == 2
    out, err = capsys.readouterr()
    assert err == "gpulab limits: mlflow is not installed: pip install mlflow tensorboard (the 'gpulab[tracking]' " \
                  "extra)\n" and out == ""

    def checked_style(device=None):
        raise ImportError("machine_limits() needs torch, which is not installed: pip install torch torchvision\n"
                          "(the 'gpulab[torch]' extra)")

    monkeypatch.setattr(gpulab.limits, "machine_limits", checked_style)
    assert cli.main(["limits"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpulab limits: machine_limits() needs torch") and "extra)" in err


def test_a_broken_gpulab_module_is_not_hidden(monkeypatch):
    import gpulab.limits

    def broken(device=None):
        raise ModuleNotFoundError("No module named 'gpulab.nope'", name="gpulab.nope")

    monkeypatch.setattr(gpulab.limits, "machine_limits", broken)
    with pytest.raises(ModuleNotFoundError, match="gpulab.nope"):
        cli.main(["limits"])


def test_runs_says_which_port_is_taken_before_starting_anything(tmp_path, capsys):
    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("tensorboard") is None:
        pytest.skip("MLflow and TensorBoard are the tracking extra")
    with socket.socket() as held, socket.socket() as free:
        held.bind(("127.0.0.1", 0))
        held.listen()
        free.bind(("127.0.0.1", 0))
        taken, other = held.getsockname()[1], free.getsockname()[1]
        free.close()
        code = cli.main(["runs", "--root", str(tmp_path / "runs"), "--mlflow-port", str(other),
                         "--tensorboard-port", str(taken)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"port {taken} of 127.0.0.1, TensorBoard's, is taken" in err and "--tensorboard-port" in err


def test_a_ui_that_exits_early_is_reported_with_what_it_printed(tmp_path, capsys):
    from gpulab.tracking import UICommands

    fails = (sys.executable, "-c", "import sys; print('starting', file=sys.stderr); "
                                   "sys.exit(print('Error: no such backend store', file=sys.stderr) or 3)")
    sleeps = (sys.executable, "-c", "import time; time.sleep(60)")
    code = cli._serve_uis(UICommands(tmp_path / "runs", fails, sleeps, "http://127.0.0.1:1", "http://127.0.0.1:2"))
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines()[-1] == ("gpulab runs: MLflow exited with code 3; its last words: Error: no such backend "
                                    "store; stopping TensorBoard too")
    assert "port" not in err.splitlines()[-1]


def test_check_without_pytest_says_so_in_its_last_line(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pytest" else real(name, *a))
    code = cli.main(["check", "--no-limits", "--notebooks", "none", "--out", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 1 and "FAILED" in out
    assert err.splitlines()[-1].startswith("gpulab check: FAILED: tests/gpu not run: pytest is not installed here")
    assert "pip install pytest" in err


def test_runs_on_a_folder_without_runs_or_under_a_file_says_so_in_one_line(tmp_path, capsys):
    if importlib.util.find_spec("mlflow") is None or importlib.util.find_spec("tensorboard") is None:
        pytest.skip("MLflow and TensorBoard are the tracking extra")
    with socket.socket() as a, socket.socket() as b:
        a.bind(("127.0.0.1", 0))
        b.bind(("127.0.0.1", 0))
        ports = [str(a.getsockname()[1]), str(b.getsockname()[1])]
    code = cli.main(["runs", "--root", str(tmp_path / "empty"), "--mlflow-port", ports[0], "--tensorboard-port", ports[1]])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "no runs logged in" in err and "$GPULAB_RUNS" in err
    assert not (tmp_path / "empty").exists()                          # nothing created, nothing started
    (tmp_path / "file").write_text("")
    code = cli.main(["runs", "--root", str(tmp_path / "file" / "sub"), "--mlflow-port", ports[0],
                     "--tensorboard-port", ports[1]])
    err = capsys.readouterr().err
    assert code == 2 and "is a file, not a folder of runs" in err and "Traceback" not in err
