"""Drive a real JupyterLab in headless Chromium: start/stop the server and browser, run a notebook.

The UI suite in this directory uses three pieces from here:

* :func:`start_lab` / :class:`LabServer` -- a throw-away JupyterLab on 127.0.0.1 whose settings,
  workspaces, config, runtime and data dirs all live in a temp dir (the venv's ``gpulab``
  kernelspec in ``sys.prefix/share/jupyter/kernels`` is still found);
* :func:`launch_browser` / :class:`BrowserHandle` -- Playwright driving the system Chromium;
* :func:`run_notebook` -- open a notebook, wait for a real kernel, Run All from the Run menu,
  wait until every cell finished, inspect the rendered outputs and save a full-page screenshot.
  It returns a :class:`NotebookResult` instead of raising, so a test can also assert that a
  broken notebook *is* reported as failing.

Everything is stopped by PID; :meth:`LabServer.stop` and :meth:`BrowserHandle.close` return
the processes that survived (always expected to be empty).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

# Suite layout: the course notebooks, self-test fixtures (served under FIXTURES_DIR) and where
# screenshots go (artifacts/ is git-ignored).
REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "notebooks"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
ARTIFACTS = REPO / "artifacts" / "ui"
FIXTURES_DIR = "_ui_fixtures"
SAMPLE = "_ui_generated/sample_plot.ipynb"  # run instead of course notebooks while there are none

CHROMIUM = Path(os.environ.get("GPULAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_INSTALL_HINT = "apt-get update && apt-get install -y --no-install-recommends chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1400, "height": 900}
MAX_SCREENSHOT_HEIGHT = 20_000  # px; taller notebooks are cut off (Chromium gets slow beyond that)

# Per-plugin user settings. JupyterLab 4.6 reads `overrides.json` only from the *application*
# settings dir (sys.prefix/share/jupyter/lab/settings, i.e. inside the venv), not from
# JUPYTERLAB_SETTINGS_DIR; per-plugin `<id>.jupyterlab-settings` files in the user settings dir
# are honoured, and LabServer.verify_settings() checks through the settings API that they are.
LAB_SETTINGS: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    # All cells in the DOM; no blank "scroll past end" space (it grows with the viewport and
    # would defeat the full-page screenshot).
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none", "scrollPastEnd": False},
}

# A stderr output area is an *error* if it shows a traceback or an exception line such as
# "ValueError: boom" / "SyntaxError: invalid syntax"; anything else on stderr is a warning.
ERROR_RE = re.compile(r"Traceback|^\s*(?:[\w.]+\.)?\w*(?:Error|Exception)\b", re.MULTILINE)
# Source that draws something: the notebook must then render at least one image.
PLOT_RE = re.compile(r"\.plot\(|\bplt\.|\bshow\(")


def course_notebooks() -> list[str]:
    """``notebooks/*.ipynb`` at collection time, or the generated sample while there are none."""
    names = sorted(path.name for path in NOTEBOOKS.glob("*.ipynb"))
    return names or [SAMPLE]


def in_ci() -> bool:
    """True when running under CI (env CI=true/1/yes), where missing tools must fail, not skip."""
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _describe(proc: psutil.Process) -> str:
    try:
        return f"pid {proc.pid}: {' '.join(proc.cmdline())[:200]}"
    except psutil.Error:
        return f"pid {proc.pid}"


def _stop_processes(procs: list[psutil.Process], timeout: float) -> list[str]:
    """SIGTERM the still-running ``procs``, then SIGKILL what is left; return what survived both."""
    alive = [p for p in procs if p.is_running()]
    for proc in alive:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(alive, timeout=5)
    return [_describe(p) for p in alive]


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Processes whose command line contains ``text`` (e.g. kernels started with a connection
    file in our runtime dir), excluding this process."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid == os.getpid():
            continue
        if any(text in arg for arg in proc.info["cmdline"] or []):
            found.append(proc)
    return found


# --------------------------------------------------------------------------------------------
# JupyterLab server
# --------------------------------------------------------------------------------------------


@dataclass
class LabServer:
    """A running JupyterLab started by :func:`start_lab`."""

    root_dir: Path
    state_dir: Path
    port: int
    token: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def tree_url(self, name: str) -> str:
        """URL opening ``name`` (relative to root_dir) in a fresh default workspace."""
        return f"{self.base_url}/lab/tree/{name}?reset&token={self.token}"

    def api(self, method: str, path: str, timeout: float = 10) -> Any:
        """Call the REST API; returns decoded JSON (or None for an empty body)."""
        request = urllib.request.Request(
            f"{self.base_url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the server log, for failure messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"

    def kernelspecs(self) -> set[str]:
        """Names of the kernelspecs this server can start."""
        return set(self.api("GET", "/api/kernelspecs")["kernelspecs"])

    def verify_settings(self) -> None:
        """Raise unless every LAB_SETTINGS value is what JupyterLab actually uses."""
        for plugin, wanted in LAB_SETTINGS.items():
            effective = self.api("GET", f"/lab/api/settings/{plugin}")["settings"]
            for key, value in wanted.items():
                if effective.get(key) != value:
                    raise RuntimeError(f"JupyterLab ignores {plugin} {key}={value!r}: {effective.get(key)!r}")

    def shutdown_sessions(self) -> None:
        """Shut down every open notebook session and its kernel (frees CPU between notebooks)."""
        for session in self.api("GET", "/api/sessions"):
            try:
                self.api("DELETE", f"/api/sessions/{session['id']}", timeout=30)
            except urllib.error.HTTPError as err:
                if err.code != 404:
                    raise

    def processes(self) -> list[psutil.Process]:
        """The server, everything below it (kernels, their workers) and any process that points
        into our state dir (a kernel whose parent died would otherwise be missed)."""
        found: dict[int, psutil.Process] = {}
        try:
            server = psutil.Process(self.process.pid)
            for proc in [server, *server.children(recursive=True)]:
                found[proc.pid] = proc
        except psutil.NoSuchProcess:
            pass
        for proc in processes_mentioning(str(self.state_dir)):
            found.setdefault(proc.pid, proc)
        return list(found.values())

    def stop(self, timeout: float = 20) -> list[str]:
        """Stop the server (SIGTERM shuts its kernels down cleanly), then SIGTERM/SIGKILL by PID
        whatever it left behind. Returns descriptions of survivors -- expected to be empty."""
        procs = self.processes()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        survivors = _stop_processes(procs, timeout=5)
        if self.process.poll() is None:  # reap the Popen so no zombie is left either
            self.process.kill()
            self.process.wait(timeout=5)
        survivors += [_describe(p) for p in processes_mentioning(str(self.state_dir))]
        return survivors


def _die_with_parent() -> None:
    """In the server's child process (Linux): get SIGTERM when pytest dies, even by SIGKILL,
    so an aborted run cannot leave a server (which then shuts its kernels down) behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _write_lab_settings(settings_dir: Path) -> None:
    for plugin, values in LAB_SETTINGS.items():
        package, _, name = plugin.partition(":")
        path = settings_dir / package / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values, indent=2))


def start_lab(root_dir: Path, state_dir: Path, timeout: float = 90) -> LabServer:
    """Start ``sys.executable -m jupyter lab`` serving ``root_dir``; all Jupyter state goes to
    ``state_dir``. Returns once ``GET /api/status`` answers 200 and the settings are verified."""
    dirs = {name: state_dir / name for name in ("config", "runtime", "data", "settings", "workspaces")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    _write_lab_settings(dirs["settings"])
    env = dict(os.environ)
    env.pop("MPLBACKEND", None)  # the kernel must pick matplotlib's inline backend
    env.update(
        JUPYTER_CONFIG_DIR=str(dirs["config"]),
        JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
        JUPYTER_DATA_DIR=str(dirs["data"]),  # sys.prefix/share/jupyter (gpulab kernelspec) still searched
        JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
        JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
        TF_CPP_MIN_LOG_LEVEL="3",
        KINETO_LOG_LEVEL="6",
        PYTHONUNBUFFERED="1",
    )
    port, token = free_port(), secrets.token_hex(24)
    # the token goes in the server's environment (jupyter_server's IdentityProvider reads JUPYTER_TOKEN), not on
    # its command line, which any local user can read with `ps`
    env["JUPYTER_TOKEN"] = token
    cmd = [
        sys.executable, "-m", "jupyter", "lab",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        "--port-retries=0",
        f"--ServerApp.root_dir={root_dir}",
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp, to run menu commands
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]  # fmt: skip
    if os.getuid() == 0:
        cmd.append("--allow-root")
    log_path = state_dir / "jupyterlab.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            cmd, cwd=root_dir, env=env, stdin=subprocess.DEVNULL, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )  # fmt: skip
    server = LabServer(root_dir, state_dir, port, token, process, log_path)
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with {process.returncode}:\n{server.log_tail()}")
        try:
            server.api("GET", "/api/status", timeout=2)
            break
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                server.stop()
                raise RuntimeError(f"JupyterLab not ready after {timeout:.0f} s:\n{server.log_tail()}")
            time.sleep(0.25)
    try:
        server.verify_settings()
    except Exception:
        server.stop()
        raise
    return server


_NOT_COPIED = shutil.ignore_patterns(".*", "__pycache__", ".ipynb_checkpoints")  # inside helper dirs


def copy_notebooks(src: Path, dst: Path) -> list[str]:
    """Copy ``src/*.ipynb`` plus helper files and dirs (``scripts/``, images, data) into ``dst``;
    return the notebook names. The server only ever sees the copy, so nothing (autosave,
    checkpoints) writes into the repo."""
    dst.mkdir(parents=True, exist_ok=True)
    if not src.is_dir():
        return []
    for item in sorted(src.iterdir()):
        # notebooks/traces/ and notebooks/*.png are generated by the lessons (git-ignored): skipped
        if item.name.startswith(".") or item.name in {"__pycache__", "traces"} or item.suffix == ".png":
            continue
        if item.is_dir():
            shutil.copytree(item, dst / item.name, ignore=_NOT_COPIED)
        else:
            shutil.copy2(item, dst / item.name)
    return sorted(path.name for path in dst.glob("*.ipynb"))


# --------------------------------------------------------------------------------------------
# Browser
# --------------------------------------------------------------------------------------------


@dataclass
class BrowserHandle:
    """Playwright + Chromium started by :func:`launch_browser`; ``processes``: their PIDs."""

    playwright: Any
    browser: Any
    processes: list[psutil.Process]

    def new_page(self) -> Any:
        """A page in a fresh browser context (no cookies or local storage from earlier notebooks)."""
        context = self.browser.new_context(viewport=dict(VIEWPORT))
        return context.new_page()

    def close(self) -> list[str]:
        """Close browser and Playwright driver, then kill by PID anything left; return survivors."""
        try:
            self.browser.close()
        finally:
            self.playwright.stop()
        return _stop_processes(self.processes, timeout=5)


def launch_browser(executable: Path = CHROMIUM) -> BrowserHandle:
    """Start Playwright's driver and the system Chromium (headless)."""
    from playwright.sync_api import sync_playwright

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(executable_path=str(executable), args=CHROMIUM_ARGS)
    except Exception:
        playwright.stop()
        raise
    started = [p for p in me.children(recursive=True) if p.pid not in before]
    return BrowserHandle(playwright, browser, started)


# --------------------------------------------------------------------------------------------
# Notebook runner
# --------------------------------------------------------------------------------------------

# Everything below runs in the page. The observer is installed *before* Run All and records
# (a) whether any input prompt ever showed [*] (or the execution indicator went busy) and
# (b) per cell, every change of the images in its outputs -- assert_live_figure_updates() reads (b).
_JS_STATE = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const indicator = panel && panel.querySelector('.jp-Notebook-ExecutionIndicator');
  const kernel = panel && panel.querySelector('.jp-Toolbar-kernelName');
  const dialog = document.querySelector('.jp-Dialog');
  const prompts = panel ? [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')] : [];
  return {
    panel: !!panel,
    status: indicator ? indicator.dataset.status || '' : '',
    kernel: kernel ? kernel.textContent.trim() : '',
    dialog: dialog ? dialog.innerText.trim().slice(0, 500) : null,
    busy: prompts.filter(p => p.textContent.includes('*')).length,
    sawBusy: !!window.__gpulabSawBusy,
    hasApp: typeof window.jupyterapp === 'object' && !!window.jupyterapp,
  };
}"""

_JS_INSTALL_OBSERVER = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const nb = panel.querySelector('.jp-Notebook');
  const ids = new WeakMap();
  let nextId = 0;
  const idOf = node => { if (!ids.has(node)) ids.set(node, nextId++); return ids.get(node); };
  const hash = s => {  // FNV-1a: keep 32-bit fingerprints, not megabytes of data: URIs
    let h = 0x811c9dc5;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 0x01000193); }
    return (h >>> 0).toString(16) + ':' + s.length;
  };
  window.__gpulabSawBusy = false;
  window.__gpulabImages = {};  // cell index -> [{t, imgs: [{output, img, src}]}], on change only
  const record = () => {
    const cells = [...nb.querySelectorAll('.jp-Cell')];
    cells.forEach((cell, index) => {
      const prompt = cell.querySelector('.jp-InputArea-prompt');
      if (prompt && cell.classList.contains('jp-CodeCell') && prompt.textContent.includes('*')) {
        window.__gpulabSawBusy = true;
      }
      const imgs = [...cell.querySelectorAll('.jp-OutputArea img')].map(img => ({
        output: idOf(img.closest('.jp-OutputArea-output') || img), img: idOf(img), src: hash(img.src),
      }));
      const history = window.__gpulabImages[index] || (window.__gpulabImages[index] = []);
      const last = history.length ? JSON.stringify(history[history.length - 1].imgs) : '[]';
      if (JSON.stringify(imgs) !== last) history.push({t: Math.round(performance.now()), imgs});
    });
  };
  new MutationObserver(record).observe(nb, {
    subtree: true, childList: true, characterData: true, attributes: true, attributeFilter: ['src'],
  });
  const indicator = panel.querySelector('.jp-Notebook-ExecutionIndicator');
  if (indicator) {  // cells with hidden input never show [*]; the indicator does go busy
    new MutationObserver(() => {
      if (indicator.dataset.status === 'busy') window.__gpulabSawBusy = true;
    }).observe(indicator, {attributes: true, attributeFilter: ['data-status']});
  }
}"""

_JS_COLLECT = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  // A cell whose input is hidden (metadata jupyter.source_hidden) shows a placeholder without
  // execution number; for those the number is read from the cell model (window.jupyterapp).
  const app = window.jupyterapp;
  const widget = app && app.shell.currentWidget && app.shell.currentWidget.node === panel ? app.shell.currentWidget : null;
  return [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map((cell, index) => {
    const code = cell.classList.contains('jp-CodeCell');
    const prompt = cell.querySelector('.jp-InputArea-prompt');
    const hidden = !!cell.querySelector('.jp-InputPlaceholder');
    const model = widget && widget.content.widgets[index] ? widget.content.widgets[index].model : null;
    const modelCount = model && model.type === 'code' ? model.executionCount : null;
    const modelErrors = [];  // error outputs per the model: catches errors in collapsed outputs
    if (model && model.type === 'code') {
      for (let i = 0; i < model.outputs.length; i++) {
        const out = model.outputs.get(i).toJSON();
        if (out.output_type === 'error') modelErrors.push(`${out.ename}: ${out.evalue}`);
      }
    }
    const outputs = [...cell.querySelectorAll('.jp-OutputArea-output')].map(out => ({
      mime: out.dataset.mimeType || '',
      text: (out.innerText || '').slice(0, 4000),
    }));
    const imgs = [...cell.querySelectorAll('.jp-OutputArea-output img')].map(img => ({
      complete: img.complete, width: img.naturalWidth,
    }));
    return {index, code, hidden, modelCount, modelErrors, prompt: prompt ? prompt.textContent.trim() : '', outputs, imgs};
  });
}"""

_JS_IMAGES_LOADED = """() => [...document.querySelectorAll(
  '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output img')].every(img => img.complete)"""

_JS_RUN_ALL_COMMAND = "() => window.jupyterapp.commands.execute('runmenu:run-all')"

_JS_FIT_VIEWPORT = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const nb = panel.querySelector('.jp-Notebook');
  const scroller = panel.querySelector('.jp-WindowedPanel-outer') || nb;
  return scroller.scrollHeight - scroller.clientHeight;
}"""


@dataclass
class CellReport:
    """What one rendered cell showed after Run All (``index`` counts all cells, markdown too)."""

    index: int
    code: bool
    prompt: str  # "[3]:" as shown; "" if the input is hidden
    hidden_input: bool = False
    model_count: int | None = None  # only used when the input (and its prompt) is hidden
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    images: int = 0
    broken_images: int = 0

    @property
    def execution_count(self) -> int | None:
        match = re.fullmatch(r"\[(\d+)\]:?", self.prompt)
        if match:
            return int(match.group(1))
        return self.model_count if self.hidden_input else None


@dataclass
class NotebookResult:
    """Outcome of :func:`run_notebook`: ``ok`` is False iff ``failures`` is not empty."""

    name: str
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cells: list[CellReport] = field(default_factory=list)
    kernel_seconds: float = 0.0  # Run All until every cell finished
    total_seconds: float = 0.0  # open page .. screenshot
    screenshot: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.failures

    def summary(self) -> str:
        """Human-readable report, used as the assertion message."""
        state = "OK" if self.ok else "FAILED"
        lines = [f"{self.name}: {state} (run {self.kernel_seconds:.1f} s, total {self.total_seconds:.1f} s)"]
        lines += [f"  failure: {f}" for f in self.failures]
        lines += [f"  warning: {w}" for w in self.warnings]
        if self.screenshot:
            lines.append(f"  screenshot: {self.screenshot}")
        return "\n".join(lines)


def _notebook_json(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def expects_images(notebook: dict[str, Any]) -> bool:
    """Whether the notebook draws (plotting calls in code cells), so images must be rendered.
    Notebook metadata ``{"gpulab": {"ui_expect_images": false}}`` overrides the guess."""
    override = notebook.get("metadata", {}).get("gpulab", {}).get("ui_expect_images")
    if override is not None:
        return bool(override)
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("#", "import ", "from ")))
        if PLOT_RE.search(code):
            return True
    return False


def _error_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip() and not set(line.strip()) <= {"-"}]
    for line in reversed(lines):  # the exception line is last in a traceback
        if ERROR_RE.search(line) and "Traceback" not in line:
            return line[:300]
    return (lines[-1] if lines else text)[:300]


def _warning_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in lines:  # "file.py:3: UserWarning: message" rather than the echoed source line
        if "Warning" in line:
            return line[:300]
    return (lines[-1] if lines else "(empty stderr)")[:300]


def _wait_kernel_ready(page: Any, deadline: float) -> dict[str, Any]:
    """Wait for indicator idle AND a real kernel name, twice in a row (JupyterLab shows idle
    with "No Kernel" ~1 s before the kernel is attached). Returns the last state."""
    stable = 0
    while True:
        state = page.evaluate(_JS_STATE)
        if state["dialog"] is not None:
            return state
        ready = state["status"] == "idle" and state["kernel"] not in {"", "No Kernel", "Kernel", "Unknown"}
        stable = stable + 1 if ready else 0
        if stable >= 2 or time.monotonic() > deadline:
            return state
        time.sleep(0.25)


def _run_all(page: Any, has_app: bool) -> None:
    """Run All Cells through the Run menu command (``runmenu:run-all``)."""
    if has_app:
        page.evaluate(_JS_RUN_ALL_COMMAND)
        return
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()


def save_screenshot(page: Any, path: Path) -> Path:
    """Full-page screenshot: grow the viewport to the notebook's scroll height first, because the
    notebook scrolls inside its own panel, not the page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    extra = int(page.evaluate(_JS_FIT_VIEWPORT))
    size = page.viewport_size or dict(VIEWPORT)
    if extra > 0:
        height = min(size["height"] + extra + 40, MAX_SCREENSHOT_HEIGHT)
        page.set_viewport_size({"width": size["width"], "height": height})
        try:
            page.wait_for_function(f"() => ({_JS_FIT_VIEWPORT})() <= 0", timeout=5_000)
        except Exception:  # noqa: BLE001 - cut off at MAX_SCREENSHOT_HEIGHT: keep what fits
            pass
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)
    return path


def run_notebook(
    page: Any,
    server: LabServer,
    name: str,
    *,
    timeout: float = 300,
    screenshot: Path | None = None,
) -> NotebookResult:
    """Open ``name`` in JupyterLab, Run All through the UI and check what was rendered.

    Failures: a dialog, a timeout, error output (traceback / ``...Error:`` on stderr), a code cell
    without execution number, a notebook that draws but shows no image, a broken image.
    Warnings (other stderr output) are reported in ``warnings`` only.
    """
    result = NotebookResult(name)
    started = time.monotonic()
    deadline = started + timeout
    notebook = _notebook_json(server.root_dir / name)
    kernel = notebook.get("metadata", {}).get("kernelspec", {}).get("name")
    if kernel and kernel not in server.kernelspecs():
        result.failures.append(f"kernelspec {kernel!r} not installed (have {sorted(server.kernelspecs())})")
        return result
    try:
        _drive(page, server, name, notebook, result, deadline)
    except Exception as err:  # noqa: BLE001 - a Playwright timeout etc. is a result, not a crash
        result.failures.append(f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
    finally:
        if screenshot is not None:
            try:
                result.screenshot = save_screenshot(page, screenshot)
            except Exception as err:  # noqa: BLE001
                result.warnings.append(f"screenshot failed: {err}")
        result.total_seconds = time.monotonic() - started
    return result


def _drive(page: Any, server: LabServer, name: str, notebook: dict[str, Any], result: NotebookResult, deadline: float) -> None:
    page.goto(server.tree_url(name))
    remaining_ms = lambda: max(1_000.0, (deadline - time.monotonic()) * 1000)  # noqa: E731
    page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=remaining_ms())
    state = _wait_kernel_ready(page, deadline)
    if state["dialog"] is not None:
        result.failures.append(f"dialog before Run All: {state['dialog']!r}")
        return
    if not (state["status"] == "idle" and state["kernel"] not in {"", "No Kernel"}):
        result.failures.append(f"kernel not ready: indicator {state['status']!r}, kernel {state['kernel']!r}")
        return

    page.evaluate(_JS_INSTALL_OBSERVER)  # before Run All, so no [*] can be missed
    run_started = time.monotonic()
    _run_all(page, state["hasApp"])
    while True:
        state = page.evaluate(_JS_STATE)
        if state["dialog"] is not None:
            result.failures.append(f"dialog during Run All: {state['dialog']!r}")
            return
        if state["sawBusy"] and state["busy"] == 0 and state["status"] == "idle":
            break
        if time.monotonic() > deadline:
            result.failures.append(
                f"timed out: saw [*] {state['sawBusy']}, {state['busy']} cell(s) still [*], indicator {state['status']!r}"
            )
            return
        time.sleep(0.25)
    result.kernel_seconds = time.monotonic() - run_started
    try:
        page.wait_for_function(_JS_IMAGES_LOADED, timeout=10_000)
    except Exception:  # noqa: BLE001 - reported below as broken images
        pass
    _check_cells(page, notebook, result)


def _check_cells(page: Any, notebook: dict[str, Any], result: NotebookResult) -> None:
    rendered = page.evaluate(_JS_COLLECT)
    expected = len(notebook.get("cells", []))
    if len(rendered) != expected:
        result.failures.append(f"{len(rendered)} cells rendered, notebook has {expected}")
    for raw in rendered:
        cell = CellReport(raw["index"], raw["code"], raw["prompt"], raw["hidden"], raw["modelCount"])
        for out in raw["outputs"]:
            if out["mime"] != "application/vnd.jupyter.stderr":
                continue
            if ERROR_RE.search(out["text"]):
                cell.errors.append(_error_line(out["text"]))
            else:
                cell.warnings.append(_warning_line(out["text"]))
        if raw["modelErrors"] and not cell.errors:  # e.g. outputs collapsed: not in the DOM
            cell.errors += [f"{error} (output not visible)" for error in raw["modelErrors"]]
        cell.images = sum(1 for img in raw["imgs"] if img["width"] > 0)
        cell.broken_images = len(raw["imgs"]) - cell.images
        result.cells.append(cell)

        where = f"cell {cell.index}"
        result.failures += [f"{where}: error output: {e}" for e in cell.errors]
        result.warnings += [f"{where}: stderr: {w}" for w in cell.warnings]
        if cell.code and cell.execution_count is None:
            shown = "input hidden" if cell.hidden_input else f"prompt {cell.prompt!r}"
            result.failures.append(f"{where}: no execution number ({shown})")
        if cell.broken_images:
            result.failures.append(f"{where}: {cell.broken_images} image(s) did not render")
    if expects_images(notebook) and not any(c.images for c in result.cells):
        result.failures.append("notebook draws (plot/show calls) but no image was rendered")


def image_history(page: Any, cell_index: int) -> list[dict[str, Any]]:
    """Every state of the images in cell ``cell_index`` recorded since Run All (see observer)."""
    return page.evaluate("i => (window.__gpulabImages || {})[i] || []", cell_index)


def assert_live_figure_updates(page: Any, cell_index: int, min_updates: int = 3) -> None:
    """Assert cell ``cell_index`` showed ONE figure that was updated in place.

    "In place" means: the cell never showed more than one image at a time, every image it showed
    lived in the same output (JupyterLab re-creates the ``<img>`` node inside the same output
    widget on each ``update_display_data``), and at least ``min_updates`` different image
    ``src`` values were seen over time. Appended figures (``display(fig)`` in a loop) fail.
    Needs the observer installed by :func:`run_notebook`.
    """
    history = image_history(page, cell_index)
    assert history, f"cell {cell_index}: no image was ever shown (was the cell run by run_notebook?)"
    most_at_once = max(len(state["imgs"]) for state in history)
    assert most_at_once == 1, f"cell {cell_index}: {most_at_once} images at once -- figures appended, not updated"
    outputs = {img["output"] for state in history for img in state["imgs"]}
    assert len(outputs) == 1, f"cell {cell_index}: images appeared in {len(outputs)} different outputs"
    sources = [img["src"] for state in history for img in state["imgs"]]
    distinct = len(dict.fromkeys(sources))
    assert distinct >= min_updates, f"cell {cell_index}: only {distinct} distinct image(s) seen, want >= {min_updates}"
    final = history[-1]["imgs"]
    assert len(final) == 1, f"cell {cell_index}: {len(final)} images at the end, want 1"
