"""The CPU's energy counters: RAPL (Running Average Power Limit) zones as Linux's powercap framework exposes them
in ``/sys/class/powercap`` (``intel-rapl:N`` per package, its ``intel-rapl:N:M`` subzones such as ``dram``; AMD
Zen processors use the same interface). Each zone's ``energy_uj`` is a cumulative counter in microjoules that
wraps at ``max_energy_range_uj``. Since 2020 most kernels let only root read it (CVE-2020-8694), and VMs and
containers rarely expose it: where no counter can be read, :func:`rapl_zones` says why and no figure is made up.

Example:
    >>> status = rapl_zones("/no/such/folder")
    >>> status.readable, status.reason
    (False, '/no/such/folder does not exist, so there is no RAPL counter: CPU energy is not measurable here')
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RaplZone", "RaplStatus", "rapl_zones", "RaplMeter", "POWERCAP"]

POWERCAP = "/sys/class/powercap"
_NOT_HERE = "CPU energy is not measurable here"


@dataclass(frozen=True)
class RaplZone:
    """One readable energy counter: its label (``"package-0"``, ``"package-0/dram"``), folder and wrap value."""

    name: str
    path: Path
    max_range_uj: int

    @property
    def is_package(self) -> bool:
        """A whole package (its subzones, e.g. the cores, are part of it; DRAM is not)."""
        return "/" not in self.name and self.name.startswith("package")

    def read_uj(self) -> int:
        """The counter now, in microjoules."""
        return int((self.path / "energy_uj").read_text().strip())


@dataclass(frozen=True)
class RaplStatus:
    """The zones whose counters can be read, or ``reason`` why none can (then CPU energy is not measurable)."""

    zones: tuple[RaplZone, ...] = ()
    reason: str | None = None
    unreadable: tuple[str, ...] = field(default=())   # zones found but not readable (permissions)

    @property
    def readable(self) -> bool:
        return bool(self.zones)

    @property
    def cause(self) -> str | None:
        """Why no counter is readable, without the closing "not measurable here" (None when one is)."""
        return None if self.reason is None else self.reason.replace(f": {_NOT_HERE}", "")


def _text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def rapl_zones(root: str | os.PathLike | None = None) -> RaplStatus:
    """The RAPL zones under ``root`` (default ``/sys/class/powercap``) whose ``energy_uj`` this process can read. Zones of ``intel-rapl-mmio``
    (a second view of the same package counter) are left out, so no energy is counted twice."""
    root = POWERCAP if root is None else root
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder path such as {POWERCAP!r}, got {type(root).__name__} {root!r}")
    base = Path(root)
    not_here = _NOT_HERE
    if not base.is_dir():
        return RaplStatus(reason=f"{base} does not exist, so there is no RAPL counter: {not_here}")
    tops = sorted(p for p in base.iterdir() if p.name.startswith("intel-rapl:") and p.name.count(":") == 1)
    found, unreadable = [], []
    for top in tops:
        label = _text(top / "name") or top.name
        for zone, name in [(top, label)] + [(sub, f"{label}/{_text(sub / 'name') or sub.name}")
                                            for sub in sorted(top.glob(f"{top.name}:*"))]:
            raw, wrap = _text(zone / "energy_uj"), _text(zone / "max_energy_range_uj")
            if raw is None or wrap is None or not raw.isdigit() or not wrap.isdigit():
                if (zone / "energy_uj").exists():
                    unreadable.append(name)
                continue
            found.append(RaplZone(name, zone, int(wrap)))
    if found:
        return RaplStatus(tuple(found), None, tuple(unreadable))
    if unreadable:
        return RaplStatus(reason=f"the RAPL counters ({', '.join(unreadable)}) are readable by root only here: "
                                 f"{not_here} (sudo chmod o+r {base}/intel-rapl:*/energy_uj allows it until the "
                                 "next boot)", unreadable=tuple(unreadable))
    return RaplStatus(reason=f"no RAPL zones in {base} (a VM, a container or a CPU without RAPL): {not_here}")


class RaplMeter:
    """Joules per zone since :meth:`start`, each counter's wrap-around added back. Read at least once per wrap
    (at 200 W a package's counter of 2**32 uJ wraps in about six hours; its ``max_energy_range_uj`` says).

    Example:
        >>> meter = RaplMeter(rapl_zones("/no/such/folder"))
        >>> meter.start().read(), meter.reason is not None
        ({}, True)
    """

    def __init__(self, status: RaplStatus | None = None) -> None:
        if status is not None and not isinstance(status, RaplStatus):
            raise TypeError(f"status must be a RaplStatus (rapl_zones()), got {type(status).__name__}")
        self.status = rapl_zones() if status is None else status
        self._last: dict[str, int] = {}
        self._total_uj: dict[str, int] = {}

    @property
    def reason(self) -> str | None:
        """Why there is no figure (no counter readable), or None."""
        return self.status.reason

    def start(self) -> "RaplMeter":
        """Start counting from now."""
        self._last = {z.name: z.read_uj() for z in self.status.zones}
        self._total_uj = dict.fromkeys(self._last, 0)
        return self

    def read(self) -> dict[str, float]:
        """Joules per zone since :meth:`start` (``{}`` where nothing is readable)."""
        if not self._last and self.status.zones:
            raise RuntimeError("call start() before read()")
        for z in self.status.zones:
            now, before = z.read_uj(), self._last[z.name]
            self._total_uj[z.name] += now - before if now >= before else now + z.max_range_uj - before
            self._last[z.name] = now
        return {k: v / 1e6 for k, v in self._total_uj.items()}

    def package_joules(self) -> float | None:
        """The packages' joules since :meth:`start` (cores, caches and uncore; DRAM apart), or None if unmeasurable."""
        if not self.status.zones:
            return None
        per_zone = self.read()
        return sum(j for z in self.status.zones if z.is_package for j in [per_zone[z.name]])

    def __repr__(self) -> str:
        if not self.status.zones:
            return f"RaplMeter: {self.status.reason}"
        return f"RaplMeter over {', '.join(z.name for z in self.status.zones)}"

    def _repr_html_(self) -> Any:
        import html

        return f"<div>{html.escape(repr(self))}</div>"
