"""Published energy figures: reachable by key, each with a https source, a date, the hardware and its own words."""
from __future__ import annotations

import re

import pytest

import gpulab as gl
from gpulab import figures
from gpulab.figures import energy

KEYS = ["nvml-power-sampling", "nvml-energy-counter", "nvml-energy-window", "zeus-energy-efficiency",
        "power-cap-energy"]


def test_the_energy_figures_are_gathered_once_each():
    assert [p.key for p in energy.FIGURES] == KEYS
    assert all(p in figures.ALL for p in energy.FIGURES)


@pytest.mark.parametrize("key", KEYS)
def test_each_energy_figure_has_a_source_a_date_hardware_and_a_sentence(key):
    p = gl.published(key)
    assert p.url.startswith("https://") and p.source and p.hardware
    assert re.fullmatch(r"20\d\d(-(0[1-9]|1[0-2]))?", p.date)
    assert 0 < p.low <= p.high and p.unit.strip()
    assert p.claim.endswith(".") and len(p.claim) > 40
    assert "of peak" not in p.figure            # none of these is a share of a datasheet peak
    assert p.figure in str(p) and p.hardware in str(p)


def test_the_sampling_and_nvml_figures_say_what_the_sources_say():
    sampling = gl.published("nvml-power-sampling")
    assert (sampling.low, sampling.high) == (25, 25) and "A100" in sampling.hardware and "H100" in sampling.hardware
    assert "35%" in sampling.note and "2312.02741" in sampling.url
    counter = gl.published("nvml-energy-counter")
    assert counter.figure == "1 s power-averaging window" and "docs.nvidia.com/deploy/nvml-api" in counter.url
    assert "Volta" in counter.note and "millijoules" in counter.note and "GA100" in counter.claim
    zeus = gl.published("zeus-energy-efficiency")
    assert (zeus.low, zeus.high) == (15.3, 75.8) and zeus.figure == "15.3-75.8% energy-efficiency gain"
