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
    df = gl.reference.references()
    assert set(df["key"]) == set(PUBLISHED)
    assert gl.published("amp-pytorch").figure == "2-3x"
    assert gl.published("mamf-a100").figure == "86% of peak"
    with pytest.raises(KeyError, match="known"):
        gl.published("nope")


# The strings torch.cuda.get_device_name() / nvidia-smi print (drivers before R460: A100 names without "NVIDIA ").
DEVICE_NAMES = [("Tesla T4", "T4"), ("NVIDIA L4", "L4"),
                ("Tesla V100-SXM2-16GB", "V100 SXM2"), ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
                ("Tesla V100-PCIE-16GB", "V100 PCIe 16GB"), ("Tesla V100-PCIE-32GB", "V100 PCIe 32GB"),
                ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"), ("A100-SXM4-40GB", "A100 40GB SXM"),
                ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"), ("A100-PCIE-40GB", "A100 40GB PCIe"),
                ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"), ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe"),
                ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA H100 PCIe", "H100 PCIe"),
                ("NVIDIA H200", "H200 SXM")]           # as torch and nvidia-smi named the H200 of the GPU check


@pytest.mark.parametrize("name,expected", DEVICE_NAMES + [("t4", "T4"), (" nvidia  a100-sxm4-40gb ", "A100 40GB SXM")])
def test_gpu_spec_matches_cuda_device_names(name, expected):
    assert gl.gpu_spec(name).name == expected


def test_every_card_answers_to_its_short_name_and_device_name():
    for s in GPU_SPECS.values():
        assert gl.gpu_spec(s.name) is s and all(gl.gpu_spec(a) is s for a in s.aliases)
        assert s.url.startswith("https://www.nvidia.com/") and "datasheet" in s.source
    assert {expected for _, expected in DEVICE_NAMES} == set(GPU_SPECS)   # every card has its device name


@pytest.mark.parametrize("name", [
    "A100", "V100", "H100", "NVIDIA A10G", "NVIDIA A10", "NVIDIA H100 NVL", "Tesla V100S-PCIE-32GB",
    "NVIDIA A100-SXM4-40GB-extra", "NVIDIA GeForce RTX 4090", "T4 or so"])
def test_gpu_spec_never_guesses_a_card(name):
    """Loose matching mapped e.g. a V100S (1134 GB/s) to the V100 SXM2: an unknown name must raise."""
    with pytest.raises(KeyError, match="known GPUs") as e:
        gl.gpu_spec(name)
    assert "A100 80GB PCIe (NVIDIA A100 80GB PCIe)" in str(e.value)   # lists the cards and their device names


def test_similar_cards_are_suggested():
    with pytest.raises(KeyError, match="similar: A100 40GB SXM, A100 40GB PCIe, A100 80GB SXM, A100 80GB PCIe"):
        gl.gpu_spec("A100")


def test_variants_loose_matching_confused():
    v = gl.gpu_spec("Tesla V100-PCIE-32GB")
    assert v.memory_bytes == 32 * 2**30 and v.tdp_w == 250 and v.fp16_tensor_flops == 112e12
    a = gl.gpu_spec("NVIDIA A100 80GB PCIe")
    assert a.bandwidth_bytes_per_s == 1935e9 and a.tdp_w == 300
    assert gl.gpu_spec("NVIDIA A100-PCIE-40GB").tdp_w == 250


def test_mig_instance_is_its_slice():
    s = gl.gpu_spec("NVIDIA A100-SXM4-40GB MIG 1g.5gb")
    card = GPU_SPECS["A100 40GB SXM"]
    assert s.name == "A100 40GB SXM MIG 1g.5gb" and s.parent == card.name and s.mig_profile == "1g.5gb"
    assert s.memory_bytes == 5 * 2**30 and s.bandwidth_bytes_per_s == pytest.approx(card.bandwidth_bytes_per_s / 8)
    assert s.fp16_tensor_flops == pytest.approx(card.fp16_tensor_flops / 7)
    assert s.fp32_flops == pytest.approx(card.fp32_flops / 7) and s.tf32_tensor_flops == pytest.approx(156e12 / 7)
    assert s.compute_capability == card.compute_capability and "MIG" in s.source and s.aliases == ()
    big = gl.gpu_spec("NVIDIA A100-SXM4-80GB MIG 3g.40gb")
    assert big.memory_bytes == 40 * 2**30 and big.fp16_tensor_flops == pytest.approx(312e12 * 3 / 7)
    me = gl.gpu_spec("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me")
    assert me.parent == "H100 SXM" and me.mig_profile == "1g.10gb+me"
    assert gl.gpu_spec("A100-PCIE-40GB MIG 2g.10gb").parent == "A100 40GB PCIe"
    full = gl.gpu_spec("NVIDIA A100-SXM4-40GB MIG 7g.40gb")
    assert full.memory_bytes == card.memory_bytes and full.fp16_tensor_flops == pytest.approx(card.fp16_tensor_flops)
    assert gl.choose_precision(gpu="NVIDIA A100-SXM4-40GB MIG 1g.5gb").precision == "bf16"


@pytest.mark.parametrize("name", ["Tesla T4 MIG 1g.5gb", "NVIDIA A100-SXM4-40GB MIG 8g.40gb",
                                  "NVIDIA A100-SXM4-40GB MIG 1g.80gb", "NVIDIA A10G MIG 1g.5gb"])
def test_impossible_mig_names_raise(name):
    with pytest.raises(KeyError):
        gl.gpu_spec(name)


def test_course_callers_still_resolve():
    """Every GPU name the library and the notebooks pass to gpu_spec / choose_precision is known."""
    import inspect
    import json
    import re
    from pathlib import Path

    from gpulab import memory, plots

    literal = re.compile(r'"((?:Tesla |NVIDIA )?[AHLTV]\d{1,3}\b[^"{}]*)"')
    names = set(inspect.signature(plots.plot_roofline).parameters["gpus"].default)
    names |= set(literal.findall(inspect.getsource(memory.MemoryEstimate.fits)))
    for nb in sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            src = "".join(cell["source"])
            if cell["cell_type"] == "code" and ("gpu_spec" in src or "choose_precision(gpu" in src):
                names |= set(literal.findall(src))
    assert {"T4", "A100 40GB SXM", "H100 SXM", "V100 SXM2", "A100 80GB SXM", "L4"} <= names
    for n in names:
        gl.gpu_spec(n)


def test_gpu_spec_unknown_and_table():
    with pytest.raises(KeyError, match="known GPUs"):
        gl.gpu_spec("Voodoo 2")
    with pytest.raises(ValueError):
        gl.gpu_spec("")
    df = gl.reference.gpu_specs().to_dataframe()
    assert len(df) == len(GPU_SPECS) and (df["bandwidth GB/s"] > 0).all()
    assert GPU_SPECS["A100 40GB SXM"].ridge_point() == pytest.approx(312e12 / 1555e9)


def test_gpu_specs_table_renders_units_and_converts_to_the_old_frame():
    t = gl.reference.gpu_specs()
    lines = repr(t).splitlines()
    header = ["gpu", "architecture", "fp32 (TFLOP/s)", "fp16 tensor (TFLOP/s)", "bandwidth (GB/s)", "memory (GiB)",
              "TDP (W)", "source"]
    assert lines[0].startswith("Datasheet peaks") and [h.strip() for h in lines[1].split("  ") if h.strip()] == header
    assert len(lines) == len(GPU_SPECS) + 4 and len(t) == len(GPU_SPECS)
    starts = [lines[1].index(h) for h in header]
    rows = {line[:starts[1]].strip(): [line[a:b].strip() for a, b in zip(starts, starts[1:] + [None])]
            for line in lines[3:-1]}
    assert rows["A100 80GB PCIe"] == ["A100 80GB PCIe", "Ampere", "19.5", "312", "1935", "80", "300",
                                      "NVIDIA A100 datasheet"]
    assert rows["H100 PCIe"][3] == "756.5" and rows["T4"][4] == "320"
    assert "<table" in t._repr_html_() and "<th>bandwidth (GB/s)</th>" in t._repr_html_()
    df = t.to_dataframe()
    assert list(df.columns) == ["gpu", "architecture", "fp32 TFLOP/s", "fp16 tensor TFLOP/s", "bandwidth GB/s",
                                "memory GiB", "TDP W", "source"]
    assert df["gpu"].tolist() == list(GPU_SPECS) and df.loc[df.gpu == "T4", "memory GiB"].item() == 15.0
    assert t.spec("H100 SXM") is GPU_SPECS["H100 SXM"] and t.spec("Tesla T4") is GPU_SPECS["T4"]
    with pytest.raises(AttributeError):
        t.specs = ()


def test_roofline_and_amdahl():
    assert gl.attainable_flops(1000.0, 1e12, 1e11) == 1e12
    assert gl.attainable_flops(1.0, 1e12, 1e11) == 1e11
    arr = gl.attainable_flops(np.array([0.1, 100.0]), 1e12, 1e11)
    assert arr.tolist() == [1e10, 1e12]
    assert gl.roofline.amdahl_speedup(1.0, 4) == pytest.approx(4)
    assert gl.roofline.amdahl_speedup(0.0, 4) == pytest.approx(1)
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
        gl.roofline.amdahl_speedup(1.5, 2)


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
        gl.limits.measure_matmul(0)
    with pytest.raises(ValueError):
        gl.limits.measure_matmul(8, "int4", device="cpu")
    with pytest.raises(ValueError):
        gl.limits.measure_bandwidth(10)


def test_plots_return_axes():
    ax = gl.plot_roofline(1e11, 2e10, points=[("mm", 50.0, 5e10)])
    assert ax.get_xscale() == "log" and len(ax.get_lines()) >= 4
    ax2 = gl.plots.plot_amdahl(gl.fit_amdahl([1, 2], [1.0, 0.6]))
    assert ax2.get_ylabel().startswith("speedup")
    assert not math.isnan(ax2.get_lines()[0].get_ydata()[0])


def test_machine_limits_are_remembered_and_only_rise():
    from gpulab.limits import forget_limits

    kw = dict(dtypes=["float32"], copy_bytes=1 << 22, min_run_time=0.02)
    first = gl.machine_limits("cpu", sizes=[64], **kw)
    assert gl.machine_limits("cpu", sizes=[64], **kw) is first                     # remembered: not measured again
    more = gl.machine_limits("cpu", sizes=[64, 96], **kw)                           # only n=96 is new
    assert {m.label for m in more.matmul} >= {"matmul 64 float32", "matmul 96 float32"}
    assert more.peak_flops() >= first.peak_flops()                                  # a ceiling never drops
    assert "fastest of" in more.method and "n = " in more.method and "how:" in repr(more)
    again = gl.machine_limits("cpu", sizes=[64], refresh=True, **kw)
    assert again is not first and [m.label for m in again.matmul] == ["matmul 64 float32"]
    forget_limits()
    with pytest.raises(ValueError, match="unknown dtype"):
        gl.machine_limits("cpu", dtypes=["int4"], sizes=[64])
    with pytest.raises(ValueError, match="at least one"):
        gl.MachineLimits("cpu", first.env, (), first.copy)


def test_ceiling_for_raises_a_beaten_ceiling():
    from gpulab.limits import ceiling_for

    assert ceiling_for(None, [("a", 5.0)]) == (None, None)
    assert ceiling_for(10.0, [("a", 5.0), ("b", None)]) == (10.0, None)
    top, note = ceiling_for(10.0, [("a", 5.0), ("b", 13.0)])
    assert top == 13.0 and "'b' ran faster than the matmul benchmark" in note


def test_comparison_shares_never_exceed_100_percent():
    env = gl.timing.environment("cpu")
    fast = gl.Measurement("fast", (0.001,), 1, "cpu", 1, env, "cpu", 0, flops=2e8)    # 200 GFLOP/s
    slow = gl.Measurement("slow", (0.004,), 1, "cpu", 1, env, "cpu", 0, flops=2e8)    # 50 GFLOP/s
    table = gl.compare([slow, fast], peak_flops=100e9)                                   # a "peak" of 100
    df = table.to_dataframe()
    assert df["fraction_of_peak_flops"].max() == pytest.approx(1.0)
    assert df.loc["slow", "fraction_of_peak_flops"] == pytest.approx(0.25)
    assert table.flops_ceiling == pytest.approx(200e9) and "ceiling raised" in repr(table)
    assert "ceiling raised" in table._repr_html_()
    honest = gl.compare([slow, fast], peak_flops=400e9)
    assert honest.flops_ceiling == 400e9 and not honest.ceiling_notes


def test_t4_memory_is_what_nvidia_smi_shows_with_the_datasheet_figure_beside_it():
    t4 = gl.gpu_spec("Tesla T4")
    assert t4.memory_bytes == 15360 * 2**20                        # nvidia-smi: 15360MiB (ECC on, the default)
    assert t4.datasheet_memory_bytes == 16 * 2**30                 # the datasheet's 16 GB of GDDR6
    assert t4.memory_bytes == t4.datasheet_memory_bytes * 15 // 16  # ECC keeps 6.25% of GDDR memory
    assert t4.source == "NVIDIA T4 datasheet"
    assert gl.gpu_spec("H100 SXM").datasheet_memory_bytes is None     # HBM: no difference recorded


def test_a_program_sees_less_of_a_t4_than_nvidia_smi_shows_and_estimates_use_that():
    from gpulab import rehearsal

    t4 = gl.gpu_spec("T4")
    assert t4.cuda_memory_bytes == 15_835_660_288 < t4.memory_bytes    # torch's total_memory: 14.75 GiB, not 15
    assert t4.program_memory_bytes == t4.cuda_memory_bytes
    # the rehearsal's T4 cap starts from the same figure (less 0.4 GiB of CUDA context)
    assert rehearsal.PROFILES["t4"].memory_bytes == t4.cuda_memory_bytes - int(0.4 * 2**30)
    h100 = gl.gpu_spec("H100 SXM")
    assert h100.cuda_memory_bytes is None and h100.program_memory_bytes == h100.memory_bytes
    assert gl.gpu_spec("A100 40GB SXM MIG 1g.5gb").cuda_memory_bytes is None   # a slice: no program figure recorded
    est = gl.estimate(lambda: torch.nn.Linear(8, 8), lambda n: (torch.randn(n, 8), torch.randn(n, 8)), 4)
    assert est.fits().loc["T4", "memory GiB"] == pytest.approx(t4.cuda_memory_bytes / 2**30)


# ---- the remembered ceilings of a CUDA device, with the measuring faked (no GPU needed) -------------------------
A100_FP32, A100_TF32, A100_BF16 = 19.5e12, 156e12, 312e12     # datasheet peaks; a run reaches 80% of them


@pytest.fixture
def fake_a100(monkeypatch, pretend_gpus):
    """machine_limits on "cuda" with torch.mm timed by a stand-in that runs as fast as an A100 would: fp32 at its
    fp32 peak, or at its TF32 peak when the TF32 switch (read as torch reads it) is on. Returns the calls made."""
    from gpulab import limits
    from gpulab.system import tf32_state
    from gpulab.timing import Measurement, environment

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "NVIDIA A100-SXM4-40GB")
    # the field cache_levels reads (an A100's 40 MiB L2, as torch reports it in bytes)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda device=None: type("Props", (), {"L2_cache_size": 40 << 20, "name": "A100"})())
    calls = []

    def matmul(n, dtype="float32", device=None, min_run_time=0.5, warmup=2):
        calls.append(("matmul", n, dtype, str(device)))
        peak = {"float32": A100_TF32 if tf32_state().matmul else A100_FP32, "bfloat16": A100_BF16}[dtype]
        flops = 2 * n**3
        return Measurement(f"matmul {n} {dtype}", (flops / (0.8 * peak),), 1, str(device), 1, environment(device),
                           "torch.utils.benchmark", 0, flops=flops)

    def bandwidth(nbytes, device=None, min_run_time=0.5, warmup=2):
        calls.append(("copy", nbytes, str(device)))
        moved = 2 * (nbytes // 4) * 4
        rate = 1.3e12 if moved > 40 << 20 else 3.5e12      # HBM, or the L2 for a copy that fits it
        return Measurement(f"copy {nbytes}", (moved / rate,), 1, str(device), 1, environment(device),
                           "torch.utils.benchmark", 0, bytes_moved=moved)

    monkeypatch.setattr(limits, "measure_matmul", matmul)
    monkeypatch.setattr(limits, "measure_bandwidth", bandwidth)
    limits.forget_limits()
    yield calls
    limits.forget_limits()


def test_cuda_and_cuda_0_share_one_measurement(fake_a100):
    kw = dict(dtypes=["float32"], sizes=[4096], copy_bytes=1 << 30)
    first = gl.machine_limits("cuda", **kw)
    assert first.device == "cuda:0" and len(fake_a100) == 3      # one matmul, the HBM copy and the L2 copy
    for same in ("cuda:0", torch.device("cuda"), torch.device("cuda", 0), 0):
        assert gl.machine_limits(same, **kw) is first, same
    assert len(fake_a100) == 3 and {c[-1] for c in fake_a100} == {"cuda:0"}       # measured once, on cuda:0
    assert [c[:2] for c in fake_a100[1:]] == [("copy", 1 << 30), ("copy", 10 << 20)]   # L2 / 4: half of it in use
    assert first.bandwidth_tiers[0][:2] == ("L2", 20 << 20) and first.bandwidth_bytes_per_s == pytest.approx(1.3e12)
    assert first.bandwidth_for(8 << 20) == pytest.approx(3.5e12) and first.bandwidth_for(1 << 30) == pytest.approx(1.3e12)


def test_tf32_on_and_off_are_remembered_apart(fake_a100):
    from gpulab.system import tf32_switched

    kw = dict(dtypes=["float32", "bfloat16"], sizes=[4096], copy_bytes=1 << 30)
    with tf32_switched(matmul=False):
        off = gl.machine_limits("cuda", **kw)
    with tf32_switched(matmul=True):
        on = gl.machine_limits("cuda", **kw)
        assert gl.machine_limits("cuda:0", **kw) is on
    with tf32_switched(matmul=False):
        assert gl.machine_limits("cuda", **kw) is off                             # not the TF32 figure
    assert off.fp32_tf32 is False and on.fp32_tf32 is True
    assert off.peak_flops("float32") == pytest.approx(0.8 * A100_FP32)
    assert on.peak_flops("float32") == pytest.approx(0.8 * A100_TF32)
    assert on.peak_flops("bfloat16") == off.peak_flops("bfloat16")               # shared: measured once
    assert [c[:3] for c in fake_a100] == [("matmul", 4096, "float32"), ("matmul", 4096, "bfloat16"),
                                          ("copy", 1 << 30, "cuda:0"), ("copy", 10 << 20, "cuda:0"),
                                          ("matmul", 4096, "float32")]
    assert "matmul float32 (TF32)" in repr(on) and "TF32 allowed" in on.method
    assert "(TF32)" not in repr(off) and "without TF32" in off.method
    with tf32_switched(matmul=True):
        assert gl.machine_limits("cuda", refresh=True, **kw) is not on           # refresh forgets both settings
    assert len(fake_a100) == 5 + 4


def test_cpu_ceilings_ignore_the_tf32_switch():
    from gpulab.system import tf32_switched

    kw = dict(dtypes=["float32"], sizes=[64], copy_bytes=1 << 20, min_run_time=0.02)
    with tf32_switched(matmul=False):
        first = gl.machine_limits("cpu", **kw)
    with tf32_switched(matmul=True):
        assert gl.machine_limits("cpu", **kw) is first and first.fp32_tf32 is None
    gl.limits.forget_limits()


def test_ceiling_for_ignores_rates_that_are_not_finite_and_refuses_a_ceiling_that_is_not():
    import math

    from gpulab.limits import ceiling_for

    assert ceiling_for(100e9, [("diverged", math.nan), ("inf", math.inf), ("cnn", 50e9)]) == (100e9, None)
    assert ceiling_for(100e9, [("nan", math.nan), ("mlp", 132e9)])[0] == 132e9
    for bad in (math.nan, math.inf, 0.0, -1.0):
        with pytest.raises(ValueError, match="ceiling must be a positive finite rate"):
            ceiling_for(bad, [("mlp", 1e9)])


def test_the_matmul_sweep_stops_before_a_size_whose_one_run_would_be_too_long(monkeypatch):
    """A dtype the CPU runs slowly (bf16 without bf16 units: ~1 GFLOP/s, 15 s for one n = 2048 product) is measured
    at the sizes whose one run stays under MAX_MATMUL_RUN_S at the rate just measured; the method says so."""
    import dataclasses

    from gpulab import limits as L

    real, calls = L.measure_matmul, []

    def timed(n, dtype="float32", *args, **kwargs):
        calls.append((n, dtype))
        m = real(n, dtype, *args, **kwargs)
        slow = dtype == "float64"                                  # stands in for bf16 emulated: 0.1 s a run
        return dataclasses.replace(m, times_s=[0.1] * 3) if slow else m

    monkeypatch.setattr(L, "measure_matmul", timed)
    monkeypatch.setattr(L, "MAX_MATMUL_RUN_S", 0.2)
    L.forget_limits()
    lim = gl.machine_limits("cpu", dtypes=["float32", "float64"], sizes=[48, 32], copy_bytes=1 << 20,
                            min_run_time=0.01, caches=False)
    assert calls == [(32, "float32"), (48, "float32"), (32, "float64")]     # 48 in float64: 0.1 x 3.4 s > 0.2 s
    assert "over n = 32, 48 per dtype (float64: 32: a larger one would run over 0.2 s)" in lim.method
    calls.clear()                                                           # remembered: the sweep stops again
    assert gl.machine_limits("cpu", dtypes=["float64"], sizes=[32, 48], copy_bytes=1 << 20, caches=False) is lim
    assert calls == []
    L.forget_limits()
