"""`make lab`'s JupyterLab: its token reaches the server through the environment, never its command line (which
any local user reads with `ps`), and the server refuses requests without it."""
from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lab_recipe() -> str:
    make = (ROOT / "Makefile").read_text()
    return re.search(r"^lab:.*\n((?:\t.*\n)+)", make, re.M).group(1)


def test_make_lab_passes_the_token_in_the_environment():
    recipe = _lab_recipe()
    assert "export JUPYTER_TOKEN=$$token" in recipe
    jupyter = recipe[recipe.index("jupyter lab"):]
    assert "token" not in jupyter.lower(), f"the jupyter command line names the token: {jupyter}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _descendants(sid: int) -> list[int]:
    """Every live process whose POSIX session id is ``sid`` (what `make` started under `setsid`)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                if int(stat[stat.rindex(")") + 2:].split()[3]) == sid:
                    pids.append(int(d.name))
            except (OSError, ValueError, IndexError):
                pass
    return pids


def _status(url: str, token: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
def test_make_lab_keeps_the_token_off_the_command_line(tmp_path):
    """`make lab` as a learner runs it (the install step taken as done, with this environment as the venv), on a
    free port: the token is in the server's environment and not in any process's command line; /api/status
    answers with the token and refuses without it. Everything make started is killed at the end."""
    venv = Path(sys.prefix)
    if not (venv / "bin" / "jupyter-lab").exists() or not (ROOT / "Makefile").exists():   # jupyter alone: a kernel
        pytest.skip("JupyterLab is not installed in this environment")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "JUPYTER_TOKEN"}
    env.update(JUPYTER_CONFIG_DIR=str(tmp_path / "config"), JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"))
    log = tmp_path / "make-lab.log"
    with open(log, "wb") as out:
        make = subprocess.Popen(["make", "--no-print-directory", "-o", "install", "lab", f"VENV={venv}",
                                 f"LAB_PORT={port}"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline, token = time.monotonic() + 90, None
        base = f"http://127.0.0.1:{port}"
        while time.monotonic() < deadline:
            assert make.poll() is None, f"make lab exited with {make.returncode}:\n{log.read_text()[-3000:]}"
            if token is None:
                m = re.search(rf"JupyterLab: {re.escape(base)}/lab\?token=([0-9a-f]{{48}})", log.read_text())
                token = m and m.group(1)
            elif _status_or_none(f"{base}/api/status", token) == 200:
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"JupyterLab did not answer on port {port}:\n{log.read_text()[-3000:]}")
        procs = _descendants(make.pid)
        cmdlines = {pid: Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode() for pid in procs}
        servers = [pid for pid, cmd in cmdlines.items() if "jupyter" in cmd and f"--port={port}" in cmd]
        assert servers, cmdlines
        assert not [cmd for cmd in cmdlines.values() if token in cmd], "the token is on a command line"
        environ = Path(f"/proc/{servers[0]}/environ").read_bytes().split(b"\0")
        assert f"JUPYTER_TOKEN={token}".encode() in environ
        assert _status(f"{base}/api/status", token) == 200
        assert _status(f"{base}/api/status", None) == 403
        assert _status(f"{base}/api/status", "0" * 48) == 403
        printed = log.read_text().count(token)
        assert printed == 1, f"the token appears {printed} times in make lab's output (only the address we print)"
    finally:
        try:
            os.killpg(make.pid, signal.SIGTERM)
            make.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        for attempt in range(40):
            left = _descendants(make.pid)
            if not left:
                break
            if attempt == 20:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            time.sleep(0.25)
        assert not _descendants(make.pid), "make lab left processes behind"


def _status_or_none(url: str, token: str) -> int | None:
    try:
        return _status(url, token)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return None


def test_no_server_is_given_a_token_on_its_command_line():
    """The UI suite's JupyterLab (tests/ui) and anything gpulab launches take secrets from the environment too."""
    sources = [ROOT / "Makefile", *sorted((ROOT / "tests" / "ui").glob("*.py")), *sorted((ROOT / "gpulab").rglob("*.py"))]
    flag = re.compile(r"--(?:IdentityProvider|ServerApp|NotebookApp)\.token|--token[= ]")
    assert [str(p.relative_to(ROOT)) for p in sources if flag.search(p.read_text())] == []
    assert 'env["JUPYTER_TOKEN"] = token' in (ROOT / "tests" / "ui" / "jupyterlab.py").read_text()
