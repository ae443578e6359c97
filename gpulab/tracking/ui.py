"""The commands that open the MLflow UI and TensorBoard on the logged runs, on localhost only.
``python -m gpulab runs`` (or ``make runs``) starts both and stops both on Ctrl-C.

Example:
    >>> from gpulab.tracking import ui_commands
    >>> cmds = ui_commands("runs", mlflow_port=5001)
    >>> cmds.mlflow_url, cmds.tensorboard_url
    ('http://127.0.0.1:5001', 'http://127.0.0.1:6006')
    >>> cmds.mlflow_argv[1:4], cmds.tensorboard_argv[1:3]
    (('-m', 'mlflow', 'ui'), ('-m', 'tensorboard.main'))
"""
from __future__ import annotations

import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._format import html_table, text_table
from . import _store

__all__ = ["ui_commands", "UICommands"]

HOST = "127.0.0.1"
MLFLOW_ENV = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
TELEMETRY_ENV = ("MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")


@dataclass(frozen=True)
class UICommands:
    """The argv lists that start MLflow's UI (on the SQLite store ``root/mlflow.db``) and TensorBoard (on
    ``root/tensorboard``), bound to 127.0.0.1, and their URLs (immutable). Made by :func:`ui_commands`.
    ``mlflow_env`` is added to MLflow's environment: it turns off the server's job runner (GenAI jobs, seven
    background processes that browsing runs does not need) and, unless you set ``MLFLOW_DISABLE_TELEMETRY``
    or ``DO_NOT_TRACK`` yourself, MLflow's usage statistics."""

    root: Path
    mlflow_argv: tuple[str, ...]
    tensorboard_argv: tuple[str, ...]
    mlflow_url: str
    tensorboard_url: str
    mlflow_env: dict[str, str] = field(default_factory=lambda: dict(MLFLOW_ENV))

    def _rows(self) -> list[tuple[str, str, str]]:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.mlflow_env.items())
        return [("MLflow", self.mlflow_url, f"{env} {shlex.join(self.mlflow_argv)}".strip()),
                ("TensorBoard", self.tensorboard_url, shlex.join(self.tensorboard_argv))]

    def _footer(self) -> str:
        return f"both at once, stopped together by Ctrl-C: python -m gpulab runs --root {shlex.quote(str(self.root))}"

    def __repr__(self) -> str:
        table = text_table(("UI", "URL", "command"), self._rows())
        return f"Experiment tracking UIs for {self.root}\n{table}\n{self._footer()}"

    def _repr_html_(self) -> str:
        return html_table(("UI", "URL", "command"), self._rows(), caption=f"Experiment tracking UIs for {self.root}",
                          footer=self._footer())


def _port(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a whole number from 1 to 65535, got {value!r}")
    if not 1 <= value <= 65535:
        raise ValueError(f"{name} must be a whole number from 1 to 65535, got {value!r}")
    return value


def ui_commands(root: str | Path | None = None, *, mlflow_port: int = 5000,
                tensorboard_port: int = 6006) -> UICommands:
    """How to open the runs under ``root`` (default ``$GPULAB_RUNS``, else ``./runs``) in MLflow's UI and in
    TensorBoard, each listening on 127.0.0.1 only (one MLflow worker: enough for one reader, light on a
    laptop). Nothing is started: ``python -m gpulab runs`` runs both and stops them together.

    Example:
        >>> import gpulab as gl
        >>> cmds = gl.tracking.ui_commands("/tmp/runs")
        >>> " ".join(cmds.mlflow_argv[4:6]), cmds.tensorboard_argv[3:5]
        ('--backend-store-uri sqlite:////tmp/runs/mlflow.db', ('--logdir', '/tmp/runs/tensorboard'))
    """
    root = _store.resolve_root(root)
    mlflow_port, tensorboard_port = _port("mlflow_port", mlflow_port), _port("tensorboard_port", tensorboard_port)
    if mlflow_port == tensorboard_port:
        raise ValueError(f"mlflow_port and tensorboard_port must differ, both are {mlflow_port}")
    mlflow = (sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", _store.tracking_uri(root),
              "--artifacts-destination", (root / "mlartifacts").as_uri(),
              "--host", HOST, "--port", str(mlflow_port), "--workers", "1")
    tensorboard = (sys.executable, "-m", "tensorboard.main", "--logdir", str(root / "tensorboard"),
                   "--host", HOST, "--port", str(tensorboard_port))
    env = dict(MLFLOW_ENV)
    if not any(name in os.environ for name in TELEMETRY_ENV):     # your own choice stands
        env["MLFLOW_DISABLE_TELEMETRY"] = "true"
    return UICommands(root, mlflow, tensorboard, f"http://{HOST}:{mlflow_port}", f"http://{HOST}:{tensorboard_port}",
                      env)
