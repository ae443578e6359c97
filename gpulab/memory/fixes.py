"""Try the fixes: a smaller card simulated on the real one, and candidate configurations run until one fits."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from .._check import checked
from .._format import fmt_bytes, html_table, text_table

__all__ = ['Card', 'smaller_card', 'FixTrial', 'FixLadder', 'try_fixes']


# ----------------------------------------------------------------------------------------------
class Card:
    """A live handle on the card of :func:`smaller_card`: its capacity and the memory used so far."""

    def __init__(self, capacity_bytes: int, device: str, tracker: Any = None, base: int = 0) -> None:
        self.capacity_bytes, self.device, self._tracker, self._base = capacity_bytes, device, tracker, base

    @property
    def simulated(self) -> bool:
        return self._tracker is not None

    @property
    def current_bytes(self) -> int:
        if self._tracker is not None:
            return int(self._tracker.current_bytes)
        import torch

        return int(torch.cuda.memory_allocated(self.device) - self._base)

    @property
    def peak_bytes(self) -> int:
        if self._tracker is not None:
            return int(self._tracker.peak_bytes)
        import torch

        return int(torch.cuda.max_memory_allocated(self.device) - self._base)

    def __repr__(self) -> str:
        kind = "simulated" if self.simulated else "capped CUDA allocator"
        return (f"Card({fmt_bytes(self.capacity_bytes)}, {kind}): {fmt_bytes(self.current_bytes)} live, "
                f"peak {fmt_bytes(self.peak_bytes)}")


@checked("torch", budget_bytes="bytes1", device="device")
@contextlib.contextmanager
def smaller_card(budget_bytes: int, device: Any = None) -> Iterator[Card]:
    """A GPU with ``budget_bytes`` of memory, on any machine. On CUDA: the real caching allocator, capped
    with ``torch.cuda.set_per_process_memory_fraction`` (real CUDA out-of-memory errors; every allocation of
    the process counts, so build the model inside); elsewhere :func:`gpulab.memory_budget`'s simulation
    (tensors created inside count). The cap is lifted on exit. ``card.peak_bytes`` is the peak above what
    was allocated on entry, on both.

    Example:
        >>> import torch, gpulab as gl
        >>> with gl.memory.smaller_card(1 * gl.MiB) as card:
        ...     x = torch.ones(128, 1024)         # 512 KiB
        >>> card.peak_bytes >= 512 * 1024
        True
    """
    from .._check import whole
    from .peak import _is_cuda, memory_budget

    whole("budget_bytes", budget_bytes)
    if device is None:
        from ..system import device_kind

        device = "cuda" if device_kind() == "cuda" else "cpu"
    if not _is_cuda(device):
        with memory_budget(budget_bytes, label=f"simulated {fmt_bytes(budget_bytes)} card") as tracker:
            yield Card(budget_bytes, "simulated card", tracker)
        return
    import torch

    dev = torch.device(device)
    if dev.index is None:           # set_per_process_memory_fraction needs an index: "cuda" is the current GPU
        dev = torch.device("cuda", torch.cuda.current_device())
    from ..rehearsal import memory_cap_bytes

    total = torch.cuda.get_device_properties(dev).total_memory
    cap = memory_cap_bytes()            # the process's own cap (a rehearsed GPU, a shared one): restored on exit
    if budget_bytes > min(total, cap or total):
        raise ValueError(f"budget {fmt_bytes(budget_bytes)} exceeds this GPU's {fmt_bytes(min(total, cap or total))}"
                         + (" (this process's allocator cap)" if cap is not None and cap < total else ""))
    torch.cuda.synchronize(dev)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    torch.cuda.set_per_process_memory_fraction(budget_bytes / total, dev)
    try:
        yield Card(budget_bytes, str(dev), base=int(torch.cuda.memory_allocated(dev)))
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0 if cap is None else min(1.0, cap / total), dev)


@dataclass(frozen=True)
class FixTrial:
    label: str
    fits: bool
    peak_bytes: int | None
    error: str | None = None


@dataclass(frozen=True)
class FixLadder:
    """Configurations tried one after another on the same card: which fit, and their peak memory."""

    trials: tuple[FixTrial, ...]
    capacity_bytes: int
    device: str

    def trial(self, label: str) -> FixTrial:
        for t in self.trials:
            if t.label == label:
                return t
        raise KeyError(f"no trial {label!r}; labels: {[t.label for t in self.trials]}")

    @property
    def first_fit(self) -> str | None:
        return next((t.label for t in self.trials if t.fits), None)

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"configuration": t.label, "fits": t.fits, "peak_bytes": t.peak_bytes,
                              "peak_pct_of_card": None if t.peak_bytes is None else 100 * t.peak_bytes / self.capacity_bytes}
                             for t in self.trials]).set_index("configuration")

    def _rows(self) -> list[tuple[str, str, str, str]]:
        return [(t.label, "fits" if t.fits else "OOM", fmt_bytes(t.peak_bytes) if t.fits else f"> {fmt_bytes(self.capacity_bytes)}",
                 f"{t.peak_bytes / self.capacity_bytes:.0%}" if t.fits and t.peak_bytes is not None else "")
                for t in self.trials]

    def __repr__(self) -> str:
        return (f"Fixes tried on {self.device} ({fmt_bytes(self.capacity_bytes)})\n"
                + text_table(("configuration", "result", "peak", "of card"), self._rows()))

    def _repr_html_(self) -> str:
        return html_table(("configuration", "result", "peak", "of card"), self._rows(),
                          caption=f"Fixes tried on {self.device} ({fmt_bytes(self.capacity_bytes)})")


def _card_bytes(device: Any) -> int:
    """What this process may hold on a CUDA ``device``: the whole card, or less under an allocator cap (a rehearsed
    GPU, or the preflight's share of a GPU it runs several notebooks on)."""
    import torch

    from ..rehearsal import memory_cap_bytes

    total = int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    cap = memory_cap_bytes()
    return total if cap is None else min(total, int(cap))


@checked(budget="bytes1?", device="device")
def try_fixes(configs: Mapping[str, Callable[[], Any]], *, budget: int | None = None, device: Any = None) -> FixLadder:
    """Run each zero-argument callable (a few training steps of one configuration, building its model,
    optimizer and batch inside so they count) and record whether it fits and its peak memory.

    Each runs on :func:`smaller_card` of ``budget`` bytes (required on CPU; on CUDA the default is the
    whole card, or the process's allocator cap where one is set). Out-of-memory errors are caught and memory is
    recovered outside the ``except`` block; other errors propagate.

    Example:
        >>> import torch, gpulab as gl
        >>> ladder = gl.memory.try_fixes({"4 MiB": lambda: torch.ones(1024, 1024), "1 MiB": lambda: torch.ones(256, 1024)},
        ...                       budget=2 * gl.MiB)
        >>> [t.fits for t in ladder.trials]
        [False, True]
    """
    if not isinstance(configs, Mapping) or not configs:
        raise TypeError(f"configs must be a non-empty dict: label -> callable running a few steps of that "
                        f"configuration, got {configs!r:.60}")
    bad = [k for k, f in configs.items() if not callable(f)]
    if bad:
        raise TypeError(f"configs: the values for {bad} are not callables (each runs a few steps of its configuration)")
    import torch

    from .peak import _is_cuda, free_memory, is_oom

    if device is None:
        from ..system import device_kind

        device = "cuda" if device_kind() == "cuda" else "cpu"
    cuda = _is_cuda(device)
    if budget is None and not cuda:
        raise ValueError("on CPU pass budget=... (bytes, e.g. 64 * gl.MiB) to simulate a GPU's memory")
    cap = int(budget) if budget is not None else _card_bytes(device)
    trials = []
    for label, fn in configs.items():
        free_memory(device if cuda else None)
        ok, peak, err = True, None, None
        try:
            with smaller_card(cap, device) as card:
                fn()
                if cuda:
                    torch.cuda.synchronize(device)
            peak = card.peak_bytes
        except Exception as e:
            if not is_oom(e):
                raise
            ok, err = False, str(e).splitlines()[0][:200]
        if not ok:  # outside the except block: the traceback and its tensors are gone
            free_memory(device if cuda else None)
        trials.append(FixTrial(label, ok, peak, err))
    return FixLadder(tuple(trials), cap, "simulated card" if not cuda else str(device))
