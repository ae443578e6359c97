from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gpulab as gl
from gpulab.reference import GPU_SPECS, PUBLISHED


def test_every_published_figure_has_provenance():
    for p in PUBLISHED.values():
        assert p.url.startswith("https://") and p.source and p.hardware and p.date[:2] in ("19", "20")
        assert p.low <= p.high and p.figure
    df = gl.references()
    assert set(df["key"]) == set(PUBLISHED)
    assert gl.published("amp-pytorch").figure == "2-3x"
    assert gl.published("mamf-a100").figure == "86% of peak"
    with pytest.raises(KeyError, match="known"):
        gl.published("nope")


@pytest.mark.parametrize("name,expected", [("Tesla T4", "T4"), ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
                                           ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA L4", "L4"),
                                           ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("t4", "T4")])
def test_gpu_spec_matches_cuda_device_names(name, expected):
    assert gl.gpu_spec(name).name == expected


def test_gpu_spec_unknown_and_table():
    with pytest.raises(KeyError, match="known GPUs"):
        gl.gpu_spec("Voodoo 2")
    with pytest.raises(ValueError):
        gl.gpu_spec("")
    df = gl.gpu_specs()
    assert len(df) == len(GPU_SPECS) and (df["bandwidth GB/s"] > 0).all()
    assert GPU_SPECS["A100 40GB SXM"].ridge_point() == pytest.approx(312e12 / 1555e9)


def test_roofline_and_amdahl():
    assert gl.attainable_flops(1000.0, 1e12, 1e11) == 1e12
    assert gl.attainable_flops(1.0, 1e12, 1e11) == 1e11
    arr = gl.attainable_flops(np.array([0.1, 100.0]), 1e12, 1e11)
    assert arr.tolist() == [1e10, 1e12]
    assert gl.amdahl_speedup(1.0, 4) == pytest.approx(4)
    assert gl.amdahl_speedup(0.0, 4) == pytest.approx(1)
    times = [10 * ((1 - 0.9) + 0.9 / n) for n in (1, 2, 4, 8)]
    fit = gl.fit_amdahl([1, 2, 4, 8], times)
    assert fit.parallel_fraction == pytest.approx(0.9, abs=1e-6) and fit.max_speedup == pytest.approx(10)
    assert "p = 90.0%" in repr(fit) and fit.note is None and "[!]" not in repr(fit)
    busy = gl.fit_amdahl([1, 2], [1.0, 3.4])           # 2 threads 3.4x slower: the cores were taken
    assert busy.parallel_fraction == 0.0 and "2 workers 0.29x" in busy.note and "re-run" in busy.note
    assert "[!] more workers ran slower" in repr(busy) and "idle machine" in busy._repr_html_()
    assert gl.fit_amdahl([1, 2], [1.0, 1.05]).note is None   # within noise of no speedup: no alarm
    with pytest.raises(ValueError):
        gl.fit_amdahl([1], [1.0])
    with pytest.raises(ValueError):
        gl.amdahl_speedup(1.5, 2)


def test_count_flops():
    assert gl.count_flops(torch.mm, torch.ones(8, 4), torch.ones(4, 2)) == 2 * 8 * 4 * 2
    lin = torch.nn.Linear(16, 8)
    assert gl.count_flops(lin, torch.ones(4, 16)) == 2 * 4 * 16 * 8
    with pytest.raises(TypeError):
        gl.count_flops(3)


def test_machine_limits_small():
    lim = gl.machine_limits("cpu", dtypes=["float32", "bfloat16"], sizes=[128, 256], copy_bytes=1 << 22,
                            min_run_time=0.05)
    assert lim.peak_flops("float32") > 1e8 and lim.bandwidth_bytes_per_s > 1e8
    assert lim.dtypes == ["float32", "bfloat16"]
    assert lim.ridge_point() == pytest.approx(lim.peak_flops() / lim.bandwidth_bytes_per_s)
    # the ceiling is the fastest run, so no median exceeds it
    assert all(m.flops_per_s <= lim.peak_flops(m.label.split()[-1]) * (1 + 1e-9) for m in lim.matmul)
    with pytest.raises(KeyError, match="float16"):
        lim.peak_flops("float16")
    assert "matmul float32" in repr(lim)
    print(lim)


def test_measure_inputs_validated():
    with pytest.raises(ValueError):
        gl.measure_matmul(0)
    with pytest.raises(ValueError):
        gl.measure_matmul(8, "int4", device="cpu")
    with pytest.raises(ValueError):
        gl.measure_bandwidth(10)


def test_plots_return_axes():
    ax = gl.plot_roofline(1e11, 2e10, points=[("mm", 50.0, 5e10)])
    assert ax.get_xscale() == "log" and len(ax.get_lines()) >= 4
    ax2 = gl.plot_amdahl(gl.fit_amdahl([1, 2], [1.0, 0.6]))
    assert ax2.get_ylabel().startswith("speedup")
    assert not math.isnan(ax2.get_lines()[0].get_ydata()[0])
