"""gpulab.telemetry.rapl against a sysfs-shaped folder: the powercap layout (packages, subzones, the mmio view left
out), wrap-around of the counter, files only root may read, and the machine without any counter (this CI's)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpulab.telemetry.rapl import RaplMeter, RaplStatus, rapl_zones

WRAP = 262_143_328_850     # a package's max_energy_range_uj as Intel servers report it


def _zone(folder: Path, name: str, energy: int, wrap: int = WRAP) -> Path:
    folder.mkdir(parents=True)
    (folder / "name").write_text(name + "\n")
    (folder / "energy_uj").write_text(f"{energy}\n")
    (folder / "max_energy_range_uj").write_text(f"{wrap}\n")
    return folder


@pytest.fixture
def powercap(tmp_path):
    root = tmp_path / "powercap"
    p0 = _zone(root / "intel-rapl:0", "package-0", 1_000_000)
    _zone(p0 / "intel-rapl:0:0", "dram", 500_000, wrap=65_712_999_613)
    _zone(root / "intel-rapl:1", "package-1", WRAP - 1_000_000)           # two seconds from its wrap at 500 W
    _zone(root / "intel-rapl-mmio:0", "package-0", 1_000_000)           # the same counter again: not counted
    return root


def test_zones_are_the_packages_and_their_subzones_once(powercap):
    status = rapl_zones(powercap)
    assert status.readable and status.reason is None
    assert [z.name for z in status.zones] == ["package-0", "package-0/dram", "package-1"]
    assert [z.is_package for z in status.zones] == [True, False, True]


def test_joules_add_back_the_wrap_around(powercap):
    meter = RaplMeter(rapl_zones(powercap)).start()
    (powercap / "intel-rapl:0" / "energy_uj").write_text("31000000\n")               # +30 J
    (powercap / "intel-rapl:0" / "intel-rapl:0:0" / "energy_uj").write_text("2500000\n")   # +2 J
    (powercap / "intel-rapl:1" / "energy_uj").write_text("4000000\n")                # wrapped: 1 J + 4 J
    per_zone = meter.read()
    assert per_zone == pytest.approx({"package-0": 30.0, "package-0/dram": 2.0, "package-1": 5.0})
    (powercap / "intel-rapl:1" / "energy_uj").write_text("9000000\n")                # +5 J more, no wrap
    assert meter.package_joules() == pytest.approx(30.0 + 10.0)                      # DRAM apart


def test_counters_only_root_may_read_are_named_and_no_figure_is_made(powercap, monkeypatch):
    real = Path.read_text

    def read_text(self, *a, **k):
        if self.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *a, **k)

    monkeypatch.setattr(Path, "read_text", read_text)
    status = rapl_zones(powercap)
    assert not status.readable and "root only" in status.reason and "not measurable" in status.reason
    assert status.unreadable == ("package-0", "package-0/dram", "package-1")
    meter = RaplMeter(status)
    assert meter.start().read() == {} and meter.package_joules() is None and "root only" in repr(meter)


def test_an_empty_powercap_and_a_missing_one_say_not_measurable(tmp_path):
    (tmp_path / "powercap").mkdir()
    assert "no RAPL zones" in rapl_zones(tmp_path / "powercap").reason
    assert "does not exist" in rapl_zones(tmp_path / "nothing").reason


def test_this_machine_gives_a_figure_or_says_why_not():
    status = rapl_zones()
    assert status.readable or ("not measurable here" in status.reason and status.zones == ())


def test_bad_input():
    with pytest.raises(TypeError, match="root must be a folder"):
        rapl_zones(3)
    with pytest.raises(TypeError, match="RaplStatus"):
        RaplMeter("package-0")
    with pytest.raises(RuntimeError, match="start"):
        RaplMeter(_fake_status()).read()


def _fake_status():
    from gpulab.telemetry.rapl import RaplZone

    return RaplStatus((RaplZone("package-0", Path("/nonexistent"), WRAP),))


AMD_WRAP = 65_712_999_613    # an AMD package's max_energy_range_uj: 2**32 units of 15.3 uJ, about 65.7 kJ


class _Clock:
    """rapl's monotonic clock, moved by hand."""

    def __init__(self):
        self.now = 1000.0

    def monotonic(self):
        return self.now


def test_the_wrap_range_is_an_amd_packages_and_intels(powercap):
    from gpulab.telemetry import rapl

    amd = rapl.RaplZone("package-0", powercap, AMD_WRAP)
    assert amd.wrap_s == pytest.approx(65_713 / 500.0, rel=1e-3)           # at the assumed 500 W: about 2 minutes
    assert amd.max_range_uj / 1e6 / 200.0 / 60 == pytest.approx(5.5, abs=0.1)   # at 200 W: about 5.5 minutes
    assert "65.7 kJ" in rapl.__doc__ and "5.5 minutes" in rapl.__doc__ and "six hours" not in RaplMeter.__doc__


def test_reads_further_apart_than_a_wrap_at_the_power_limit_give_no_figure(tmp_path, monkeypatch):
    """An AMD package (no power limit in powercap: 500 W assumed) wraps in about 131 s: two reads 200 s apart may have
    missed a whole wrap, so the energy is refused with the reason; a package whose limit is 200 W wraps in 328 s, and
    the same reads are trusted."""
    from gpulab.telemetry import rapl

    clock = _Clock()
    monkeypatch.setattr(rapl, "time", clock)
    root = tmp_path / "powercap"
    amd = _zone(root / "intel-rapl:0", "package-0", 1_000_000, wrap=AMD_WRAP)
    limited = _zone(root / "intel-rapl:1", "package-1", 1_000_000, wrap=AMD_WRAP)
    (limited / "constraint_0_power_limit_uw").write_text("180000000\n")
    (limited / "constraint_1_power_limit_uw").write_text("200000000\n")      # the short-term limit: the highest
    status = rapl_zones(root)
    assert [z.max_power_w for z in status.zones] == [None, 200.0]
    meter = RaplMeter(status).start()
    clock.now += 100.0
    for z in (amd, limited):
        (z / "energy_uj").write_text("11000000\n")
    assert meter.package_joules() == pytest.approx(20.0) and meter.problem is None     # 100 s apart: both trusted
    clock.now += 200.0
    per_zone = meter.read()
    assert per_zone["package-0"] is None and per_zone["package-1"] == pytest.approx(10.0)
    assert meter.package_joules() is None
    assert "65.7 kJ" in meter.problem and "500 W (assumed" in meter.problem and "gl.Monitor" in meter.problem


def test_a_window_longer_than_the_wrap_is_not_measurable_in_an_energy_meter(package_at, monkeypatch):
    from gpulab.telemetry import rapl
    from gpulab.telemetry.energy import EnergyMeter

    clock = _Clock()
    monkeypatch.setattr(rapl, "time", clock)
    package_at(watts=10.0, wrap=AMD_WRAP)
    meter = EnergyMeter("cpu").start()
    clock.now += 400.0                                  # past the package's 131 s wrap at the assumed 500 W
    e = meter.stop()
    assert e.joules is None and "a wrap may have been missed" in e.reason and "not measurable here" in str(e)


def test_a_zero_wrap_range_is_refused(tmp_path):
    root = tmp_path / "powercap"
    _zone(root / "intel-rapl:0", "package-0", 1_000_000, wrap=0)
    status = rapl_zones(root)
    assert not status.readable and status.no_range == ("package-0",)
    assert "max_energy_range_uj 0" in status.reason and "not measurable here" in status.reason
    p0 = _zone(tmp_path / "two" / "intel-rapl:0", "package-0", 1_000_000)
    _zone(p0 / "intel-rapl:0:0", "dram", 5, wrap=0)
    both = rapl_zones(tmp_path / "two")
    assert [z.name for z in both.zones] == ["package-0"] and both.no_range == ("package-0/dram",)


def test_a_counter_that_never_advances_gives_no_figure_never_zero(powercap, monkeypatch):
    from gpulab.telemetry.energy import EnergyMeter
    from gpulab.telemetry.rapl import RaplZone

    monkeypatch.setattr(RaplZone, "read_uj", lambda self: 123_456)       # a file that exists but never counts
    e = EnergyMeter("cpu", rapl_root=powercap).start().stop()
    assert e.joules is None and "did not advance" in e.reason
    only_dram = RaplMeter(RaplStatus((RaplZone("package-0/dram", powercap, WRAP),))).start()
    assert only_dram.package_joules() is None and "no RAPL package zone" in only_dram.problem


def test_a_counter_file_that_holds_no_number_is_named_and_not_blamed_on_permissions(powercap):
    """A file that reads but holds text (a driver's error string, an empty file) is no counter: the reason names the
    file and says so; root-only and the chmod advice are for a real permission error alone."""
    from gpulab.diagnosis import energy_diagnoses

    for zone in (powercap / "intel-rapl:0", powercap / "intel-rapl:0" / "intel-rapl:0:0", powercap / "intel-rapl:1"):
        (zone / "energy_uj").write_text("N/A\n")
    status = rapl_zones(powercap)
    assert not status.readable and status.unreadable == ()
    assert f"{powercap / 'intel-rapl:0' / 'energy_uj'} holds 'N/A', which is not a counter" in status.reason
    assert "package-1" in status.reason and "not measurable here" in status.reason
    assert "root only" not in status.reason and "chmod" not in status.reason
    assert energy_diagnoses("cpu", status, None)[0].fix == ""                 # no chmod for a file that reads


def test_only_a_permission_error_gets_the_chmod_advice(powercap, monkeypatch):
    real = Path.read_text

    def read_text(self, *a, **k):
        if self.name == "energy_uj" and self.parent.name == "intel-rapl:0":
            raise PermissionError(13, "Permission denied", str(self))
        if self.name == "energy_uj" and self.parent.name == "intel-rapl:1":
            raise OSError(61, "No data available", str(self))
        return real(self, *a, **k)

    (powercap / "intel-rapl:0" / "intel-rapl:0:0" / "energy_uj").write_text("\n")
    monkeypatch.setattr(Path, "read_text", read_text)
    status = rapl_zones(powercap)
    assert status.unreadable == ("package-0",) and "readable by root only" in status.reason and "chmod" in status.reason
    assert "package-1: " in status.reason and "could not be read (No data available)" in status.reason
    assert "holds '', which is not a counter" in status.reason
    assert len(status.broken) == 2
