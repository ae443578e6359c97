"""What a launch gives back: every rank's report, and the errors that say which rank failed and why."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .._format import NA, TableView, fmt_number, fmt_seconds

__all__ = ['RankFailure', 'DistributedError', 'LaunchTimeout', 'LaunchResult']


@dataclass(frozen=True)
class RankFailure:
    """One rank that failed: where it ran and the traceback it printed (or its stack when it hung)."""

    rank: int | None
    node: int
    local_rank: int
    traceback: str

    def __str__(self) -> str:
        who = f"rank {self.rank}" if self.rank is not None else f"local rank {self.local_rank}"
        return f"{who} (node {self.node}, local rank {self.local_rank})"


class DistributedError(RuntimeError):
    """A launch failed. ``failures`` lists the ranks with their tracebacks, root cause first; ``output`` holds
    every line streamed; ``log_dir`` keeps each rank's stdout/stderr files for inspection."""

    def __init__(self, message: str, failures: Sequence[RankFailure] = (), output: Sequence[str] = (),
                 log_dir: str | None = None, returncode: int | None = None) -> None:
        super().__init__(message)
        self.failures = tuple(failures)
        self.output = tuple(output)
        self.log_dir = log_dir
        self.returncode = returncode


class LaunchTimeout(DistributedError, TimeoutError):
    """A launch did not finish in time; every process it started was stopped. ``failures`` hold the stacks
    of the ranks still running (dumped just before they were killed, when they called :func:`init_worker`)."""


@dataclass(frozen=True, repr=False)
class LaunchResult(TableView):
    """What a finished launch produced: one dict per rank from :func:`report`, ordered by rank."""

    script: str
    nproc: int
    nnodes: int
    backend: str
    commands: tuple[str, ...]
    wall_s: float
    results: tuple[dict[str, Any], ...]
    output: tuple[str, ...] = field(repr=False)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    def result(self, rank: int) -> dict[str, Any]:
        """What ``rank`` reported."""
        for r in self.results:
            if r.get("rank") == rank:
                return r
        raise KeyError(f"rank {rank} reported nothing; ranks that reported: {[r.get('rank') for r in self.results]}")

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (list, dict))} for r in self.results]
                            ).set_index("rank")

    @property
    def title(self) -> str:  # type: ignore[override]
        name = self.script.rsplit("/", 1)[-1]
        return (f"torchrun {name}: {self.world_size} processes ({self.nnodes} node(s) x {self.nproc}), "
                f"{self.backend}, {fmt_seconds(self.wall_s)} wall")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        keys: list[str] = []
        for r in self.results:
            keys += [k for k, v in r.items() if k not in keys and isinstance(v, (int, float, str))
                     and not isinstance(v, bool)]
        numbers = [k for k in keys if any(isinstance(r.get(k), float) for r in self.results)]
        shown = [k for k in ("node", "device") if k in keys] + ([k for k in numbers if k.endswith("_per_s")]
                                                                 or numbers)[:4]
        rows = [[str(r.get("rank"))] + [_cell(r.get(k)) for k in shown] for r in self.results]
        return (["rank", *shown], rows, f"{len(self.results)} of {self.world_size} ranks reported "
                                        f"(every value: .results or .to_dataframe())")


def _cell(v: Any) -> str:
    if v is None:
        return NA
    if isinstance(v, (bool, str)):
        return str(v)
    return fmt_number(v)
