"""gpulab.course.training.bandwidth: lesson 02's transfer sweep, with a fake measuring function of known times and with a
real (tiny) copy timed by gpulab.timing.benchmark."""
from __future__ import annotations

import types

import pytest

from gpulab.course.training.bandwidth import TransferSweep, default_ceilings, transfer_sweep
from gpulab.timing import Measurement, benchmark, environment

KiB, MiB = 2**10, 2**20


def fake_measure(calls):
    """A measure_transfer stand-in: 10 us fixed cost per copy, then 10 GB/s (pinned: 20 GB/s)."""
    def measure(nbytes, pinned=False, device="cpu", min_run_time=0.15):
        calls.append((nbytes, pinned, str(device), min_run_time))
        best = 10e-6 + nbytes / (20e9 if pinned else 10e9)
        times = (best, best * 1.01, best * 1.02, best * 1.03)
        return Measurement(f"copy {nbytes}", times, 1, str(device), 1, environment("cpu"), "fake", 0,
                           bytes_moved=nbytes)
    return measure


def test_sweep_times_every_size_and_kind_against_given_ceilings():
    calls = []
    sweep = transfer_sweep(fake_measure(calls), [4 * KiB, MiB, 64 * MiB], device="cpu", pinned=(False, True),
                           ceilings={"link": 16e9}, min_run_time=0.05)
    assert isinstance(sweep, TransferSweep)
    assert calls == [(n, p, "cpu", 0.05) for p in (False, True) for n in (4 * KiB, MiB, 64 * MiB)]
    assert sweep.sizes_bytes == (4 * KiB, MiB, 64 * MiB)
    big = sweep.best_bytes_per_s(64 * MiB)
    assert big == pytest.approx(64 * MiB / (10e-6 + 64 * MiB / 10e9))
    assert sweep.best_bytes_per_s(4 * KiB) < sweep.best_bytes_per_s(MiB) < big      # fixed cost dominates small copies
    assert sweep.pinned_speedup(64 * MiB) == pytest.approx((10e-6 + 64 * MiB / 10e9) / (10e-6 + 64 * MiB / 20e9))
    assert sweep.measurement(MiB, pinned=True).label == f"copy {MiB}"
    df = sweep.to_dataframe()
    assert list(df["bytes"]) == [4 * KiB, MiB, 64 * MiB] * 2 and list(df["pinned"]) == [False] * 3 + [True] * 3
    assert df["share_of_link"].iloc[2] == pytest.approx(big / 16e9)
    with pytest.raises(KeyError, match="pinned=True"):
        sweep.point(123, pinned=True)


def test_table_text_has_one_unit_per_column_and_the_ceiling_share():
    sweep = transfer_sweep(fake_measure([]), [4 * KiB, 64 * MiB], device="cpu", ceilings={"link": 16e9})
    lines = repr(sweep).splitlines()
    assert lines[0] == "Copy bandwidth vs size (host copy, no GPU)"
    header = [h.strip() for h in lines[1].split("  ") if h.strip()]
    assert header == ["size", "host memory", "median (us)", "best (us)", "best (GB/s)", "% of link"]
    assert lines[3].split()[:5] == ["4", "KiB", "pageable", "10.6", "10.4"]   # 10 us + 4 KiB at 10 GB/s; median 1.015x
    assert lines[4].split()[-1] == f"{100 * (64 * MiB / (10e-6 + 64 * MiB / 10e9)) / 16e9:.0f}%"
    assert "ceilings: link 16 GB/s" in lines[-1]
    assert "<table" in sweep._repr_html_()


def test_default_ceilings_published_links_on_cuda_measured_copy_elsewhere():
    cuda = default_ceilings(None, "cuda:0")
    assert cuda == pytest.approx({"PCIe Gen3 x16": 15.75e9, "PCIe Gen4 x16": 31.5e9, "PCIe Gen5 x16": 63e9})
    calls = []
    cpu = default_ceilings(fake_measure(calls), "cpu", ceiling_bytes=256 * MiB)
    assert calls == [(256 * MiB, False, "cpu", 0.3)]
    assert cpu == {"host copy ceiling": pytest.approx(256 * MiB / (10e-6 + 256 * MiB / 10e9))}
    calls.clear()
    sweep = transfer_sweep(fake_measure(calls), [KiB], device="cpu")        # no ceilings given: measured here
    assert [name for name, _ in sweep.ceilings] == ["host copy ceiling"] and len(calls) == 2
    assert [p.pinned for p in sweep.points] == [False]                      # no pinned memory without CUDA


def test_real_copies_timed_with_benchmark_and_plot():
    import matplotlib
    import torch

    matplotlib.use("Agg")

    def measure(nbytes, pinned=False, device="cpu", min_run_time=0.02):
        src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
        return benchmark(dst.copy_, src, bytes_moved=nbytes, min_run_time=min_run_time, warmup=1, warn_noisy=False)

    sweep = transfer_sweep(measure, [KiB, 64 * KiB], device="cpu", ceilings={"host": 1e10}, min_run_time=0.02)
    assert all(p.best_bytes_per_s > 0 and p.min_s <= p.median_s for p in sweep.points)
    ax = sweep.plot()
    assert ax.get_title() == sweep.title and ax.get_xscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1 KiB", "64 KiB"]
    assert ax.get_legend().get_texts()[0].get_text() == "pageable"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(measure="measure_transfer", sizes_bytes=[KiB]), TypeError, "measure_transfer"),
    (dict(sizes_bytes=[]), ValueError, "non-empty"),
    (dict(sizes_bytes=[KiB, KiB]), ValueError, "repeated"),
    (dict(sizes_bytes=[0]), ValueError, "got 0"),
    (dict(sizes_bytes=[1.5]), TypeError, "1.5"),
    (dict(sizes_bytes=[KiB], pinned=(1,)), ValueError, "pinned"),
    (dict(sizes_bytes=[KiB], ceilings={"link": -1.0}), ValueError, "link"),
    (dict(sizes_bytes=[KiB], min_run_time=0), ValueError, "min_run_time"),
])
def test_bad_input_is_refused_before_measuring(kwargs, error, match):
    calls = []
    kwargs = {"measure": fake_measure(calls), "device": "cpu", "ceilings": {"link": 1e10}, **kwargs}
    with pytest.raises(error, match=match):
        transfer_sweep(**kwargs)
    assert calls == []


def test_default_ceilings_are_never_exceeded_by_the_sweep(monkeypatch, pretend_gpus):
    from gpulab.course.training import bandwidth

    # CPU: a cached small copy beats the copy from memory -> the fastest copy becomes the ceiling
    monkeypatch.setattr(bandwidth, "default_ceilings", lambda measure, device: {"host copy ceiling": 1e9})
    sweep = transfer_sweep(fake_measure([]), [KiB, 64 * MiB], device="cpu")
    assert [name for name, _ in sweep.ceilings] == ["fastest copy measured"]
    assert max(sweep.to_dataframe()["share_of_fastest copy measured"]) == pytest.approx(1.0)
    # CUDA: links slower than a measured copy are not this card's link
    links = {"PCIe Gen3 x16": 15.75e9, "PCIe Gen4 x16": 31.5e9, "PCIe Gen5 x16": 63e9}
    monkeypatch.setattr(bandwidth, "default_ceilings", lambda measure, device: dict(links))
    fast = lambda n, pinned=False, device=None, min_run_time=0.0: types.SimpleNamespace(
        median_s=n / 20e9, min_s=n / 20e9, bytes_moved=n, noisy=False)
    sweep = transfer_sweep(fast, [MiB], device="cuda", pinned=(False,))
    assert [name for name, _ in sweep.ceilings] == ["PCIe Gen4 x16", "PCIe Gen5 x16"]
    # given ceilings are kept as they are
    sweep = transfer_sweep(fast, [MiB], device="cuda", pinned=(False,), ceilings={"link": 10e9})
    assert [name for name, _ in sweep.ceilings] == ["link"]


def test_the_link_is_read_from_nvml_where_it_can_be(fake_nvml, pretend_gpus):
    """A GPU's PCIe link comes from NVML (its max generation and width), not from which published link the copies
    happened not to exceed; where NVML cannot read it the published links stay, and the sweep says which it did."""
    from gpulab.course.training import bandwidth
    from gpulab.telemetry import nvml

    fake_nvml(machine="t4_colab")
    link = nvml.pcie_link(0)
    assert (link.generation, link.width) == (3, 16) and str(link).startswith("PCIe Gen3 x16")
    assert default_ceilings(None, "cuda:0") == pytest.approx({"PCIe Gen3 x16 (NVML)": 15.75e9})
    fast = lambda n, pinned=False, device=None, min_run_time=0.0: types.SimpleNamespace(    # noqa: E731
        median_s=n / 12e9, min_s=n / 12e9, bytes_moved=n, noisy=False)
    sweep = transfer_sweep(fast, [MiB], device="cuda:0", pinned=(False,))
    assert [name for name, _ in sweep.ceilings] == ["PCIe Gen3 x16 (NVML)"] and "read from NVML" in sweep.link
    fake_nvml(machine="h100_gpm")
    assert default_ceilings(None, "cuda:0") == pytest.approx({"PCIe Gen5 x16 (NVML)": 63e9})
    fake_nvml(gpus=(("NVIDIA L4", (8, 9), 24 * 2**30),))          # a card whose link NVML does not answer here
    assert nvml.pcie_link(0) is None and len(default_ceilings(None, "cuda:0")) == 3
    sweep = transfer_sweep(fast, [MiB], device="cuda:0", pinned=(False,))
    assert "NVML read no PCIe link" in sweep.link and "inferred" in sweep.link
    assert bandwidth.pcie_link_ceiling("cpu").startswith("not available on a cpu device")
    assert transfer_sweep(fake_measure([]), [KiB], device="cpu").link.startswith("not available")
