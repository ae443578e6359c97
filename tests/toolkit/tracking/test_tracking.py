"""gl.tracking: a run's params, per-step metrics and Monitor telemetry land in MLflow's SQLite store and in
TensorBoard's event files (read back with their own readers), the trace is rebuilt exactly, failures are
recorded, bad input is refused by name, and `python -m gpulab runs` starts both UIs and leaves nothing behind."""
from __future__ import annotations

import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import gpulab as gl
from gpulab import tracking
from gpulab.telemetry.trace import Mark, Trace

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def mlflow():
    return pytest.importorskip("mlflow")


def gpu_trace() -> Trace:
    """A host + GPU trace as Monitor records one: ints, floats, a bool column with gaps, missing values."""
    rows = []
    for i in range(6):
        t, wall = i * 0.1, 1.7e9 + i * 0.1
        rows.append({"t_s": t, "wall_time": wall, "device": "host", "source": "host", "cpu_util_pct": 40.0 + i,
                     "process_cpu_pct": 90.5, "rss_bytes": 2**30 + i})
        rows.append({"t_s": t, "wall_time": wall, "device": "gpu0", "source": "nvml", "gpu_util_pct": 20.0 * (i % 2),
                     "mem_used_bytes": 3 * 2**30, "mem_total_bytes": 16 * 2**30,
                     "power_w": None if i == 2 else 70.25, "throttled": i == 4, "throttle_reasons": 0x4 if i == 4 else 0})
    return Trace(pd.DataFrame(rows), 0.1, marks=(Mark("data", 0.0, 0.2), Mark("eval", 0.4)), duration_s=0.6,
                 sampler_cpu_s=0.01, notes=("a note",), devices_info={"gpu0": "Tesla T4 (GPU-1234)"})


@pytest.fixture(scope="module")
def logged(mlflow, tmp_path_factory):
    """One run logged like a lesson would: params, five steps of metrics, a real Monitor's trace, a text."""
    root, cwd = tmp_path_factory.mktemp("runs"), tmp_path_factory.mktemp("cwd")
    old_cwd, uri_before = os.getcwd(), mlflow.get_tracking_uri()
    os.chdir(cwd)                                  # nothing may land in the working directory
    try:
        with tracking.track("baseline", params={"lr": 0.1, "batch": 64, "amp": True, "note": None}, root=root,
                            tags={"lesson": "12"}) as run:
            with gl.Monitor(interval=0.05) as mon:
                mon.mark("start")
                x = np.random.default_rng(0).random((200, 200))
                for step in range(5):
                    x = x @ x.T / 200
                    run.log_metrics({"loss": 1.0 / (step + 1), "accuracy": step / 10}, step=step)
                    time.sleep(0.03)
            run.log_trace(mon.trace)
            run.log_text("notes/setup.md", "# setup\nCPU only")
            inside = run.record
    finally:
        os.chdir(old_cwd)
    assert mlflow.get_tracking_uri() == uri_before and mlflow.active_run() is None   # no global state changed
    assert list(cwd.iterdir()) == []
    return root, run, mon.trace, inside


def test_the_run_lands_in_the_mlflow_store(logged, mlflow):
    root, run, trace, inside = logged
    rec = run.record
    assert inside.status == "RUNNING" and rec.status == "FINISHED"
    assert rec.tracking_uri == f"sqlite:///{root / 'mlflow.db'}" and (root / "mlflow.db").is_file()
    client = mlflow.MlflowClient(tracking_uri=rec.tracking_uri)          # a fresh client reads it back
    got = client.get_run(rec.run_id)
    assert got.info.status == "FINISHED" and got.info.run_name == "baseline"
    assert got.data.params == {"lr": "0.1", "batch": "64", "amp": "True", "note": "None"}
    assert got.data.tags["lesson"] == "12" and got.data.tags["gpulab.trace"] == "1"
    loss = client.get_metric_history(rec.run_id, "loss")
    assert [m.step for m in loss] == [0, 1, 2, 3, 4]
    assert [m.value for m in loss] == pytest.approx([1, 1 / 2, 1 / 3, 1 / 4, 1 / 5])
    host = trace.device_frame("host")
    cpu = client.get_metric_history(rec.run_id, "telemetry/host/cpu_util_pct")
    sampled = [(i, v, w) for i, (v, w) in enumerate(zip(host["cpu_util_pct"], host["wall_time"])) if pd.notna(v)]
    assert len(sampled) >= len(host) - 1                              # the first sample may have no CPU window yet
    assert [m.step for m in cpu] == [i for i, _, _ in sampled]
    assert [m.value for m in cpu] == pytest.approx([v for _, v, _ in sampled])
    assert [m.timestamp for m in cpu] == [int(w * 1000) for _, _, w in sampled]
    assert rec.metrics == {"loss": 0.2, "accuracy": 0.4}                # telemetry is not among the latest values
    assert rec.points == 10 + sum(host[c].notna().sum() for c in host.columns
                                  if c not in ("wall_time", "device", "source"))
    artifacts = got.info.artifact_uri
    assert artifacts.startswith((root / "mlartifacts").as_uri())
    assert sorted(a.path for a in client.list_artifacts(rec.run_id, "telemetry")) == [
        "telemetry/trace.csv", "telemetry/trace.json"]
    assert Path(client.download_artifacts(rec.run_id, "notes/setup.md", str(root.parent))).read_text() == "# setup\nCPU only"


def test_the_run_lands_in_tensorboard(logged):
    pytest.importorskip("tensorboard")
    from gpulab._tf import preload_triton

    preload_triton()                   # EventAccumulator imports TensorFlow when installed: Triton first
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root, run, trace, _ = logged
    tb = run.record.tensorboard_dir
    assert tb == root / "tensorboard" / "gpulab" / f"baseline-{run.record.run_id[:8]}"
    acc = EventAccumulator(str(tb))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert {"loss", "accuracy", "telemetry/host/cpu_util_pct", "telemetry/host/rss_bytes"} <= set(tags)
    loss = acc.Scalars("loss")
    assert [e.step for e in loss] == [0, 1, 2, 3, 4] and [e.value for e in loss] == pytest.approx([1, .5, 1 / 3, .25, .2])
    rss = acc.Scalars("telemetry/host/rss_bytes")
    assert [e.value for e in rss] == pytest.approx(trace.device_frame("host")["rss_bytes"].tolist(), rel=1e-6)
    assert [e.wall_time for e in rss] == pytest.approx(trace.frame["wall_time"].tolist())


def test_event_writer_imports_neither_tensorflow_nor_torch_and_tensorboard_reads_its_scalars(tmp_path):
    """The event file is written without TensorFlow or torch (TensorBoard's own writers import TensorFlow when
    it is installed); TensorBoard's EventAccumulator reads its points back as scalars."""
    pytest.importorskip("tensorboard")
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from gpulab.tracking import _store
        w = _store.EventWriter(Path({str(tmp_path)!r}))
        w.scalar("loss", 0.5, 3, 1000.0)
        w.scalar("loss", 0.25, 4, 1001.0)
        w.close()
        print(sorted({{"torch", "tensorflow"}} & set(sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    from gpulab._tf import preload_triton

    preload_triton()                   # EventAccumulator imports TensorFlow when installed: Triton first
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["loss"]
    assert [(e.step, e.value, e.wall_time) for e in acc.Scalars("loss")] == [(3, 0.5, 1000.0), (4, 0.25, 1001.0)]


def test_load_trace_rebuilds_the_logged_trace(logged):
    root, run, trace, _ = logged
    for ref in (run.record, run.record.run_id, "baseline"):
        back = tracking.load_trace(ref, root=root)
        pd.testing.assert_frame_equal(back.frame, trace.frame)
        assert (back.interval_s, back.marks, back.notes, back.duration_s, back.sampler_cpu_s) == (
            trace.interval_s, trace.marks, trace.notes, trace.duration_s, trace.sampler_cpu_s)
    assert back.diagnose().verdict == trace.diagnose().verdict          # the replay: same verdict
    assert len(back.plot().axes) >= 2


def test_a_gpu_trace_round_trips_through_both_stores(mlflow, tmp_path):
    trace = gpu_trace()
    for kwargs in ({}, {"mlflow": False}):                              # MLflow artifacts, or beside the events
        with tracking.track("gpu", root=tmp_path, **kwargs) as run:
            run.log_trace(trace)
        back = tracking.load_trace(run.record)
        pd.testing.assert_frame_equal(back.frame, trace.frame)
        assert back.marks == trace.marks and back.devices_info == trace.devices_info
        assert back.summary().device("gpu0").throttled_s == trace.summary().device("gpu0").throttled_s
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    rid = tracking.runs(root=tmp_path).run("gpu").run_id
    throttled = client.get_metric_history(rid, "telemetry/gpu0/throttled")
    assert [(m.step, m.value) for m in throttled] == [(i, float(i == 4)) for i in range(6)]
    power = client.get_metric_history(rid, "telemetry/gpu0/power_w")   # the missing sample is left out
    assert [m.step for m in power] == [0, 1, 3, 4, 5]
    assert not [k for k in client.get_run(rid).data.metrics if k.startswith("telemetry/host/gpu")]


def test_a_monitor_with_scripted_gpus_is_logged(mlflow, tmp_path, monkeypatch):
    from support import fake_nvml
    from gpulab.telemetry import nvml

    fake = fake_nvml.make_module()
    nvml._reset()
    monkeypatch.setattr(nvml, "_load", lambda: fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        with tracking.track("gpus", root=tmp_path, tensorboard=False) as run:
            with gl.Monitor(interval=0.05) as mon:
                time.sleep(0.4)
            run.log_trace(mon.trace)
    finally:
        nvml._reset()
    back = tracking.load_trace("gpus", root=tmp_path)
    pd.testing.assert_frame_equal(back.frame, mon.trace.frame)
    assert back.diagnose().verdict == mon.trace.diagnose().verdict
    client = mlflow.MlflowClient(tracking_uri=run.record.tracking_uri)
    logged = client.get_run(run.record.run_id).data.metrics
    assert {"telemetry/gpu0/gpu_util_pct", "telemetry/gpu0/power_w", "telemetry/host/cpu_util_pct"} <= set(logged)


@pytest.mark.parametrize("exc, status", [(RuntimeError, "FAILED"), (KeyboardInterrupt, "KILLED")])
def test_a_failing_block_is_recorded_and_the_error_goes_on(mlflow, tmp_path, exc, status):
    with pytest.raises(exc, match="boom"):
        with tracking.track("crash", root=tmp_path) as run:
            run.log_metrics({"loss": 2.0}, step=0)
            raise exc("boom")
    assert run.record.status == status
    client = mlflow.MlflowClient(tracking_uri=run.record.tracking_uri)
    got = client.get_run(run.record.run_id)
    assert got.info.status == status and got.data.metrics == {"loss": 2.0}      # what was logged is kept
    with pytest.raises(RuntimeError, match="has ended"):
        run.log_metrics({"loss": 1.0}, step=1)
    with pytest.raises(RuntimeError, match="has not started"):
        tracking.track("x", root=tmp_path).log_metrics({"loss": 1.0}, step=0)


def test_runs_lists_the_experiment_as_a_table(logged):
    root, run, _, _ = logged
    with tracking.track("bf16", params={"lr": 0.2, "precision": "bf16"}, root=root, tensorboard=False) as other:
        other.log_metrics({"loss": 0.1}, step=3)
    with tracking.track("elsewhere", root=root, experiment="other", tensorboard=False):
        pass
    table = tracking.runs(root=root)
    names = [r.name for r in table.rows]
    assert "elsewhere" not in names and names.index("baseline") < names.index("bf16")
    bf16 = table.run("bf16")
    assert bf16.params == {"lr": "0.2", "precision": "bf16"} and bf16.metrics == {"loss": 0.1}
    assert table.run("baseline").trace_logged and table.run("baseline").tensorboard_dir == run.record.tensorboard_dir
    text = repr(table)
    assert text.startswith("Runs of experiment 'gpulab'") and "precision" in text and "FINISHED" in text
    assert "telemetry/" not in text
    html = table._repr_html_()
    assert "<table" in html and "bf16" in html
    df = table.to_dataframe()
    assert df.loc[bf16.run_id, "params.precision"] == "bf16" and df.loc[bf16.run_id, "metrics.loss"] == 0.1
    assert df.loc[run.record.run_id, "metrics.loss"] == 0.2 and df.loc[run.record.run_id, "trace"]
    assert [r.name for r in tracking.runs("other", root=root).rows] == ["elsewhere"]
    with pytest.raises(KeyError, match="no run 'nope'"):
        table.run("nope")


def test_tracked_run_renders_in_ten_lines(logged):
    rec = logged[1].record
    text = repr(rec)
    assert len(text.splitlines()) <= 10
    assert "baseline (FINISHED)" in text and "lr=0.1" in text and "loss=0.2" in text and "trace logged" in text
    assert "<table" in rec._repr_html_()


def test_bad_input_is_refused_by_name(logged, tmp_path):
    root = logged[0]
    with tracking.track("checks", root=root, tensorboard=False) as run:
        for metrics, step, error, match in [
            ({"loss": float("nan")}, 0, ValueError, "metric 'loss'.*nan"),
            ({"loss": math.inf}, 0, ValueError, "metric 'loss'.*inf"),
            ({"loss": 1.0}, -1, ValueError, "step.*-1"),
            ({"loss": 1.0}, 1.5, TypeError, "step.*1.5"),
            ({"loss": True}, 0, TypeError, "metric 'loss'"),
            ({"loss": "1"}, 0, TypeError, "metric 'loss'"),
            ({"": 1.0}, 0, ValueError, "metric names"),
            ({"a|b": 1.0}, 0, ValueError, "'a|b'"),
            ([("loss", 1.0)], 0, TypeError, "metrics must be a mapping"),
        ]:
            with pytest.raises(error, match=match):
                run.log_metrics(metrics, step=step)
        run.log_params({"lr": 0.1})
        run.log_params({"lr": 0.1})                                   # the same value again is fine
        with pytest.raises(ValueError, match="'lr'"):
            run.log_params({"lr": 0.2})
        with pytest.raises(TypeError, match="param 'layers'"):
            run.log_params({"layers": [1, 2]})
        with pytest.raises(TypeError, match="Trace"):
            run.log_trace(pd.DataFrame())
        run.log_trace(gpu_trace())
        with pytest.raises(ValueError, match="already holds a trace"):
            run.log_trace(gpu_trace())
        for bad in ("", "/abs.txt", "../up.txt", "dir/"):
            with pytest.raises(ValueError, match="filename"):
                run.log_text(bad, "x")
        with pytest.raises(ValueError, match=r"\.png"):
            run.log_figure(object(), "fig.gif")
    assert run.record.metrics == {}                                  # nothing half-logged
    for kwargs, error, match in [({"name": ""}, ValueError, "name"), ({"name": 3}, TypeError, "name"),
                                 ({"name": "x", "experiment": ""}, ValueError, "experiment"),
                                 ({"name": "x", "mlflow": False, "tensorboard": False}, ValueError, "nothing"),
                                 ({"name": "x", "mlflow": 1}, TypeError, "mlflow"),
                                 ({"name": "x", "root": 3}, TypeError, "root"),
                                 ({"name": "x", "params": {"p": object()}}, TypeError, "param 'p'")]:
        with pytest.raises(error, match=match):
            tracking.track(**kwargs)
    with pytest.raises(ValueError, match=r"no experiment 'nope'.*'gpulab'"):
        tracking.runs("nope", root=root)
    with pytest.raises(ValueError, match="no MLflow store"):
        tracking.runs(root=tmp_path / "empty")
    with pytest.raises(ValueError, match="no run id or run name 'nope-run'.*'baseline'"):
        tracking.load_trace("nope-run", root=root)
    no_trace = tracking.track("plain", root=root, tensorboard=False)
    with no_trace as r:
        r.log_metrics({"loss": 1.0}, step=0)
    with pytest.raises(ValueError, match="'plain'.*logged no trace"):
        tracking.load_trace(r.record)
    with pytest.raises(TypeError, match="run must be"):
        tracking.load_trace(42, root=root)


def test_logging_stays_quiet_and_mlflow_loggers_are_restored(mlflow, tmp_path, capfd):
    levels = {n: logging.getLogger(n).level for n in ("mlflow", "alembic")}
    with tracking.track("quiet", root=tmp_path / "fresh") as run:     # a new store: migrations run
        run.log_metrics({"loss": 1.0}, step=0)
    tracking.runs(root=tmp_path / "fresh")
    out, err = capfd.readouterr()
    assert "Creating initial MLflow database tables" not in out + err and "INFO" not in out + err, err
    assert {n: logging.getLogger(n).level for n in ("mlflow", "alembic")} == levels


def test_tensorboard_only_run_keeps_its_artifacts_beside_the_events(tmp_path):
    pytest.importorskip("tensorboard")
    import matplotlib.pyplot as plt

    with tracking.track("tb", root=tmp_path, mlflow=False) as run:
        run.log_metrics({"loss": 1.0}, step=0)
        fig = plt.figure()
        run.log_figure(fig, "figures/loss.png")
        plt.close(fig)
        run.log_text("notes.txt", "hi")
    rec = run.record
    assert rec.tracking_uri is None and len(rec.run_id) == 32 and not (tmp_path / "mlflow.db").exists()
    assert (rec.tensorboard_dir / "artifacts" / "figures" / "loss.png").read_bytes()[:4] == b"\x89PNG"
    assert any(p.name.startswith("events.out.tfevents") for p in rec.tensorboard_dir.iterdir())
    assert "not logged" in repr(rec)


def test_ui_commands():
    cmds = tracking.ui_commands("/data/runs", mlflow_port=5050, tensorboard_port=6060)
    assert cmds.mlflow_argv == (sys.executable, "-m", "mlflow", "ui", "--backend-store-uri",
                                "sqlite:////data/runs/mlflow.db", "--artifacts-destination", "file:///data/runs/mlartifacts",
                                "--host", "127.0.0.1", "--port", "5050", "--workers", "1")
    assert cmds.tensorboard_argv == (sys.executable, "-m", "tensorboard.main", "--logdir", "/data/runs/tensorboard",
                                     "--host", "127.0.0.1", "--port", "6060")
    assert (cmds.mlflow_url, cmds.tensorboard_url) == ("http://127.0.0.1:5050", "http://127.0.0.1:6060")
    text = repr(cmds)
    assert "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" in text and "--port 6060" in text and len(text.splitlines()) == 6
    assert "<table" in cmds._repr_html_()
    for kwargs, error in [({"mlflow_port": 0}, ValueError), ({"mlflow_port": "80"}, TypeError),
                          ({"mlflow_port": 6006}, ValueError)]:
        with pytest.raises(error, match="port"):
            tracking.ui_commands("/data/runs", **kwargs)


def test_ui_commands_turn_mlflow_telemetry_off_unless_you_chose(monkeypatch):
    for name in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK"):
        monkeypatch.delenv(name, raising=False)
    assert tracking.ui_commands("/data/runs").mlflow_env["MLFLOW_DISABLE_TELEMETRY"] == "true"
    monkeypatch.setenv("DO_NOT_TRACK", "false")
    assert "MLFLOW_DISABLE_TELEMETRY" not in tracking.ui_commands("/data/runs").mlflow_env


def test_root_defaults_to_gpulab_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("GPULAB_RUNS", str(tmp_path / "mine"))
    assert tracking.ui_commands().root == tmp_path / "mine"
    monkeypatch.delenv("GPULAB_RUNS")
    monkeypatch.chdir(tmp_path)
    assert tracking.ui_commands().root == tmp_path / "runs"


def test_without_mlflow_one_clear_import_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "mlflow", None)                 # as if not installed
    with pytest.raises(ImportError, match="pip install mlflow"):
        with tracking.track("x", root=tmp_path, tensorboard=False):
            pass
    (tmp_path / "mlflow.db").touch()
    with pytest.raises(ImportError, match="pip install mlflow"):
        tracking.runs(root=tmp_path)


def test_import_gpulab_leaves_mlflow_and_tensorboard_unloaded():
    code = textwrap.dedent("""
        import sys, gpulab
        gpulab.tracking.ui_commands("runs")
        print(sorted({"mlflow", "tensorboard", "torch", "tensorflow"} & set(sys.modules)))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def test_cli_runs_starts_both_uis_and_stops_them_all(mlflow, tmp_path):
    pytest.importorskip("tensorboard")
    psutil = pytest.importorskip("psutil")
    ports = _free_port(), _free_port()
    (tmp_path / "runs" / "tensorboard").mkdir(parents=True)           # a store with nothing in it yet
    log = (tmp_path / "cli.log").open("w")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cli = subprocess.Popen([sys.executable, "-m", "gpulab", "runs", "--root", str(tmp_path / "runs"),
                            "--mlflow-port", str(ports[0]), "--tensorboard-port", str(ports[1])],
                           stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    family: list = []
    try:
        deadline = time.monotonic() + 90
        urls = [f"http://127.0.0.1:{p}/" for p in ports]
        while not all(_answers(u) for u in urls):
            assert cli.poll() is None, (tmp_path / "cli.log").read_text()
            assert time.monotonic() < deadline, "the UIs did not answer in 90 s:\n" + (tmp_path / "cli.log").read_text()
            time.sleep(0.5)
        family = psutil.Process(cli.pid).children(recursive=True)
        assert len(family) >= 2
        assert all("huey" not in " ".join(p.cmdline()) for p in family)   # the job runner is off
        cli.send_signal(signal.SIGTERM)
        assert cli.wait(timeout=30) == 0
        gone, alive = psutil.wait_procs(family, timeout=5)
        alive = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert alive == [], [p.cmdline() for p in alive]
        assert not any(_answers(u) for u in urls)
        text = (tmp_path / "cli.log").read_text()
        assert f"http://127.0.0.1:{ports[0]}" in text and f"http://127.0.0.1:{ports[1]}" in text
    finally:
        for p in [psutil.Process(cli.pid)] + family if cli.poll() is None else family:
            try:
                p.kill()
            except psutil.Error:
                pass
        cli.wait(timeout=10)
        log.close()


# ---- stores that cannot be used, reads that write nothing, refused calls that leave nothing ----------
def _real_store(tmp_path: Path) -> Path:
    """A store with one run, written by another process (so this one has nothing of it cached)."""
    root = tmp_path / "real"
    code = ("import sys, gpulab.tracking as t\n"
            "with t.track('one', root=sys.argv[1], tensorboard=False) as run:\n"
            "    run.log_metrics({'loss': 0.5}, step=0)\n")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return root


def _stamp(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_mtime_ns


@pytest.mark.parametrize("kind", ["folder", "garbage", "truncated"])
def test_a_store_that_cannot_be_used_is_a_clear_error_at_once(mlflow, tmp_path, kind, capfd):
    root = tmp_path / kind
    root.mkdir()
    db = root / "mlflow.db"
    if kind == "folder":
        db.mkdir()
        match = "is a folder.*move it away or choose another root"
    elif kind == "garbage":
        db.write_bytes(b"col1,col2\n1,2\n" * 50)
        match = r"not a SQLite database \(corrupt, or another program's file\): move it away or choose another root"
    else:
        data = (_real_store(tmp_path) / "mlflow.db").read_bytes()
        db.write_bytes(data[: len(data) // 2])
        match = "cannot use the MLflow store .*move it away or choose another root"
    for call in (lambda: tracking.track("x", root=root).__enter__(), lambda: tracking.runs(root=root),
                 lambda: tracking.load_trace("x", root=root)):
        start = time.monotonic()
        with pytest.raises(ValueError, match=match) as info:
            call()
        assert time.monotonic() - start < 10 and str(db) in str(info.value)
        assert info.value.__cause__ is None and len(str(info.value)) < 400
    assert "Traceback" not in capfd.readouterr().err
    assert not (root / "tensorboard").exists()


def test_reads_write_nothing(mlflow, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "mlflow.db").touch()
    other = tmp_path / "other"
    other.mkdir()
    import sqlite3

    con = sqlite3.connect(other / "mlflow.db")
    con.execute("CREATE TABLE notes (text TEXT)")
    con.commit()
    con.close()
    for root in (empty, other):
        before = _stamp(root / "mlflow.db")
        time.sleep(0.01)
        for call in (lambda: tracking.runs(root=root), lambda: tracking.load_trace("x", root=root)):
            with pytest.raises(ValueError, match="no runs logged in .*mlflow.db yet"):
                call()
        assert _stamp(root / "mlflow.db") == before and sorted(p.name for p in root.iterdir()) == ["mlflow.db"]
    real = _real_store(tmp_path)
    before = _stamp(real / "mlflow.db")
    code = ("import sys, gpulab.tracking as t\n"
            "print(t.runs(root=sys.argv[1]).run('one').metrics)\n"
            "try:\n    t.load_trace('one', root=sys.argv[1])\nexcept ValueError as e:\n    print('no trace' in str(e) or e)\n")
    out = subprocess.run([sys.executable, "-c", code, str(real)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.split("\n")[:2] == ["{'loss': 0.5}", "True"], out.stdout + out.stderr
    assert _stamp(real / "mlflow.db") == before
    with tracking.track("empty-is-fine", root=empty, tensorboard=False):   # an empty file is an empty store
        pass
    assert [r.name for r in tracking.runs(root=empty).rows] == ["empty-is-fine"]


def test_refused_calls_leave_no_run_behind(mlflow, tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from gpulab.tracking import _store
    from gpulab.tracking.run import Run

    root = tmp_path / "runs"
    with tracking.track("ok", root=root) as run:
        run.log_metrics({"loss": 1.0}, step=0)
    (root / "tensorboard" / "blocked").write_text("in the way")
    (tmp_path / "a-file").write_text("x")
    refused = [(lambda: tracking.track("tb-blocked", root=root, experiment="blocked"), ValueError, "TensorBoard's folder"),
               (lambda: tracking.track("root-file", root=tmp_path / "a-file"), ValueError, "is a file"),
               (lambda: tracking.track("reserved", root=root, tags={"gpulab.trace": "1"}), ValueError, "gpulab.trace")]
    for make, error, match in refused:
        with pytest.raises(error, match=match):
            with make():
                pass
    with monkeypatch.context() as m:                  # failures after MLflow made the run: the run is removed
        m.setattr(_store, "EventWriter", lambda folder: (_ for _ in ()).throw(OSError(28, "No space left on device")))
        with pytest.raises(OSError, match="No space"):
            with tracking.track("tb-full", root=root):
                pass
    with monkeypatch.context() as m:
        m.setattr(Run, "_send", lambda self, **kw: (_ for _ in ()).throw(RuntimeError("the store refused params")))
        with pytest.raises(RuntimeError, match="refused params"):
            with tracking.track("params-refused", root=root, params={"lr": 0.1}):
                pass
    assert [r.name for r in tracking.runs(root=root).rows] == ["ok"]
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    every = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert [r.info.run_name for r in every] == ["ok"] and "FAILED" not in {r.info.status for r in every}
    assert [p.name for p in (root / "tensorboard" / "gpulab").iterdir()] == [f"ok-{run.record.run_id[:8]}"]
    assert (root / "tensorboard" / "blocked").is_file()


def test_reserved_tags_are_refused_by_name(tmp_path):
    for tag in ("gpulab.pid", "gpulab.tensorboard_dir", "mlflow.runName", "mlflow.user"):
        with pytest.raises(ValueError, match=f"tag '{tag}' is reserved"):
            tracking.track("x", root=tmp_path, tags={tag: "mine"})
    assert list(tmp_path.iterdir()) == []
    tracking.track("x", root=tmp_path, tags={"gpulab_note": "fine", "team": "a"})   # made, not started


TELEMETRY = textwrap.dedent("""
    import json, os, sys
    import gpulab.tracking as t
    with t.track("t", root=sys.argv[1]) as run:
        run.log_metrics({"loss": 1.0}, step=0)
    t.runs(root=sys.argv[1])
    import mlflow.telemetry.client as tc
    print(json.dumps({"client": tc.get_telemetry_client() is not None,
                      "env": {k: os.environ.get(k) for k in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")}}))
""")


@pytest.mark.slow
def test_no_file_outside_root_and_no_usage_statistics_unless_asked(mlflow, tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")}
    for k in ("PYTEST_CURRENT_TEST", "CI", "GITHUB_ACTIONS", "GITLAB_CI", "JENKINS_URL", "TRAVIS", "BUILDKITE",
              "CIRCLECI", "TF_BUILD", "TEAMCITY_VERSION", "CODEBUILD_BUILD_ARN", "BITBUCKET_BUILD_NUMBER"):
        base.pop(k, None)
    results = {}
    for case, extra in (("default", {}), ("asked", {"MLFLOW_DISABLE_TELEMETRY": "false"})):
        home, work, tmp = (tmp_path / case / d for d in ("home", "work", "tmp"))
        for d in (home, work, tmp):
            d.mkdir(parents=True)
        env = {**base, **extra, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "TMPDIR": str(tmp),
               "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9", "NO_PROXY": "",
               "PYTHONPATH": str(ROOT)}                 # nothing can leave the machine, even when asked
        out = subprocess.run([sys.executable, "-c", TELEMETRY, str(tmp_path / case / "runs")], capture_output=True,
                             text=True, env=env, cwd=work, timeout=180)
        assert out.returncode == 0, out.stderr
        results[case] = json.loads(out.stdout.strip().splitlines()[-1])
        results[case]["home"] = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
        results[case]["elsewhere"] = [p.name for d in (work, tmp) for p in d.iterdir()]
        if case == "default":                          # Python's default warning filters: nothing shown
            assert "DeprecationWarning" not in out.stderr and "INFO" not in out.stderr, out.stderr
    assert results["default"] == {"client": False, "env": {"MLFLOW_DISABLE_TELEMETRY": None, "DO_NOT_TRACK": None},
                                  "home": [], "elsewhere": []}
    assert results["asked"]["env"]["MLFLOW_DISABLE_TELEMETRY"] == "false"             # the choice is kept...
    from packaging.version import Version

    if not Version(mlflow.__version__).is_devrelease:                                  # (a dev MLflow sends none)
        assert ".config/mlflow/telemetry.json" in results["asked"]["home"]             # ...and MLflow honours it
