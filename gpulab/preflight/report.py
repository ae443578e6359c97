"""The preflight's report: the machine, each test and notebook with its time, the figures a learner will see
beside the datasheet, and every warning printed; as text, HTML, Markdown and JSON.

Example:
    >>> from gpulab.preflight.report import CheckReport
    >>> from gpulab.preflight.run import Outcome
    >>> r = CheckReport("2026-01-01T00:00:00+00:00", 1.0, None, (), (Outcome("t::a", "passed", 0.1),), (), (), ())
    >>> r.ok, r.counts()
    (True, {'passed': 1})
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._format import fmt_seconds, html_table, text_table
from .stack import Environment
from .run import Outcome

__all__ = ["Figure", "CheckReport"]


@dataclass(frozen=True)
class Figure:
    """One measured figure, with the datasheet's beside it when there is one (``share`` = measured / datasheet)."""

    name: str
    value: float | None
    unit: str
    datasheet: float | None = None
    source: str = ""           # which test or step measured it
    note: str = ""
    profile: str = "native"    # or the GPU rehearsed (--as t4)

    @property
    def share(self) -> float | None:
        if self.value is None or not self.datasheet:
            return None
        return self.value / self.datasheet

    def row(self) -> tuple[str, str, str, str, str]:
        num = lambda x: "-" if x is None else f"{x:,.4g}"
        share = "-" if self.share is None else f"{100 * self.share:.0f}%"
        return (self.name, f"{num(self.value)} {self.unit}", f"{num(self.datasheet)} {self.unit}" if self.datasheet
                else "-", share, self.note or self.source)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "unit": self.unit, "datasheet": self.datasheet,
                "share": self.share, "source": self.source, "note": self.note, "profile": self.profile}


_FIG_HEADER = ("figure", "measured", "datasheet", "share", "note")
_OUT_HEADER = ("name", "profile", "status", "time", "ran", "detail")


@dataclass(frozen=True)
class CheckReport:
    """What ``python -m gpulab check`` found: ``ok`` when nothing failed or timed out."""

    started_at: str
    seconds: float
    environment: Environment | None
    figures: tuple[Figure, ...]
    tests: tuple[Outcome, ...]
    notebooks: tuple[Outcome, ...]
    warnings: tuple[str, ...]
    notes: tuple[str, ...]
    files: tuple[str, ...] = field(default=())
    jobs: int = 1
    profiles: tuple[str, ...] = ("native",)
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.tests + self.notebooks) and not any(o.status == "not run" for o in self.notebooks)

    def counts(self) -> dict[str, int]:
        return dict(Counter(o.status for o in self.tests + self.notebooks))

    @property
    def headline(self) -> str:
        gpus = 0 if self.environment is None else self.environment.gpus
        where = "no GPU here: CPU parts only" if not gpus else \
            ", ".join(g.name for g in self.environment.system.gpus if g.visible)   # type: ignore[union-attr]
        counts = ", ".join(f"{n} {s}" for s, n in sorted(self.counts().items())) or "nothing run"
        verdict = "INTERRUPTED" if self.interrupted else "PASSED" if self.ok else "FAILED"
        how = ", ".join(p if p == "native" else f"{p} rehearsal" for p in self.profiles)
        return (f"gpulab check: {verdict} in {fmt_seconds(self.seconds)} on {where} "
                f"({counts}; {how}; {self.jobs} at a time)")

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "headline": self.headline, "started_at": self.started_at,
                "seconds": round(self.seconds, 1), "counts": self.counts(),
                "environment": None if self.environment is None else self.environment.to_dict(),
                "figures": [f.to_dict() for f in self.figures], "tests": [o.to_dict() for o in self.tests],
                "notebooks": [o.to_dict() for o in self.notebooks], "warnings": list(self.warnings),
                "notes": list(self.notes), "jobs": self.jobs, "profiles": list(self.profiles),
                "interrupted": self.interrupted, "files": list(self.files)}

    def _outcome_rows(self, outcomes: tuple[Outcome, ...]) -> list[tuple[str, ...]]:
        def ran(o: Outcome) -> str:
            if o.status in ("not run",) or (o.status == "interrupted" and not o.seconds):
                return "-"
            where = "beside others" if o.beside else "alone"
            return f"{where}; alone: {o.alone}" if o.alone else where

        return [(o.name, o.profile, o.status, fmt_seconds(o.seconds) if o.seconds else "-", ran(o),
                 o.detail.replace("\n", " ")[:160]) for o in outcomes]

    def to_markdown(self) -> str:
        """The report as Markdown (``build/gpu-check/report.md``)."""
        def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
            if not rows:
                return "_none_\n"
            esc = lambda s: str(s).replace("|", "\\|")
            lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
            return "\n".join(lines) + "\n"

        parts = [f"# {self.headline}\n", f"Started {self.started_at}.\n"]
        if self.environment is not None:
            parts += ["## Machine\n", table(("item", "value"), self.environment.machine_rows()),
                      "\n## Packages\n", table(("package", "version", "if missing"), self.environment.package_rows())]
        parts += ["\n## Figures a learner will see\n", table(_FIG_HEADER, [f.row() for f in self.figures]),
                  "\n## GPU conformance tests\n", table(_OUT_HEADER, self._outcome_rows(self.tests)),
                  "\n## Notebooks (never passed on a GPU first, then the oldest pass; reference solutions on)\n",
                  table(_OUT_HEADER, self._outcome_rows(self.notebooks))]
        if self.warnings:
            parts += ["\n## Warnings printed\n", "\n".join(f"- {w}" for w in self.warnings) + "\n"]
        if self.notes:
            parts += ["\n## Notes\n", "\n".join(f"- {n}" for n in self.notes) + "\n"]
        return "\n".join(parts)

    def write(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write ``report.md`` and ``report.json`` into ``out_dir``; their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        md, js = out / "report.md", out / "report.json"
        md.write_text(self.to_markdown(), encoding="utf-8")
        js.write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n", encoding="utf-8")
        return md, js

    def __repr__(self) -> str:
        parts = [self.headline]
        if self.figures:
            parts.append(text_table(_FIG_HEADER, [f.row() for f in self.figures]))
        failed = tuple(o for o in self.tests + self.notebooks if not o.ok)
        if failed:
            parts.append("not passed:\n" + text_table(_OUT_HEADER, self._outcome_rows(failed)))
        parts += [f"note: {n}" for n in self.notes]
        parts += [f"report: {f}" for f in self.files]
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return (f"<p><b>{self.headline}</b></p>"
                + html_table(_FIG_HEADER, [f.row() for f in self.figures], caption="Figures a learner will see")
                + html_table(_OUT_HEADER, self._outcome_rows(self.tests), caption="GPU conformance tests")
                + html_table(_OUT_HEADER, self._outcome_rows(self.notebooks), caption="Notebooks"))
