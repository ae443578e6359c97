"""Cost per item: reference prices with provenance, prices given by hand, exact GPU matching and the arithmetic."""
from __future__ import annotations

import dataclasses
import math
import re

import pytest

import gpulab as gl
from gpulab import cost
from gpulab.figures.prices import PRICES, Price

_T4 = Price("test-t4", 0.35, "1 x T4 attached to a VM (GPU only)", "T4", 1, "Test Cloud", "us-central1",
            "Test Cloud GPU pricing", "https://example.com/gpu-pricing", "2025-06", "GPU only")
_A100 = Price("test-a100-40gb", 4.0, "8 x A100 40GB SXM instance", "A100 40GB SXM", 8, "Test Cloud", "us-east-1",
              "Test Cloud instance pricing", "https://example.com/instances", "2025-06")
_H100 = Price("test-h100", 6.0, "8 x H100 SXM instance", "H100 SXM", 8, "Other Cloud", "us-east-1",
              "Other Cloud pricing", "https://example.org/pricing", "2025-07")
_VM = Price("test-vm", 0.067, "2 vCPU, 8 GB", None, 1, "Test Cloud", "us-central1", "Test Cloud VM pricing",
            "https://example.com/vm-pricing", "2025-06", "the whole VM")
_TABLE = (_T4, _A100, _H100, _VM)


@pytest.fixture
def table(monkeypatch):
    monkeypatch.setattr(cost, "PRICES", _TABLE)
    return _TABLE


def _provenance_problems(p: Price) -> list[str]:
    problems = []
    if not (isinstance(p.usd_per_hour, float | int) and math.isfinite(p.usd_per_hour) and p.usd_per_hour > 0):
        problems.append("price")
    if not p.url.startswith("https://"):
        problems.append("url")
    if not re.fullmatch(r"20\d\d-(0[1-9]|1[0-2])", p.date):
        problems.append("date")
    if not (p.region and p.provider and p.source and p.instance and p.key):
        problems.append("provenance text")
    if p.gpu is not None:
        try:
            gl.gpu_spec(p.gpu)
        except KeyError:
            problems.append("gpu")
    return problems


def test_every_reference_price_is_positive_with_its_page_date_region_and_a_known_gpu():
    keys = [p.key for p in PRICES]
    assert len(keys) == len(set(keys))
    for p in PRICES:
        assert _provenance_problems(p) == [], p.key


def test_the_provenance_check_accepts_a_complete_entry_and_catches_each_gap():
    assert all(_provenance_problems(p) == [] for p in _TABLE)
    assert _provenance_problems(dataclasses.replace(_T4, url="http://example.com")) == ["url"]
    assert _provenance_problems(dataclasses.replace(_T4, date="2025")) == ["date"]
    assert _provenance_problems(dataclasses.replace(_T4, region="")) == ["provenance text"]
    assert _provenance_problems(dataclasses.replace(_T4, gpu="A100")) == ["gpu"]


def test_a_price_record_refuses_a_price_or_gpu_count_that_is_not_a_price():
    for bad in (0, -1.0, math.nan, math.inf, True, "0.35"):
        with pytest.raises(ValueError, match="usd_per_hour"):
            dataclasses.replace(_T4, usd_per_hour=bad)
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="gpus"):
            dataclasses.replace(_T4, gpus=bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        _T4.usd_per_hour = 1.0  # type: ignore[misc]


def test_a_price_reads_as_a_sentence_with_its_source():
    assert str(_T4) == "$0.35 per GPU-hour: T4 on Test Cloud us-central1, on demand (Test Cloud GPU pricing, 2025-06)"
    assert str(_VM).startswith("$0.067 per hour: 2 vCPU, 8 GB on Test Cloud us-central1")
    assert str(cost.hourly_price(12.5)) == "$12.50 per hour: your price (price_per_hour given)"


def test_price_for_gpu_matches_the_exact_names_torch_and_nvidia_smi_print(table):
    assert cost.price_for_gpu("Tesla T4") is _T4
    assert cost.price_for_gpu("NVIDIA A100-SXM4-40GB") is _A100
    assert cost.price_for_gpu("NVIDIA H100 80GB HBM3") is _H100
    assert cost.price_for_gpu("T4") is _T4 and cost.price_for_gpu("  nvidia   h100 80gb hbm3 ") is _H100


def test_price_for_gpu_guesses_nothing(table):
    assert cost.price_for_gpu("NVIDIA A100-PCIE-40GB") is None        # known GPU, no price listed
    assert cost.price_for_gpu("NVIDIA A10G") is None                  # unknown GPU
    assert cost.price_for_gpu("A100") is None                         # a partial name is not matched
    assert cost.price_for_gpu("NVIDIA A100-SXM4-40GB MIG 1g.5gb") is None   # a slice is not the whole card
    with pytest.raises(TypeError):
        cost.price_for_gpu(None)  # type: ignore[arg-type]


def test_price_for_gpu_on_the_reference_table_follows_the_table():
    for name, short in (("Tesla T4", "T4"), ("NVIDIA A100-SXM4-40GB", "A100 40GB SXM"),
                        ("NVIDIA H100 80GB HBM3", "H100 SXM"), ("NVIDIA L4", "L4")):
        listed = [p for p in PRICES if p.gpu is not None and gl.gpu_spec(p.gpu).name == short]
        assert cost.price_for_gpu(name) is (listed[0] if listed else None), name
    assert cost.price_for_gpu("NVIDIA A10G") is None


def test_hourly_price_takes_a_number_a_key_or_a_price(table):
    p = cost.hourly_price(3.6)
    assert (p.key, p.usd_per_hour, p.gpu, p.gpus, p.url, p.instance) == ("given", 3.6, None, 1, "", "your price")
    assert cost.hourly_price(2).usd_per_hour == 2.0 and isinstance(cost.hourly_price(2).usd_per_hour, float)
    assert cost.hourly_price("test-t4") is _T4
    assert cost.hourly_price(_H100) is _H100


@pytest.mark.parametrize("bad, kind", [(0, ValueError), (-1, ValueError), (math.nan, ValueError),
                                       (math.inf, ValueError), (True, TypeError), ("nope", ValueError),
                                       ([], TypeError), (None, TypeError)])
def test_hourly_price_refuses_what_is_not_a_price_and_says_what_to_pass(table, bad, kind):
    with pytest.raises(kind) as e:
        cost.hourly_price(bad)
    text = str(e.value)
    assert "price_per_hour" in text and "USD per hour" in text and repr(bad)[:10] in text
    assert "'test-t4'" in text and "'test-vm'" in text                  # the keys to choose from


def test_hourly_price_with_no_reference_prices_says_to_pass_a_number(monkeypatch):
    monkeypatch.setattr(cost, "PRICES", ())
    with pytest.raises(ValueError, match="pass a number"):
        cost.hourly_price("gcp-t4")


def test_cost_per_million_is_the_price_per_second_over_the_throughput():
    assert cost.cost_per_million(3.6, 1000.0) == pytest.approx(1.0)
    assert cost.cost_per_million(0.35, 500) == pytest.approx(0.35 / 3600 / 500 * 1e6)
    assert cost.cost_per_million(7.2, 1000.0) == pytest.approx(2 * cost.cost_per_million(3.6, 1000.0))
    assert cost.cost_per_million(3.6, 2000.0) == pytest.approx(0.5)
    assert cost.cost_per_million(0, 1000.0) == 0.0


@pytest.mark.parametrize("items", [None, 0, 0.0, -5.0, math.nan, math.inf])
def test_cost_per_million_is_none_without_a_throughput(items):
    assert cost.cost_per_million(3.6, items) is None


def test_cost_per_million_refuses_a_bad_price_or_throughput_kind():
    for bad in (-1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="usd_per_hour"):
            cost.cost_per_million(bad, 100.0)
    with pytest.raises(TypeError, match="usd_per_hour"):
        cost.cost_per_million("3.6", 100.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="items_per_s"):
        cost.cost_per_million(3.6, True)  # type: ignore[arg-type]


def test_the_price_table_renders_every_key_as_text_and_html_with_its_caveat(table):
    t = cost.prices()
    text, html = repr(t), t._repr_html_()
    assert len(t) == len(_TABLE)
    for p in _TABLE:
        assert p.key in text and p.key in html and p.source in text
    assert text.splitlines()[1].split()[:3] == ["key", "$/GPU-hour", "GPU"]
    assert "$0.35" in text and "$0.067 (machine)" in text and "CPU only" in text
    notes = text.splitlines()[-1]
    assert "list prices" in notes and "not what any account pays" in notes and "throughput" in notes
    assert "<table" in html and "not what any account pays" in html
    assert t.price("test-h100") is _H100
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.prices = ()  # type: ignore[misc]


def test_the_reference_table_renders_even_when_empty():
    t = cost.prices()
    assert len(t) == len(PRICES) and "Published on-demand cloud prices" in repr(t) and "<table" in t._repr_html_()


# ---- a run on several GPUs pays a price per GPU-hour for each ---------------------------------------------------
def test_a_run_on_several_gpus_pays_the_gpu_hour_price_for_each(table):
    assert cost.cost_per_million(4.0, 1000.0, gpus=8) == pytest.approx(8 * cost.cost_per_million(4.0, 1000.0))
    m = gl.benchmark(sum, range(100), min_run_time=0.02, items=10, warn_noisy=False)
    one = gl.compare([m], price_per_hour=_A100)
    eight = gl.compare([m], price_per_hour=_A100, gpus=8)
    assert eight.cost_per_million(m.label) == pytest.approx(8 * one.cost_per_million(m.label))
    assert eight.to_dataframe().loc[m.label, "usd_per_million"] == pytest.approx(8 * one.cost_per_million(m.label))
    assert "$32.00 per hour: 8 GPUs x $4.00 per GPU-hour" in repr(eight) and "8 GPUs" not in repr(one)
    from gpulab.telemetry.trace import Trace
    import pandas as pd

    frame = pd.DataFrame({"t_s": [0.0, 1.0], "device": "gpu0", "source": "nvml", "power_w": 300.0})
    s = Trace(frame, 1.0, duration_s=3600.0).summary(items=1e6, price_per_hour=_A100, gpus=8)
    assert s.cost_per_million_items == pytest.approx(32.0) and "8 GPUs x $4.00 per GPU-hour" in repr(s)


@pytest.mark.parametrize("gpus, error", [(0, ValueError), (-2, ValueError), (2.5, TypeError), ("8", TypeError),
                                         (True, TypeError), (None, TypeError)])
def test_gpus_must_be_a_whole_number_of_gpus(gpus, error):
    with pytest.raises(error, match="gpus"):
        cost.cost_per_million(1.0, 10.0, gpus=gpus)
    m = gl.benchmark(sum, range(10), min_run_time=0.02, warn_noisy=False)
    with pytest.raises(error, match="gpus"):
        gl.compare([m], price_per_hour=1.0, gpus=gpus)


def test_a_whole_machines_price_is_not_multiplied_by_gpus():
    m = gl.benchmark(sum, range(10), min_run_time=0.02, warn_noisy=False)
    with pytest.raises(ValueError, match="whole machine's price per hour"):
        gl.compare([m], price_per_hour=3.6, gpus=4)                    # a number given is the machine's price
    assert gl.compare([m], price_per_hour=3.6, gpus=1).gpus == 1
