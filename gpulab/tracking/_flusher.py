"""A run's background flush, so that a process that dies keeps what it logged: one thread per open run sends the
buffered metrics to MLflow and flushes TensorBoard's event file every ``EVERY_S`` (started when the run
starts, stopped and joined when it ends: no thread outlives its run), and the runs still open when the
interpreter exits are ended as KILLED (``atexit``). A process killed outright (SIGKILL, the OOM killer) keeps
every point up to its last flush; its run stays RUNNING in the store and reads back as DEAD.

Example:
    >>> import threading
    >>> calls = []
    >>> flusher = Flusher(lambda: calls.append(1), "demo")
    >>> flusher.start(); flusher.stop()
    >>> [t for t in threading.enumerate() if t.name.startswith(THREAD)]
    []
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from typing import Callable

__all__ = ["EVERY_S", "THREAD", "Flusher", "register", "unregister"]

log = logging.getLogger("gpulab")
EVERY_S = 0.5                             # a logged point reaches both stores within about this long
THREAD = "gpulab-tracking-flush"
_open: dict[int, tuple[int, Callable[[], None]]] = {}   # id(run) -> (pid of its process, end it as KILLED)
_lock = threading.Lock()
_registered = False


class Flusher:
    """Calls ``flush`` every :data:`EVERY_S` in a daemon thread until :meth:`stop` (which joins it). A failing
    flush is logged once and tried again at the next tick (the points stay buffered)."""

    def __init__(self, flush: Callable[[], None], name: str) -> None:
        self._flush = flush
        self._stop = threading.Event()
        self._warned = False
        self._thread = threading.Thread(target=self._loop, name=f"{THREAD} ({name})", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(EVERY_S):
            try:
                self._flush()
            except Exception:
                if not self._warned:
                    self._warned = True
                    log.warning("gl.tracking: a background flush failed; the points stay buffered and are sent "
                                "again", exc_info=True)

    def stop(self) -> None:
        """Stop the thread and wait for it (a flush in progress finishes first)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()


def register(run: object, end_killed: Callable[[], None]) -> None:
    """Remember an open run, to be ended with ``end_killed()`` if it is still open when the interpreter exits."""
    global _registered
    with _lock:
        _open[id(run)] = (os.getpid(), end_killed)
        if not _registered:
            atexit.register(_at_exit)
            _registered = True


def unregister(run: object) -> None:
    with _lock:
        _open.pop(id(run), None)


def _at_exit() -> None:
    with _lock:
        left = [end for pid, end in _open.values() if pid == os.getpid()]   # not a forked child's copies
    for end in left:
        try:
            end()
        except Exception:
            log.warning("gl.tracking: a run left open at exit could not be ended", exc_info=True)
