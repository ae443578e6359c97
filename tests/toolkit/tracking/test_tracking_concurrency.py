"""gl.tracking under concurrency: processes that open one fresh runs folder at the same moment all log their
runs, and threads that log at once leave MLflow's loggers and the warning filters as they found them."""
from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest

from gpulab import tracking

ROOT = Path(__file__).resolve().parents[3]
WORKERS, ROUNDS = 4, 3

WORKER = textwrap.dedent("""
    import sys, time, traceback
    from pathlib import Path
    import gpulab.tracking as tracking
    import mlflow
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore   # the slow imports before the start line
    sync, me, roots = Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
    failed = 0
    for i, root in enumerate(roots):
        (sync / f"ready-{i}-{me}").touch()
        while not (sync / f"go-{i}").exists():
            time.sleep(0.001)
        try:
            with tracking.track(f"w{me}", root=root, params={"who": me}, tensorboard=False) as run:
                run.log_metrics({"loss": float(me)}, step=0)
        except Exception:
            failed += 1
            traceback.print_exc()
    sys.exit(1 if failed else 0)
""")


@pytest.fixture(scope="module")
def mlflow():
    return pytest.importorskip("mlflow")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.mark.slow
def test_processes_starting_on_one_fresh_root_all_log(mlflow, tmp_path):
    sync = tmp_path / "sync"
    sync.mkdir()
    roots = [tmp_path / f"runs{i}" for i in range(ROUNDS)]
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(sync), str(w), *map(str, roots)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=tmp_path)
             for w in range(WORKERS)]
    try:
        for i in range(ROUNDS):                      # release the workers together, once per fresh root
            deadline = time.monotonic() + 180
            while not all((sync / f"ready-{i}-{w}").exists() or procs[w].poll() is not None for w in range(WORKERS)):
                assert time.monotonic() < deadline, f"the workers did not reach round {i} in 180 s"
                time.sleep(0.01)
            (sync / f"go-{i}").touch()
        outs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0] * WORKERS, "\n".join(outs)
    for root in roots:
        table = tracking.runs(root=root)
        assert sorted(r.name for r in table.rows) == [f"w{w}" for w in range(WORKERS)]
        assert all(r.status == "FINISHED" and r.metrics == {"loss": float(r.params["who"])} for r in table.rows)


def _levels() -> dict[str, int]:
    return {name: logging.getLogger(name).level for name in ("mlflow", "alembic")}


@pytest.mark.slow
def test_threads_logging_at_once_leave_loggers_and_warning_filters_as_they_were(mlflow, tmp_path):
    with tracking.track("warm", root=tmp_path / "warm", tensorboard=False):   # MLflow's modules are imported
        pass
    logging.getLogger("alembic").setLevel(logging.INFO)      # a level of the user's own, to be kept
    try:
        levels, filters = _levels(), list(warnings.filters)
        start, errors = threading.Barrier(8), []

        def work(i: int) -> None:
            try:
                start.wait(timeout=60)
                root = tmp_path / ("shared" if i % 2 else f"own{i}")   # half on one fresh store, half on their own
                with tracking.track(f"t{i}", root=root, params={"i": i}) as run:
                    for step in range(3):
                        run.log_metrics({"loss": i + step / 10}, step=step)
                tracking.runs(root=root)
            except BaseException as e:          # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=240)
        assert not any(t.is_alive() for t in threads) and errors == []
        assert _levels() == levels and warnings.filters == filters
        shared = tracking.runs(root=tmp_path / "shared")
        assert sorted(r.name for r in shared.rows) == ["t1", "t3", "t5", "t7"]
        assert all(r.metrics == {"loss": int(r.params["i"]) + 0.2} for r in shared.rows)
    finally:
        logging.getLogger("alembic").setLevel(logging.NOTSET)


def test_quiet_nests_across_threads(mlflow):
    from gpulab.tracking import _store

    before = _levels()
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _store.quiet():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    inside.wait(10)
    with _store.quiet():                         # enters while the other thread is inside
        assert logging.getLogger("mlflow").getEffectiveLevel() >= logging.WARNING
    assert logging.getLogger("mlflow").getEffectiveLevel() >= logging.WARNING   # the other is still inside
    release.set()
    t.join(10)
    assert _levels() == before
