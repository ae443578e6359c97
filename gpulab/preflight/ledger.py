"""The ledger of GPU runs: one JSON record per ``python -m gpulab check`` (per profile), kept in the repository.

A record holds the GPU, driver, CUDA, the versions, the commit, the profile (``native`` or a rehearsed GPU such
as ``t4``), every notebook's and test's outcome (status, seconds, whether it ran beside others) and every figure
with its datasheet and share. :func:`record` builds one from a :class:`~gpulab.preflight.report.CheckReport`,
:func:`write_record` files it as ``<date>_<gpu>_<profile>.json``, :func:`problems` checks one against the schema,
:func:`read_ledger` reads the folder back and :func:`last_runs` / :func:`figure_runs` answer what the README and
the lessons show: a notebook's last GPU run, and the figures the course measured on a real GPU. A record is never
edited by hand: the check writes it, whoever ran it commits it.

Example:
    >>> from gpulab.preflight.ledger import problems, slug
    >>> slug("NVIDIA H100 80GB HBM3")
    'nvidia-h100-80gb-hbm3'
    >>> problems({"schema": "gpulab-gpu-run/1"})[:1]
    ['missing field: started_at']
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterable

__all__ = ["SCHEMA", "FOLDER", "STATUSES", "record", "problems", "write_record", "read_ledger", "last_runs",
           "figure_runs", "slug", "ledger_folder"]

SCHEMA = "gpulab-gpu-run/1"
FOLDER = Path("tests") / "gpu" / "runs"
STATUSES = ("passed", "failed", "skipped", "timed out", "interrupted", "not run")
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "schema": str, "started_at": str, "profile": str, "label": (str, type(None)), "transcribed": bool,
    "source": str, "device": dict, "driver": (str, type(None)), "cuda": (str, type(None)), "versions": dict,
    "commit": (str, type(None)), "jobs": int, "seconds": (int, float), "ok": bool, "counts": dict,
    "notebooks": list, "tests": list, "figures": list,
}
_OUTCOME = {"name": str, "status": str, "seconds": (int, float), "beside": bool}
_FIGURE = {"name": str, "unit": str}


def slug(text: str) -> str:
    """A file-name-safe form of a GPU's name."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def ledger_folder(course: Path | None) -> Path | None:
    """Where the course's ledger lives (``tests/gpu/runs`` of its checkout), None without a checkout."""
    return None if course is None else course / FOLDER


def _versions() -> dict[str, str | None]:
    import importlib.metadata as md
    import platform

    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in ("torch", "triton", "numba-cuda", "nvidia-ml-py", "gpulab"):
        try:
            out[dist] = md.version(dist)
        except md.PackageNotFoundError:
            out[dist] = None
    return out


def _commit(course: Path | None) -> tuple[str | None, bool | None]:
    import subprocess

    if course is None or not (course / ".git").exists():
        return None, None
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=course, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=course,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return (sha.stdout.strip() or None) if sha.returncode == 0 else None, bool(dirty.stdout.strip())


def record(report: Any, *, profile: str = "native", label: str | None = None, jobs: int = 1,
           course: Path | None = None, source: str = "python -m gpulab check") -> dict[str, Any]:
    """The ledger record of one profile of a check (``report``: its :class:`CheckReport`)."""
    env = report.environment
    system = None if env is None else env.system
    gpus = [g for g in (system.gpus if system is not None else ()) if g.visible]
    if gpus and env is not None and env.gpus:
        g = gpus[0]
        device = {"kind": "cuda", "name": g.name, "count": len(gpus), "memory_bytes": g.memory_total_bytes,
                  "compute_capability": None if not g.compute_capability else ".".join(map(str, g.compute_capability))}
    else:
        device = {"kind": "cpu", "name": system.cpu_model if system is not None else "unknown CPU", "count": 0,
                  "memory_bytes": None if system is None else system.ram_bytes, "compute_capability": None,
                  "threads": None if system is None else system.logical_cpus}
    cuda = None
    if system is not None and system.cuda_driver_version:
        v = system.cuda_driver_version
        cuda = f"{v // 1000}.{v % 1000 // 10}"
    commit, dirty = _commit(course)
    mine = lambda rows: [o.to_dict() for o in rows if o.profile == profile]
    notebooks, tests = mine(report.notebooks), mine(report.tests)
    counts: dict[str, int] = {}
    for o in notebooks + tests:
        counts[o["status"]] = counts.get(o["status"], 0) + 1
    figures = [f.to_dict() for f in report.figures if getattr(f, "profile", "native") == profile]
    ok = all(o["status"] in ("passed", "skipped") for o in notebooks + tests)
    return {"schema": SCHEMA, "started_at": report.started_at, "profile": profile, "label": label,
            "transcribed": False, "source": source, "device": device,
            "driver": None if system is None else system.driver_version, "cuda": cuda,
            "torch_cuda": None if env is None else env.torch_cuda, "versions": _versions(), "commit": commit,
            "dirty": dirty, "jobs": int(jobs), "seconds": round(float(report.seconds), 1), "ok": ok, "counts": counts,
            "notebooks": notebooks, "tests": tests, "figures": figures}


def problems(rec: Any) -> list[str]:
    """What is wrong with a ledger record (empty when it follows the schema)."""
    if not isinstance(rec, dict):
        return [f"a record is a JSON object, got {type(rec).__name__}"]
    out = [f"missing field: {k}" for k in _REQUIRED if k not in rec]
    out += [f"{k} is {type(rec[k]).__name__}, expected {getattr(t, '__name__', t)}" for k, t in _REQUIRED.items()
            if k in rec and (not isinstance(rec[k], t) or (t is int and isinstance(rec[k], bool)))]
    if rec.get("schema") not in (None, SCHEMA):
        out.append(f"schema is {rec.get('schema')!r}, expected {SCHEMA!r}")
    if isinstance(rec.get("device"), dict):
        out += [f"device.{k} missing" for k in ("kind", "name") if k not in rec["device"]]
        if rec["device"].get("kind") not in ("cuda", "cpu", None):
            out.append(f"device.kind is {rec['device'].get('kind')!r}: cuda or cpu")
    for part in ("notebooks", "tests"):
        for i, o in enumerate(rec.get(part) or [] if isinstance(rec.get(part), list) else []):
            if not isinstance(o, dict):
                out.append(f"{part}[{i}] is not an object")
                continue
            out += [f"{part}[{i}].{k} missing or not {t}" for k, t in _OUTCOME.items()
                    if not isinstance(o.get(k), t)]
            if o.get("status") not in STATUSES:
                out.append(f"{part}[{i}].status is {o.get('status')!r}: one of {', '.join(STATUSES)}")
    for i, f in enumerate(rec.get("figures") or [] if isinstance(rec.get("figures"), list) else []):
        if not isinstance(f, dict):
            out.append(f"figures[{i}] is not an object")
            continue
        out += [f"figures[{i}].{k} missing" for k, t in _FIGURE.items() if not isinstance(f.get(k), t)]
        value, share = f.get("value"), f.get("share")
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            out.append(f"figures[{i}].value is {value!r}: a number or null")
        if share is not None and isinstance(value, (int, float)) and f.get("datasheet"):
            if abs(share - value / f["datasheet"]) > 1e-6 * max(1.0, abs(share)):
                out.append(f"figures[{i}].share {share} is not value / datasheet")
    if rec.get("ok") is True and any(o.get("status") not in ("passed", "skipped")
                                     for p in ("notebooks", "tests") for o in rec.get(p) or [] if isinstance(o, dict)):
        out.append("ok is true but an outcome did not pass (not run is never passed)")
    return out


def write_record(rec: dict[str, Any], folder: str | Path) -> Path:
    """File ``rec`` in ``folder`` as ``<date>_<gpu>_<profile>.json`` (``-2``, ``-3`` ... when one exists); its path.
    A record that breaks the schema raises ``ValueError`` listing what is wrong."""
    wrong = problems(rec)
    if wrong:
        raise ValueError("not a ledger record: " + "; ".join(wrong[:5]))
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{rec['started_at'][:10]}_{slug(rec['device']['name'])}_{slug(rec['profile'])}"
    path, n = folder / f"{stem}.json", 1
    while path.exists():
        n += 1
        path = folder / f"{stem}-{n}.json"
    path.write_text(json.dumps(rec, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return path


def read_ledger(folder: str | Path | None) -> list[dict[str, Any]]:
    """Every record in ``folder``, oldest first (a file that is no record is skipped); [] without a folder."""
    if folder is None or not Path(folder).is_dir():
        return []
    out = []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            rec = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not problems(rec):
            out.append({**rec, "_file": path.name})
    return sorted(out, key=lambda r: (r["started_at"], r["_file"]))


def _prefix(name: str) -> str:
    return name.split("_")[0]


def last_runs(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per notebook prefix ("00", "A1"), per profile: the last GPU run that reached it (its GPU, date, status,
    seconds, commit, and whether the tree had uncommitted changes). CPU records are not GPU runs and do not count."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for rec in records:
        if rec["device"].get("kind") != "cuda":
            continue
        for o in rec["notebooks"]:
            if o["status"] == "not run":
                continue
            out.setdefault(_prefix(o["name"]), {})[rec["profile"]] = {
                "gpu": rec["device"]["name"], "date": rec["started_at"][:10], "status": o["status"],
                "seconds": o["seconds"], "commit": rec.get("commit"), "dirty": rec.get("dirty"),
                "transcribed": rec["transcribed"]}
    return out


def _beside(figure: dict[str, Any], shared: set[str]) -> bool:
    """Was ``figure`` measured by a test that ran beside other jobs (``shared``: those tests' names), and not again
    alone? ``tests/gpu/test_x.py::test_y`` in a figure's source is ``tests.gpu.test_x::test_y`` in an outcome."""
    source = str(figure.get("source") or "")
    path, _, test = source.partition("::")
    key = path.removesuffix(".py").replace("/", ".") + "::" + test
    return key in shared and not str(figure.get("note") or "").endswith("re-run alone")


def figure_runs(records: Iterable[dict[str, Any]], name: str, *, profile: str = "native") -> list[dict[str, Any]]:
    """The figure called ``name`` from every GPU record of ``profile``, newest first: value, unit, datasheet, share,
    note, and the GPU, date and commit that measured it. A figure measured beside other jobs (a check running
    several at once) is left out unless it was measured again alone: it says what the GPU gave while shared."""
    out = []
    for rec in records:
        if rec["device"].get("kind") != "cuda" or rec["profile"] != profile:
            continue
        shared = {o["name"] for o in rec["tests"] if o.get("beside")}
        for f in rec["figures"]:
            if f["name"] == name and f.get("value") is not None and not _beside(f, shared):
                out.append({**f, "gpu": rec["device"]["name"], "date": rec["started_at"][:10],
                            "commit": rec.get("commit"), "dirty": rec.get("dirty"),
                            "transcribed": rec["transcribed"]})
    return sorted(out, key=lambda f: f["date"], reverse=True)
