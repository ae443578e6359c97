"""Keeping a runs folder's MLflow store sound: one process at a time creates or opens it for writing (a lock
file in the runs folder), a file that is not a SQLite store is refused with a clear message before MLflow
opens it, reads look at the file read-only first, and a run left RUNNING by a process that is gone reads
as ``DEAD``. Standard library and psutil only: MLflow is imported in ``_store.py``.

Example:
    >>> import shutil, tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> db = folder / "mlflow.db"
    >>> check_db(db), has_tables(db)                          # no file yet: nothing to refuse, no tables
    (False, False)
    >>> _ = db.write_bytes(b"not a database")
    >>> check_db(db)
    Traceback (most recent call last):
    ...
    ValueError: ... is not a SQLite database (corrupt, or another program's file): move it away or choose another root
    >>> status("RUNNING", process_tags()), status("RUNNING", {**process_tags(), PID_START_TAG: "0.0"})
    ('RUNNING', 'DEAD')
    >>> shutil.rmtree(folder)
"""
from __future__ import annotations

import contextlib
import os
import socket
import sqlite3
import time
from pathlib import Path
from typing import Iterator, Mapping
from urllib.parse import quote

__all__ = ["DB", "LOCK", "store_lock", "check_db", "has_tables", "schema_version", "is_race", "damaged",
           "process_tags", "status", "check_tags"]

DB = "mlflow.db"
LOCK = ".mlflow.db.lock"                   # beside the store; flock'ed while a process creates or opens it
SQLITE_HEADER = b"SQLite format 3\x00"
HOST_TAG, PID_TAG, PID_START_TAG = "gpulab.host", "gpulab.pid", "gpulab.pid_start"
RESERVED = ("gpulab.", "mlflow.")          # tag prefixes gl.tracking and MLflow set themselves
DEAD = "DEAD"
DEAD_NOTE = "DEAD: its process ended without closing it; metrics up to its last flush are kept"
_RACES = ("already exists", "duplicate column name", "database is locked")

try:
    import fcntl
except ImportError:                        # Windows: msvcrt's byte-range lock instead
    fcntl = None                           # type: ignore[assignment]
try:
    import msvcrt
except ImportError:
    msvcrt = None                          # type: ignore[assignment]

HAVE_LOCK = fcntl is not None or msvcrt is not None


@contextlib.contextmanager
def store_lock(root: Path) -> Iterator[None]:
    """Hold ``root/.mlflow.db.lock`` exclusively (``fcntl.flock``, or ``msvcrt.locking`` on Windows: other
    processes and other threads wait); with neither, nothing is held and the callers retry MLflow's schema race.
    A runs folder that cannot take the file is a ValueError."""
    if not HAVE_LOCK:
        yield
        return
    try:
        fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise ValueError(f"cannot write in the runs folder {root} ({e.strerror}): choose a folder you can write "
                         "to with root=... or $GPULAB_RUNS") from None
    try:
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a file system without locks (some network mounts): go on
                fcntl.flock(fd, fcntl.LOCK_EX)  # released when the descriptor is closed
            yield
        else:
            _msvcrt_lock(fd)
            try:
                yield
            finally:
                with contextlib.suppress(OSError):
                    os.lseek(fd, 0, os.SEEK_SET)
                    msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
    finally:
        os.close(fd)


def _msvcrt_lock(fd: int, wait_s: float = 300.0) -> None:
    """Lock the file's first byte (LK_LOCK itself retries for about 10 s; this waits up to ``wait_s``)."""
    end = time.monotonic() + wait_s
    while True:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
            return
        except OSError:
            if time.monotonic() > end:
                raise


def check_db(db: Path) -> bool:
    """Refuse, before MLflow opens it, a store path that is a folder, not a regular file, or a file that is not
    SQLite; True when a SQLite file with content is there, False when it is missing or empty."""
    fix = "move it away or choose another root"
    if db.is_dir():
        raise ValueError(f"{db} is a folder, but gl.tracking keeps MLflow's SQLite store in a file of that name: {fix}")
    if not db.exists():
        return False
    if not db.is_file():
        raise ValueError(f"{db} is not a regular file (a pipe or a device?), so it cannot be MLflow's store: {fix}")
    try:
        with open(db, "rb") as f:
            head = f.read(len(SQLITE_HEADER))
    except OSError as e:
        raise ValueError(f"cannot read the MLflow store {db} ({e.strerror}): {fix}") from None
    if head and head != SQLITE_HEADER:
        raise ValueError(f"{db} is not a SQLite database (corrupt, or another program's file): {fix}")
    return bool(head)


def _read_only(db: Path, query: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{quote(str(db))}?mode=ro", uri=True, timeout=20)
    try:
        return con.execute(query).fetchall()
    except sqlite3.DatabaseError as e:
        raise damaged(db, e) from None
    finally:
        con.close()


def has_tables(db: Path) -> bool:
    """Whether the file holds MLflow's ``experiments`` and ``runs`` tables, looked at read-only (a missing or
    empty file has none, and stays as it was)."""
    if not db.is_file():
        return False
    rows = _read_only(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ('experiments', 'runs')")
    return len(rows) == 2


def schema_version(db: Path) -> str | None:
    """The store's schema revision (alembic's ``version_num``), read-only; None when it has none."""
    rows = _read_only(db, "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'alembic_version'")
    return (_read_only(db, "SELECT version_num FROM alembic_version") or [(None,)])[0][0] if rows else None


def _chain(e: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = e.__cause__ or e.__context__


def is_race(e: BaseException) -> bool:
    """Whether ``e`` is two processes creating one store at once (a table or column made twice) or waiting
    on each other: worth one more try."""
    return any(r in str(x) for x in _chain(e) for r in _RACES)


def damaged(db: Path, e: BaseException) -> BaseException:
    """A ValueError naming the store and the fix when ``e`` is SQLite's (or SQLAlchemy's) database error,
    else ``e`` itself."""
    for x in _chain(e):
        if isinstance(x, sqlite3.DatabaseError) or (type(x).__module__.startswith("sqlalchemy") and
                                                    type(x).__name__ in ("DatabaseError", "OperationalError")):
            cause = (str(x).splitlines() or [type(x).__name__])[0][:160]
            return ValueError(f"cannot use the MLflow store {db} ({cause}): if it is damaged (cut short by a copy "
                              "or a full disk, or another program's file), move it away or choose another root")
    return e


def check_tags(tags: Mapping[str, str]) -> None:
    """Refuse tags whose names gl.tracking (``gpulab.*``) or MLflow (``mlflow.*``) set themselves."""
    for key in tags:
        if key.startswith(RESERVED):
            raise ValueError(f"tag {key!r} is reserved: gl.tracking sets gpulab.* tags and MLflow sets mlflow.* tags "
                             "on every run; choose another name")


def process_tags() -> dict[str, str]:
    """The host, pid and start time of this process: tags that let a later reader tell whether a RUNNING run's
    process still lives."""
    tags = {HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    try:
        import psutil

        tags[PID_START_TAG] = repr(psutil.Process().create_time())
    except Exception:                      # no psutil, or no access: the pid alone is checked
        pass
    return tags


def status(stored: str, tags: Mapping[str, str]) -> str:
    """The run's status as stored, or ``DEAD`` for a RUNNING run whose process on this host is gone (its pid
    dead, a zombie, or reused by a process started at another time)."""
    if stored != "RUNNING" or tags.get(HOST_TAG) != socket.gethostname():
        return stored
    try:
        pid = int(tags[PID_TAG])
        start = float(tags[PID_START_TAG]) if PID_START_TAG in tags else None
    except (KeyError, ValueError):
        return stored
    return stored if _alive(pid, start) else DEAD


def _alive(pid: int, start: float | None) -> bool:
    try:
        import psutil
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:
            pass
        return True
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return start is None or abs(proc.create_time() - start) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:                   # access denied: it exists
        return True


def pause(attempt: int) -> None:
    """A short, growing, slightly uneven wait between tries (so racing processes fall out of step)."""
    time.sleep(0.05 * (attempt + 1) + (os.getpid() % 7) * 0.01)
