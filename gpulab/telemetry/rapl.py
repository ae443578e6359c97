"""The CPU's energy counters: RAPL (Running Average Power Limit) zones as Linux's powercap framework exposes them
in ``/sys/class/powercap`` (``intel-rapl:N`` per package, its ``intel-rapl:N:M`` subzones such as ``dram``; AMD
Zen processors use the same interface). Each zone's ``energy_uj`` is a cumulative counter in microjoules that
wraps at ``max_energy_range_uj``: about 262 kJ on Intel servers (22 minutes at 200 W), about 65.7 kJ on AMD
packages (2**32 units of 15.3 uJ: 5.5 minutes at 200 W). A wrap between two reads is added back; more than one
cannot be seen, so two reads further apart than the counter's wrap at the package's power limit give no figure.
Since 2020 most kernels let only root read the counter (CVE-2020-8694), and VMs and containers rarely expose it:
where no counter can be read, :func:`rapl_zones` says why and no figure is made up.

Example:
    >>> status = rapl_zones("/no/such/folder")
    >>> status.readable, status.reason
    (False, '/no/such/folder does not exist, so there is no RAPL counter: CPU energy is not measurable here')
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._format import fmt_seconds

__all__ = ["RaplZone", "RaplStatus", "rapl_zones", "RaplMeter", "POWERCAP", "ASSUMED_MAX_W"]

POWERCAP = "/sys/class/powercap"
_NOT_HERE = "CPU energy is not measurable here"
# The power a zone is assumed to draw at most where powercap gives no power limit (AMD packages give none): the highest
# server CPU TDPs (AMD EPYC 9965, Intel Xeon 6980P) are 500 W
ASSUMED_MAX_W = 500.0


@dataclass(frozen=True)
class RaplZone:
    """One readable energy counter: its label (``"package-0"``, ``"package-0/dram"``), folder and wrap value, and the
    highest power limit powercap gives for it (``max_power_w``; None where it gives none).

    Example:
        >>> z = RaplZone("package-0", Path("/x"), 65_712_999_613, None)     # an AMD package: no power limit
        >>> round(z.wrap_s), z.power_w
        (131, 500.0)
    """

    name: str
    path: Path
    max_range_uj: int
    max_power_w: float | None = None

    @property
    def is_package(self) -> bool:
        """A whole package (its subzones, e.g. the cores, are part of it; DRAM is not)."""
        return "/" not in self.name and self.name.startswith("package")

    @property
    def power_w(self) -> float:
        """The most this zone is taken to draw: its power limit, or :data:`ASSUMED_MAX_W` where it has none."""
        return self.max_power_w or ASSUMED_MAX_W

    @property
    def wrap_s(self) -> float:
        """Seconds the counter takes to wrap at :attr:`power_w`: two reads further apart may miss a wrap."""
        return self.max_range_uj / 1e6 / self.power_w

    def read_uj(self) -> int:
        """The counter now, in microjoules."""
        return int((self.path / "energy_uj").read_text().strip())


@dataclass(frozen=True)
class RaplStatus:
    """The zones whose counters can be read, or ``reason`` why none can (then CPU energy is not measurable)."""

    zones: tuple[RaplZone, ...] = ()
    reason: str | None = None
    unreadable: tuple[str, ...] = field(default=())   # zones found but not readable (permissions)
    no_range: tuple[str, ...] = field(default=())     # zones whose max_energy_range_uj is 0: a wrap cannot be added back
    broken: tuple[str, ...] = field(default=())       # zones whose file holds no counter, or fails to read: why, each

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


def _counter_file(path: Path) -> tuple[str | None, str | None]:
    """A counter file's text, or None and why: ``"permission"`` (readable by root only) or what is wrong with it (it
    holds no whole number, or reading it failed otherwise), naming the file."""
    try:
        raw = path.read_text().strip()
    except PermissionError:
        return None, "permission"
    except OSError as e:
        return None, f"{path} could not be read ({e.strerror or e})"
    if not raw.isdigit():
        return None, f"{path} holds {raw[:40]!r}, which is not a counter (a whole number of microjoules)"
    return raw, None


def _max_power_w(zone: Path) -> float | None:
    """The highest power limit (or maximum) powercap gives for a zone, in watts; None where it gives none."""
    values = [int(t) for f in sorted(zone.glob("constraint_*_uw")) if f.name.endswith(("_power_limit_uw",
              "_max_power_uw")) for t in [_text(f)] if t is not None and t.isdigit() and int(t) > 0]
    return max(values) / 1e6 if values else None


def rapl_zones(root: str | os.PathLike | None = None) -> RaplStatus:
    """The RAPL zones under ``root`` (default ``/sys/class/powercap``) whose ``energy_uj`` this process can read. Zones of ``intel-rapl-mmio``
    (a second view of the same package counter) are left out, so no energy is counted twice; so are zones whose
    ``max_energy_range_uj`` is 0 (``no_range``), whose wrap-around could not be added back."""
    root = POWERCAP if root is None else root
    if not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder path such as {POWERCAP!r}, got {type(root).__name__} {root!r}")
    base = Path(root)
    not_here = _NOT_HERE
    if not base.is_dir():
        return RaplStatus(reason=f"{base} does not exist, so there is no RAPL counter: {not_here}")
    tops = sorted(p for p in base.iterdir() if p.name.startswith("intel-rapl:") and p.name.count(":") == 1)
    found, unreadable, no_range, broken = [], [], [], []
    for top in tops:
        label = _text(top / "name") or top.name
        for zone, name in [(top, label)] + [(sub, f"{label}/{_text(sub / 'name') or sub.name}")
                                            for sub in sorted(top.glob(f"{top.name}:*"))]:
            if not (zone / "energy_uj").exists():
                continue
            (raw, why), (wrap, why_wrap) = _counter_file(zone / "energy_uj"), _counter_file(zone / "max_energy_range_uj")
            if raw is None or wrap is None:
                problem = why or why_wrap
                if problem == "permission":
                    unreadable.append(name)
                else:
                    broken.append(f"{name}: {problem}")
                continue
            if int(wrap) == 0:
                no_range.append(name)
                continue
            found.append(RaplZone(name, zone, int(wrap), _max_power_w(zone)))
    if found:
        return RaplStatus(tuple(found), None, tuple(unreadable), tuple(no_range), tuple(broken))
    also = f"; {'; '.join(broken)}" if broken else ""
    if no_range:
        return RaplStatus(reason=f"the RAPL counters ({', '.join(no_range)}) give max_energy_range_uj 0, so the value "
                                 f"they wrap at is unknown and a wrap could not be added back{also}: {not_here}",
                          unreadable=tuple(unreadable), no_range=tuple(no_range), broken=tuple(broken))
    if unreadable:
        return RaplStatus(reason=f"the RAPL counters ({', '.join(unreadable)}) are readable by root only here{also}: "
                                 f"{not_here} (sudo chmod o+r {base}/intel-rapl:*/energy_uj allows it until the "
                                 "next boot)", unreadable=tuple(unreadable), broken=tuple(broken))
    if broken:
        return RaplStatus(reason=f"no RAPL counter gives a reading: {'; '.join(broken)}: {not_here}",
                          broken=tuple(broken))
    return RaplStatus(reason=f"no RAPL zones in {base} (a VM, a container or a CPU without RAPL): {not_here}")


class RaplMeter:
    """Joules per zone since :meth:`start`, each counter's wrap-around added back. Read at least once per wrap at the
    zone's power limit (:attr:`RaplZone.wrap_s`: about 2 minutes for an AMD package at the assumed 500 W): reads
    further apart may have missed a wrap, and that zone then gives no figure (``problem`` says why).

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
        self._lost: dict[str, str] = {}            # zones whose reads came too far apart: why
        self._moved: dict[str, bool] = {}
        self._t_last = 0.0
        self.problem: str | None = None            # why the last package_joules() gave no figure

    @property
    def reason(self) -> str | None:
        """Why there is no figure (no counter readable), or None."""
        return self.status.reason

    @property
    def advanced(self) -> bool:
        """Whether a package counter has moved since :meth:`start` (one that never does gives no figure)."""
        return any(self._moved.get(z.name, False) for z in self.status.zones if z.is_package)

    def start(self) -> "RaplMeter":
        """Start counting from now."""
        self._last = {z.name: z.read_uj() for z in self.status.zones}
        self._t_last = time.monotonic()
        self._total_uj = dict.fromkeys(self._last, 0)
        self._lost, self._moved, self.problem = {}, dict.fromkeys(self._last, False), None
        return self

    def read(self) -> dict[str, float | None]:
        """Joules per zone since :meth:`start` (``{}`` where nothing is readable; None for a zone whose reads came
        further apart than its counter takes to wrap)."""
        if not self._last and self.status.zones:
            raise RuntimeError("call start() before read()")
        now_s = time.monotonic()
        gap = now_s - self._t_last
        for z in self.status.zones:
            now, before = z.read_uj(), self._last[z.name]
            if gap > z.wrap_s and z.name not in self._lost:
                limit = "its power limit" if z.max_power_w else "assumed: powercap gives no power limit"
                self._lost[z.name] = (f"{z.name}'s RAPL counter wraps every {z.max_range_uj / 1e9:.3g} kJ, which takes "
                                      f"{fmt_seconds(z.wrap_s)} at {z.power_w:g} W ({limit}), and {fmt_seconds(gap)} "
                                      "passed between two reads of it: a wrap may have been missed, so energy over "
                                      "that window cannot be trusted; read it more often (gl.Monitor samples it)")
            self._total_uj[z.name] += now - before if now >= before else now + z.max_range_uj - before
            self._moved[z.name] = self._moved[z.name] or now != before
            self._last[z.name] = now
        self._t_last = now_s
        return {k: None if k in self._lost else v / 1e6 for k, v in self._total_uj.items()}

    def package_joules(self) -> float | None:
        """The packages' joules since :meth:`start` (cores, caches and uncore; DRAM apart), or None (``problem`` says
        why): no counter readable, no package among the zones, or a package's reads further apart than its wrap."""
        if not self.status.zones:
            self.problem = self.status.cause
            return None
        per_zone = self.read()
        packages = [z.name for z in self.status.zones if z.is_package]
        lost = [self._lost[n] for n in packages if n in self._lost]
        self.problem = (lost[0] if lost else None if packages else
                        f"no RAPL package zone is readable (only {', '.join(per_zone)}): the packages' energy is unknown")
        return None if self.problem else sum(per_zone[n] or 0.0 for n in packages)

    def __repr__(self) -> str:
        if not self.status.zones:
            return f"RaplMeter: {self.status.reason}"
        return f"RaplMeter over {', '.join(z.name for z in self.status.zones)}"

    def _repr_html_(self) -> Any:
        import html

        return f"<div>{html.escape(repr(self))}</div>"
