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
