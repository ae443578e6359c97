"""gl.tracking when processes die: a run killed outright keeps every point it logged in MLflow and TensorBoard
and reads back as DEAD; the flush thread never outlives its run; `python -m gpulab runs` takes its UIs down
with it; and `python -m gpulab monitor --csv` checks where it writes before it records."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from gpulab import tracking

ROOT = Path(__file__).resolve().parents[3]
POINTS = 50


@pytest.fixture(scope="module")
def mlflow():
    return pytest.importorskip("mlflow")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _tb_scalars(folder: Path, tag: str) -> list[tuple[int, float]]:
    """(step, value) of every scalar ``tag`` in the folder's event files, read with TensorBoard's own loader."""
    from gpulab._tf import preload_triton

    preload_triton()                   # TensorBoard's loader imports TensorFlow when installed: Triton first
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.util import tensor_util

    found = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                if value.tag == tag:
                    number = value.simple_value if value.HasField("simple_value") else \
                        float(tensor_util.make_ndarray(value.tensor))
                    found.append((event.step, number))
    return found


def _flush_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("gpulab-tracking-flush")]


def test_points_reach_both_stores_within_a_second_and_the_thread_ends_with_the_run(mlflow, tmp_path):
    pytest.importorskip("tensorboard")
    with tracking.track("quiet-after", root=tmp_path) as run:
        assert len(_flush_threads()) == 1
        for step in range(3):
            run.log_metrics({"loss": 1.0 / (step + 1)}, step=step)
        client = mlflow.MlflowClient(tracking_uri=run.record.tracking_uri)
        deadline = time.monotonic() + 3                       # ~1 s is the promise; 3 s on a busy machine
        while (len(client.get_metric_history(run.record.run_id, "loss")) < 3 or
               len(_tb_scalars(run.record.tensorboard_dir, "loss")) < 3) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [m.step for m in client.get_metric_history(run.record.run_id, "loss")] == [0, 1, 2]
        assert [s for s, _ in _tb_scalars(run.record.tensorboard_dir, "loss")] == [0, 1, 2]
    assert _flush_threads() == []
    with pytest.raises(ValueError):
        with tracking.track("refused", root=tmp_path, tags={"gpulab.pid": "1"}):
            pass
    assert _flush_threads() == []


KILLED = textwrap.dedent(f"""
    import sys, time
    import gpulab.tracking as tracking
    with tracking.track("killed", root=sys.argv[1], params={{"lr": 0.1}}) as run:
        for step in range({POINTS}):
            run.log_metrics({{"loss": step / 100}}, step=step)
        print("logged", run.record.run_id, run.record.tensorboard_dir, flush=True)
        time.sleep(600)
""")


def test_a_killed_run_keeps_every_point_and_reads_as_dead(mlflow, tmp_path):
    pytest.importorskip("tensorboard")
    root = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    try:
        line = proc.stdout.readline()                     # blocks until "logged" (or the child's end)
        assert line.startswith("logged"), proc.stderr.read() if proc.poll() is not None else line
        _, run_id, tb_dir = line.split()
        time.sleep(2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    loss = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in loss) == list(range(POINTS))
    assert sorted(_tb_scalars(Path(tb_dir), "loss")) == [(s, pytest.approx(s / 100)) for s in range(POINTS)]
    assert client.get_run(run_id).info.status == "RUNNING"           # as the killed process left it
    tags = client.get_run(run_id).data.tags
    assert {"gpulab.host", "gpulab.pid", "gpulab.pid_start"} <= set(tags) and tags["gpulab.pid"] == str(proc.pid)
    table = tracking.runs(root=root)
    assert table.run("killed").status == "DEAD" and table.run("killed").params == {"lr": "0.1"}
    text = repr(table)
    assert "DEAD" in text and "its process ended without closing it" in text
    assert client.get_run(run_id).info.status == "RUNNING"           # reading wrote nothing


def test_a_reused_pid_reads_as_dead_and_a_live_one_as_running():
    from gpulab.tracking import _guard

    mine = _guard.process_tags()
    assert _guard.status("RUNNING", mine) == "RUNNING" and _guard.status("FINISHED", mine) == "FINISHED"
    assert _guard.status("RUNNING", {**mine, "gpulab.pid_start": str(float(mine["gpulab.pid_start"]) - 3600)}) == "DEAD"
    assert _guard.status("RUNNING", {**mine, "gpulab.host": "another-machine"}) == "RUNNING"   # cannot tell
    assert _guard.status("RUNNING", {}) == "RUNNING"


EXIT_OPEN = textwrap.dedent("""
    import sys
    import gpulab.tracking as tracking
    run = tracking.track("left-open", root=sys.argv[1], tensorboard=False).__enter__()
    run.log_metrics({"loss": 0.5}, step=0)
    print(run.record.run_id, flush=True)
""")


def test_a_run_left_open_at_exit_is_ended_as_killed(mlflow, tmp_path):
    out = subprocess.run([sys.executable, "-c", EXIT_OPEN, str(tmp_path)], capture_output=True, text=True,
                         env=_env(), cwd=tmp_path, timeout=120)
    assert out.returncode == 0, out.stderr
    got = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(out.stdout.split()[0])
    assert got.info.status == "KILLED" and got.data.metrics == {"loss": 0.5}


SLEEPER = "import os, sys, time; open(sys.argv[1] + '.tmp', 'w').write(str(os.getpid())); " \
          "os.replace(sys.argv[1] + '.tmp', sys.argv[1]); time.sleep(600)"
SERVE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from gpulab.__main__ import _serve_uis
    from gpulab.tracking import UICommands
    root, a, b = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    sleeper = lambda pidfile: (sys.executable, "-c", sys.argv[4], pidfile)
    _serve_uis(UICommands(root, sleeper(a), sleeper(b), "http://127.0.0.1:1", "http://127.0.0.1:2"))
""")


def test_killing_gpulab_runs_takes_both_uis_with_it(tmp_path):
    psutil = pytest.importorskip("psutil")
    pidfiles = [tmp_path / "mlflow.pid", tmp_path / "tensorboard.pid"]
    serve = subprocess.Popen([sys.executable, "-c", SERVE, str(tmp_path / "runs"), *map(str, pidfiles), SLEEPER],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path)
    pids: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while not all(p.exists() for p in pidfiles):
            assert serve.poll() is None, serve.stderr.read()
            assert time.monotonic() < deadline, "the two children did not start in 60 s"
            time.sleep(0.1)
        pids = [int(p.read_text()) for p in pidfiles]
        serve.send_signal(signal.SIGKILL)
        serve.wait(timeout=30)

        def gone(pid: int) -> bool:
            try:
                return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                return True

        deadline = time.monotonic() + 15
        while not all(gone(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in pids if not gone(p)] == []
    finally:
        for pid in pids:
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass
        if serve.poll() is None:
            serve.kill()
            serve.wait(timeout=30)


def test_monitor_refuses_a_csv_path_it_cannot_write_before_recording(tmp_path):
    missing = tmp_path / "no-such-folder"
    for bad, words in [(str(missing / "x.csv"), f"the folder {missing} does not exist"), (str(tmp_path), "is a folder")]:
        start = time.monotonic()
        out = subprocess.run([sys.executable, "-m", "gpulab", "monitor", "--duration", "0.2", "--csv", bad],
                             capture_output=True, text=True, env=_env(), cwd=tmp_path, timeout=120)
        assert out.returncode == 2, out.stdout + out.stderr
        assert words in out.stderr and bad in out.stderr and "every" not in out.stdout   # nothing sampled
        assert time.monotonic() - start < 60
    assert not missing.exists()


def test_monitor_saves_the_recording_elsewhere_when_writing_fails_at_the_end(tmp_path, monkeypatch, capsys):
    from gpulab import __main__ as cli
    from gpulab.telemetry.trace import Trace

    target = tmp_path / "samples.csv"
    real = Trace.to_csv

    def failing(self, path):
        if Path(path) == target:
            raise OSError(28, "No space left on device")
        return real(self, path)

    monkeypatch.setattr(Trace, "to_csv", failing)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)                # TMPDIR is read again
    assert cli._monitor(0.05, 0.3, str(target)) == 1
    out = capsys.readouterr().out
    saved = list((tmp_path / "tmp").glob("gpulab-monitor-*.csv"))
    assert len(saved) == 1 and str(saved[0]) in out and str(target) in out and "No space left" in out
    assert saved[0].read_text().startswith("t_s,") and not target.exists()
