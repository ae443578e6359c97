"""The check's plan: which profiles, how many jobs at once, which notebooks first, the jobs themselves, what they
gave, and the re-runs alone of what failed beside others.

Example:
    >>> from gpulab.preflight.plan import profiles_arg
    >>> profiles_arg("native,t4")
    ('native', 't4')
"""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ..rehearsal import CAP_ENV, ENV, PROFILES
from .jobs import Done, Job, run_jobs
from .report import Figure
from .run import ALONE, Outcome, marked_alone, notebook_job, notebook_outcome, read_figures, tests_job, tests_outcomes

__all__ = ["profiles_arg", "default_jobs", "order_notebooks", "build_jobs", "collect", "rerun_alone",
           "rerun_tests_alone", "state"]

_GIB = 1024 ** 3
_PER_JOB_GPU_BYTES = 16 * _GIB      # a T4's memory and some: what one notebook at GPU sizes is planned to hold
_MAX_JOBS = 6
# thread and process pools a job sizes from the cores it sees: OpenMP's, and Inductor's compile workers (one process
# each; six notebooks compiling at once on a 16-core host would start 96 of them and exhaust the host's memory)
_SHARED_POOLS = ("OMP_NUM_THREADS", "TORCHINDUCTOR_COMPILE_THREADS")


def profiles_arg(profiles: str | Sequence[str]) -> tuple[str, ...]:
    """``"native,t4"`` or ``["native", "t4"]`` as a tuple of known profiles (each once, in the order given)."""
    items = profiles.split(",") if isinstance(profiles, str) else list(profiles)
    if not items or not all(isinstance(p, str) for p in items):
        raise TypeError(f"profiles must be 'native', a GPU to rehearse ({', '.join(PROFILES)}) or a list of them, "
                        f"got {profiles!r}")
    out: list[str] = []
    for p in (p.strip().lower() for p in items):
        if p not in ("native", *PROFILES):
            raise ValueError(f"profile {p!r} is not one the check knows: use native or {', '.join(PROFILES)} "
                             f"(e.g. --as native,t4)")
        if p not in out:
            out.append(p)
    return tuple(out)


def default_jobs(env: Any, profiles: Sequence[str] = ("native",)) -> int:
    """How many jobs fit this host at once: 1 without a GPU (the CPU's timings are the lesson); on a GPU, one per
    three CPU cores and per 16 GiB of the GPU's memory, at most 6."""
    gpus = [g for g in (env.system.gpus if env is not None and env.system is not None else ()) if g.visible]
    if not getattr(env, "gpus", 0) or not gpus:
        return 1
    cores = os.cpu_count() or 1
    memory = gpus[0].memory_total_bytes or _PER_JOB_GPU_BYTES
    return max(1, min(cores // 3, int(memory // _PER_JOB_GPU_BYTES), _MAX_JOBS))


def order_notebooks(paths: Sequence[Path], records: Sequence[dict[str, Any]], profiles: Sequence[str]) -> list[Path]:
    """``paths`` with the notebooks that never passed on a GPU (in any of ``profiles``) first, then the oldest
    pass; the course's order among equals."""
    last: dict[str, str] = {}
    for rec in records:
        if rec["device"].get("kind") != "cuda" or rec["profile"] not in profiles:
            continue
        for o in rec["notebooks"]:
            if o["status"] == "passed":
                last[o["name"].split("_")[0]] = max(last.get(o["name"].split("_")[0], ""), rec["started_at"])
    return sorted(paths, key=lambda p: (p.name.split("_")[0] in last, last.get(p.name.split("_")[0], "")))


def _env_for(profile: str, jobs: int, env: Any, course: Path) -> dict[str, str]:
    out = {ENV: profile, "PYTHONPATH": os.pathsep.join(filter(None, [str(course), os.environ.get("PYTHONPATH")]))}
    gpus = [g for g in (env.system.gpus if env.system is not None else ()) if g.visible]
    if jobs > 1 and env.gpus and gpus and gpus[0].memory_total_bytes:
        out[CAP_ENV] = str(int(gpus[0].memory_total_bytes // jobs))    # a notebook's share of the one GPU
    share = str(max(1, (os.cpu_count() or 1) // jobs))    # each job's share of the cores, for its thread pools
    for name in _SHARED_POOLS:
        if jobs > 1 and name not in os.environ:
            out[name] = share
    return out


def _tag(profile: str) -> str:
    return "" if profile == "native" else f"-{profile}"


def build_jobs(course: Path | None, work: Path, profiles: Sequence[str], jobs: int, env: Any, tests: bool,
               notebooks: Sequence[Path], tests_timeout_s: float, notebook_timeout_s: float, cell_timeout_s: float,
               kernel_name: str | None) -> tuple[list[Job], list[Outcome]]:
    """The jobs to run (the tests of each profile first, then each notebook in each profile) and the outcomes known
    without running anything (pytest missing)."""
    todo: list[Job] = []
    fixed: list[Outcome] = []
    if course is None:
        return todo, fixed
    tests_dir = course / "tests" / "gpu"
    alone = tests and jobs > 1 and marked_alone(tests_dir)
    for p in profiles:
        if not tests:
            break
        if alone and p == "native":      # the whole GPU to themselves, before anything runs beside them
            job = tests_job(tests_dir, work, tests_timeout_s, work / "figures-whole-gpu.jsonl",
                            env=_env_for(p, 1, env, course), tag="-whole-gpu", extra_args=("-m", ALONE))
            if not isinstance(job, Outcome):
                todo.append(dataclasses.replace(job, name="tests/gpu (the whole GPU, alone)",
                                                tag={**job.tag, "kind": "tests", "profile": p, "alone": True}))
        job = tests_job(tests_dir, work, tests_timeout_s, work / f"figures{_tag(p)}.jsonl",
                        env=_env_for(p, jobs, env, course), tag=_tag(p),
                        extra_args=("-m", f"not {ALONE}") if alone or p != "native" else ())
        if isinstance(job, Outcome):
            fixed.append(dataclasses.replace(job, profile=p))
        else:
            todo.append(dataclasses.replace(job, tag={**job.tag, "kind": "tests", "profile": p}))
    for path in notebooks:
        for p in profiles:
            todo.append(notebook_job(path, notebook_timeout_s, work / "results" / f"{path.stem}{_tag(p)}.json",
                                     cell_timeout_s=cell_timeout_s,
                                     save_to=work / "notebooks" / (p if p != "native" else "") / path.name,
                                     kernel_name=kernel_name, env=_env_for(p, jobs, env, course),
                                     name=path.name + ("" if p == "native" else f" [{p}]"),
                                     tag={"kind": "notebook", "profile": p, "path": str(path)}, group=path.name))
    return todo, fixed


def state(d: Done) -> str:
    """A job's end in words: the notebook's own status where it wrote one."""
    if d.result is not None and "status" in d.result:
        return str(d.result["status"])
    return {"finished": "ended" if d.returncode == 0 else f"ended (exit {d.returncode})"}.get(d.state, d.state)


def collect(done: Sequence[Done], figures: list[Figure],
            budget_s: float | None = None) -> tuple[list[Outcome], list[Outcome], list[Figure]]:
    """The tests' outcomes, the notebooks' outcomes and the figures, from the finished jobs."""
    tests, notebooks, figs = [], [], list(figures)
    for d in done:
        tag = d.job.tag or {}
        profile = tag.get("profile", "native")
        if tag.get("kind") == "tests":
            tests += [dataclasses.replace(o, profile=profile, beside=d.beside, started_s=d.started_s)
                      for o in tests_outcomes(d, budget_s)]
            figs += [Figure(r.get("name", "?"), r.get("value"), r.get("unit", ""), r.get("datasheet"),
                            r.get("test", ""), r.get("note", ""), profile)
                     for r in read_figures(Path(d.job.tag.get("figures") or Path(d.job.tag["lines"]).with_name(
                         f"figures{_tag(profile)}.jsonl")))]
        else:
            notebooks.append(notebook_outcome(d, profile, budget_s))
    return tests, notebooks, figs


def _alone(old: Outcome, new: Outcome) -> Outcome:
    detail = f"beside others: {old.status} ({' '.join(old.detail.split())[:200]}); alone: {new.status}"
    if new.detail:
        detail += f" ({' '.join(new.detail.split())[:200]})"
    return dataclasses.replace(new, detail=detail, beside=True, alone=new.status, warnings=old.warnings + new.warnings,
                               started_s=old.started_s)


def rerun_tests_alone(tests: list[Outcome], done: Sequence[Done], deadline: float, work: Path,
                      say: Callable[[str], None]) -> tuple[list[Outcome], list[Figure]]:
    """The conformance tests that failed beside others, run again alone (one pytest per profile, just those tests)
    while the budget lasts; each row says both outcomes. The figures the re-run recorded come back too."""
    from .run import node_id

    out, figs = list(tests), []
    for d in done:
        tag = d.job.tag or {}
        if tag.get("kind") != "tests":
            continue
        profile, root = tag.get("profile", "native"), Path(d.job.cwd or ".")
        failed = {o.name: node_id(o.name, root) for o in tests
                  if o.profile == profile and o.beside and o.status in ("failed", "timed out") and "::" in o.name}
        failed = {k: v for k, v in failed.items() if v}
        if not failed:
            continue
        if deadline - time.monotonic() < 30:
            out = [dataclasses.replace(o, alone="not re-run: the budget was spent") if o.name in failed
                   and o.profile == profile else o for o in out]
            continue
        say(f"re-running {len(failed)} conformance test(s) of {profile} alone (they failed beside others) ...")
        suffix = _tag(profile) + "-alone"
        job = tests_job(Path(tag["dir"]), work, max(30.0, deadline - time.monotonic()),
                        work / f"figures{suffix}.jsonl", env=d.job.env, tag=suffix, targets=list(failed.values()))
        if isinstance(job, Outcome):
            continue
        again = run_jobs([dataclasses.replace(job, tag={**job.tag, "kind": "tests", "profile": profile},
                                              env={k: v for k, v in job.env.items()
                                                   if k not in (CAP_ENV, *_SHARED_POOLS)})], 1, deadline=deadline)[0]
        alone = {node_id(o.name, root) or o.name: o for o in tests_outcomes(again)}
        out = [_alone(o, dataclasses.replace(alone[failed[o.name]], profile=profile))
               if o.profile == profile and o.name in failed and failed[o.name] in alone else o for o in out]
        figs += [Figure(r.get("name", "?"), r.get("value"), r.get("unit", ""), r.get("datasheet"), r.get("test", ""),
                        (r.get("note") or "") + "; re-run alone", profile)
                 for r in read_figures(work / f"figures{suffix}.jsonl")]
    return out, figs


def rerun_alone(notebooks: list[Outcome], done: Sequence[Done], deadline: float,
                say: Callable[[str], None]) -> list[Outcome]:
    """Each notebook that failed or timed out beside others, run again alone while the budget lasts; its outcome
    says both."""
    jobs = {(d.job.tag or {}).get("profile", "native") + "/" + Path(str((d.job.tag or {}).get("path", ""))).name: d.job
            for d in done if (d.job.tag or {}).get("kind") == "notebook"}
    out = []
    for o in notebooks:
        job = jobs.get(f"{o.profile}/{o.name}")
        if o.status not in ("failed", "timed out") or not o.beside or job is None:
            out.append(o)
            continue
        if deadline - time.monotonic() < 30:
            out.append(dataclasses.replace(o, alone="not re-run: the budget was spent",
                                           detail=o.detail + " (not re-run alone: the check's budget was spent)"))
            continue
        say(f"re-running {job.name} alone (it {o.status} beside others) ...")
        again = run_jobs([dataclasses.replace(job, env={k: v for k, v in job.env.items()
                                                        if k not in (CAP_ENV, *_SHARED_POOLS)})], 1,
                         deadline=deadline)[0]
        new = notebook_outcome(again, o.profile)
        say(f"  alone: {new.status} in {new.seconds:.0f} s")
        out.append(_alone(o, new))
    return out
