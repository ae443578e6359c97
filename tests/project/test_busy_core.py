"""tools/busy_core.py, the stress run's load: the command's status comes back, and no spinner outlives the run,
however the run ends."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "busy_core.py"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_the_commands_status_comes_back_and_the_spinner_has_worked():
    code = "import os, sys, time; t = time.time(); time.sleep(0.6); print(os.getloadavg()[0]); sys.exit(3)"
    done = subprocess.run([sys.executable, str(TOOL), "--", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 3, done.stderr
    assert "1 busy process(es)" in done.stderr and "stopped" in done.stderr


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the death signal is Linux's (prctl)")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_no_spinner_outlives_its_wrapper(sig):
    wrapper = subprocess.Popen([sys.executable, str(TOOL), "--", "sleep", "20"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        spinners: list[int] = []
        while time.monotonic() < deadline and not spinners:     # the forked spinner runs this same file
            spinners = [c.pid for c in psutil.Process(wrapper.pid).children()
                        if "busy_core" in " ".join(c.cmdline())]
            time.sleep(0.05)
        assert spinners, "no spinner started"
        os.kill(wrapper.pid, sig)
        wrapper.wait(timeout=20)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_alive(p) for p in spinners):
            time.sleep(0.05)
        assert not any(_alive(p) for p in spinners), f"spinner(s) {spinners} outlived a {sig.name} of their wrapper"
    finally:
        subprocess.run(["pkill", "-f", "^sleep 20$"], check=False)
        if wrapper.poll() is None:
            wrapper.kill()


def test_bad_arguments_are_refused_clearly():
    for args, says in ((["--"], "give the command"), (["--cores", "0", "--", "true"], "--cores")):
        done = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 2 and says in done.stderr
