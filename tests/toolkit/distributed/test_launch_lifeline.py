"""gl.launch() leaves nothing behind when its launcher dies: SIGTERM or SIGKILL of the launching process (a
Jupyter kernel restart, the OOM killer) stops torchrun and every rank, and ranks die with a SIGKILLed torchrun.
Also the parent-death watch on its own (both the prctl and the polling fallback) and launches from a thread."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

import pytest

import gpulab
from gpulab.distributed import _lifeline

psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(os.name != "posix", reason="launch() runs on Linux and macOS")

ROOT = Path(__file__).resolve().parents[3]


def _with(token: str, exclude: set[int] = frozenset()) -> list[psutil.Process]:
    """Live (not zombie) processes whose command line mentions ``token``."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if (p.pid not in exclude and p.pid != os.getpid() and p.info["status"] != psutil.STATUS_ZOMBIE
                    and token in " ".join(p.info["cmdline"] or [])):
                found.append(p)
        except psutil.Error:
            pass
    return found


def _wait_for(predicate, within_s: float, every_s: float = 0.1):
    end = time.monotonic() + within_s
    while True:
        value = predicate()
        if value or time.monotonic() > end:
            return value
        time.sleep(every_s)


def _kill_survivors(token: str, *procs: subprocess.Popen) -> None:
    """Whatever happened in the test, leave no process behind."""
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
    for p in _with(token):
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(_with(token), timeout=5)


def _sleeper(tmp_path: Path, token: str) -> Path:
    script = tmp_path / f"sleep_{token}.py"
    script.write_text("import time\ntime.sleep(60)\n")
    return script


def _start_launcher(script: Path, mode: str | None = None) -> subprocess.Popen:
    code = textwrap.dedent("""
        import sys
        import gpulab as gl
        gl.launch(sys.argv[1], nproc=2, backend="gloo", timeout_s=120)
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop(_lifeline.MODE_ENV, None)
    if mode:
        env[_lifeline.MODE_ENV] = mode           # "poll": the watch macOS gets, exercised here on Linux
    return subprocess.Popen([sys.executable, "-c", code, str(script)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ranks(token: str, launcher: subprocess.Popen | None = None) -> list[psutil.Process]:
    """The rank processes: they run the script, and are neither torchrun nor its lifeline (which name it too)."""
    out = []
    for p in _with(token, exclude={launcher.pid} if launcher else set()):
        try:
            if "torch.distributed.run" not in " ".join(p.cmdline()) and "_lifeline" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def _torchruns(token: str) -> list[psutil.Process]:
    out = []
    for p in _with(token):
        try:
            if "torch.distributed.run" in " ".join(p.cmdline()) and "_lifeline" not in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


# ------------------------------------------------------------------------------ the launcher is killed

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_torchrun_and_ranks_die_with_their_launcher(tmp_path, sig):
    token = uuid.uuid4().hex
    launcher = _start_launcher(_sleeper(tmp_path, token))
    try:
        ranks = _wait_for(lambda: len(_ranks(token, launcher)) >= 2 and _ranks(token, launcher), within_s=90)
        assert ranks and len(ranks) == 2, f"the ranks never started: {[p.cmdline() for p in _with(token)]}"
        assert _torchruns(token), "no torchrun process found"
        os.kill(launcher.pid, sig)
        launcher.wait(timeout=10)
        left = _wait_for(lambda: not _with(token), within_s=15) or _with(token)
        assert left is True, f"still running 15 s after the launcher got {sig.name}: {[p.cmdline() for p in left]}"
    finally:
        _kill_survivors(token, launcher)


@pytest.mark.parametrize("mode", [None, "poll"], ids=["default", "poll"])
def test_torchrun_and_launcher_killed_together_leave_no_rank(tmp_path, mode):
    """SIGKILL for torchrun and its launcher at once (an OOM kill of both): neither can stop the ranks, each in a
    session of its own; the lifeline between them does."""
    token = uuid.uuid4().hex
    launcher = _start_launcher(_sleeper(tmp_path, token), mode)
    try:
        ranks = _wait_for(lambda: len(_ranks(token, launcher)) >= 2 and _ranks(token, launcher), within_s=90)
        assert ranks and len(ranks) == 2, [p.cmdline() for p in _with(token)]
        (agent,) = _torchruns(token)
        agent.kill()
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=10)
        left = _wait_for(lambda: not _with(token), within_s=15) or _with(token)
        assert left is True, f"ranks outlived torchrun and the launcher: {[p.cmdline() for p in left]}"
    finally:
        _kill_survivors(token, launcher)


def test_a_killed_torchrun_fails_the_launch_loudly_and_leaves_no_rank(tmp_path):
    token = uuid.uuid4().hex
    script = _sleeper(tmp_path, token)
    outcome: dict[str, BaseException] = {}

    def run() -> None:
        try:
            gpulab.launch(script, nproc=2, backend="gloo", timeout_s=120)
        except BaseException as e:   # noqa: BLE001 - the test reads it
            outcome["error"] = e

    t = threading.Thread(target=run)
    t.start()
    try:
        ranks = _wait_for(lambda: len(_ranks(token)) >= 2 and _ranks(token), within_s=90)
        assert ranks and len(ranks) == 2, [p.cmdline() for p in _with(token)]
        (agent,) = _torchruns(token)
        agent.kill()
        left = _wait_for(lambda: not _with(token), within_s=15) or _with(token)
        assert left is True, f"ranks outlived their SIGKILLed torchrun: {[p.cmdline() for p in left]}"
        t.join(30)
        assert not t.is_alive()
        assert isinstance(outcome.get("error"), gpulab.distributed.DistributedError), outcome
    finally:
        t.join(30)
        _kill_survivors(token)


# ------------------------------------------------------------------------------ launches that still work

def test_a_launch_from_a_background_thread_finishes_and_reports(tmp_path):
    """The process that forked torchrun's starter is this thread: it must live until the launch ends."""
    script = tmp_path / "hello.py"
    script.write_text(textwrap.dedent("""
        from gpulab.distributed import init_worker, report
        info = init_worker()
        report(world=info.world_size, ppid_alive=True)
    """))
    box: dict[str, object] = {}
    t = threading.Thread(target=lambda: box.update(run=gpulab.launch(script, nproc=2, backend="gloo", timeout_s=120)))
    t.start()
    t.join(150)
    assert not t.is_alive()
    run = box["run"]
    assert [r["rank"] for r in run.results] == [0, 1] and {r["world"] for r in run.results} == {2}
    assert run.commands[0].startswith(sys.executable) and "torch.distributed.run" in run.commands[0]
    assert "_lifeline" not in run.commands[0]          # the command shown is the one to type in a terminal


# ------------------------------------------------------------------------------ the watch on its own

def _orphan_case(tmp_path: Path, mode: str | None, sig: signal.Signals) -> tuple[str, list[psutil.Process]]:
    """A middle process starts ``sleep`` through the lifeline, then is killed with ``sig``: does sleep follow?"""
    token = uuid.uuid4().hex
    middle_code = textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-I", {_lifeline.__file__!r}, "--parent", str(os.getpid()), "--",
                          sys.executable, "-c", "import time; time.sleep(60)", {token!r}])
        time.sleep(60)
    """)
    env = dict(os.environ)
    env.pop("GPULAB_LIFELINE_MODE", None)
    if mode:
        env["GPULAB_LIFELINE_MODE"] = mode
    middle = subprocess.Popen([sys.executable, "-c", middle_code], env=env, start_new_session=True)
    try:
        child = _wait_for(lambda: [p for p in _with(token) if p.pid != middle.pid and "_lifeline" not in
                                   " ".join(p.cmdline())], within_s=20)
        assert child, "the command never started"
        os.kill(middle.pid, sig)
        middle.wait(timeout=10)
        left = _wait_for(lambda: not _with(token), within_s=10) or _with(token)
        return token, ([] if left is True else left)
    finally:
        _kill_survivors(token, middle)


@pytest.mark.parametrize("mode", [None, "poll"], ids=["default", "poll"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_the_lifeline_stops_its_command_when_the_parent_dies(tmp_path, mode, sig):
    if mode is None and not _lifeline.can_set_parent_death_signal():
        pytest.skip("no prctl(PR_SET_PDEATHSIG) here: the default is the polling watch")
    _, left = _orphan_case(tmp_path, mode, sig)
    assert left == [], [p.cmdline() for p in left]


@pytest.mark.parametrize("mode", [None, "poll"], ids=["default", "poll"])
def test_the_lifeline_refuses_to_start_for_a_parent_already_gone(tmp_path, mode):
    """The race: the parent died before the watch was set. The command must not run at all."""
    flag = tmp_path / "ran"
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_LIFELINE_MODE"}
    if mode:
        env["GPULAB_LIFELINE_MODE"] = mode
    not_my_parent = 1 if os.getpid() != 1 else 2          # any pid but the lifeline's real parent (this one)
    out = subprocess.run([sys.executable, "-I", _lifeline.__file__, "--parent", str(not_my_parent), "--",
                          sys.executable, "-c", f"open({str(flag)!r}, 'w').close()"], env=env, timeout=30,
                         capture_output=True, text=True)
    assert out.returncode != 0 and not flag.exists()
    assert "parent" in out.stderr


def test_the_lifeline_passes_the_exit_status_through(tmp_path):
    for mode in ([None, "poll"] if _lifeline.can_set_parent_death_signal() else ["poll"]):
        env = {k: v for k, v in os.environ.items() if k != "GPULAB_LIFELINE_MODE"}
        if mode:
            env["GPULAB_LIFELINE_MODE"] = mode
        me = [sys.executable, "-I", _lifeline.__file__, "--parent", str(os.getpid()), "--"]
        # the lifeline's parent is this process: subprocess.run forks from here
        out = subprocess.run(me + [sys.executable, "-c", "import sys; print('hi'); sys.exit(7)"], env=env,
                             capture_output=True, text=True, timeout=30)
        assert (out.returncode, out.stdout) == (7, "hi\n"), (mode, out)
        killed = subprocess.run(me + [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
                                env=env, capture_output=True, timeout=30)
        assert killed.returncode == -signal.SIGTERM, (mode, killed)


def test_the_lifeline_refuses_bad_arguments():
    for argv in ([], ["--parent", "x", "--", "true"], ["--parent", "12"], ["--", "true"]):
        out = subprocess.run([sys.executable, "-I", _lifeline.__file__, *argv], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 2 and "usage" in out.stderr, (argv, out)
