"""gpulab.course.lesson.published: cite, datasheet figures, published curves and the "your numbers vs published" table."""
from __future__ import annotations

import math

import pytest

from gpulab.course.lesson.published import Cited, cite, datasheet, measured, published_curve, your_numbers
from gpulab.reference import published


def test_cite_words_figures_with_hardware_and_optional_source():
    assert cite("amp-pytorch") == "2-3x on NVIDIA Volta, Turing, Ampere GPUs"
    two = cite("amp-pytorch", "amp-hf-v100", source=True)
    assert two == ("2-3x on NVIDIA Volta, Turing, Ampere GPUs (PyTorch AMP recipe); 2.1x on NVIDIA Tesla "
                   "V100-SXM2 16GB (Hugging Face Transformers docs, 'Efficient Training on a Single GPU' (v4.21))")


def test_cite_rejects_bad_keys_naming_them():
    with pytest.raises(ValueError, match=r"'amp-pytorh'.*'amp-pytorch'"):
        cite("amp-pytorh")
    with pytest.raises(ValueError, match="at least one key"):
        cite()
    with pytest.raises(TypeError, match="42"):
        cite(42)
    with pytest.raises(TypeError, match="source"):
        cite("amp-pytorch", source="yes")


def test_datasheet_figures_in_fixed_units():
    t4 = datasheet("Tesla T4", "fp32")
    assert (t4.low, t4.high, t4.unit, t4.figure) == (8.1, 8.1, "TFLOP/s", "8.1 TFLOP/s")
    assert t4.source == "NVIDIA T4 datasheet" and t4.hardware == "T4, fp32 peak"
    assert datasheet("A100 40GB SXM", "bandwidth").low == pytest.approx(1555)
    t4_memory = datasheet("T4", "memory")          # as nvidia-smi shows it (ECC on), the datasheet's 16 GB beside it
    assert t4_memory.low == pytest.approx(15) and "datasheet: 16 GB" in t4_memory.hardware
    assert datasheet("A100 80GB SXM", "memory").hardware == "A100 80GB SXM, memory"
    assert datasheet("T4", "16-bit").hardware == "T4, fp16 tensor-core peak"            # no bf16 tensor cores
    assert datasheet("H100 SXM", "16-bit").hardware == "H100 SXM, bf16 tensor-core peak"
    with pytest.raises(ValueError, match="no bf16 tensor-core peak"):
        datasheet("T4", "bf16")
    with pytest.raises(ValueError, match="'fp8'"):
        datasheet("T4", "fp8")
    with pytest.raises(KeyError):
        datasheet("A100", "fp32")                                                          # ambiguous card


def test_published_curve_reads_the_t4_points_from_the_reference_claim():
    curve = published_curve("resnet50-t4-batch-1-to-256")
    assert curve == ((1, 79.0), (8, 652.0), (16, 1050.0), (32, 1128.0), (64, 1165.0), (128, 1190.0), (256, 1198.0))
    assert curve[-1][1] / curve[0][1] == pytest.approx(published("resnet50-t4-batch-1-to-256").low, rel=0.01)
    by_batch = dict(curve)
    assert by_batch[256] / by_batch[32] == pytest.approx(published("resnet50-t4-batch-32-to-256").low, rel=0.01)
    with pytest.raises(ValueError, match="no curve"):
        published_curve("amp-pytorch")


def test_measured_rows_and_ratio_only_for_matching_units():
    row = measured("speedup", 1.5, "x", vs=["amp-pytorch", "amp-hf-v100-memory"])
    assert [c.key for c in row.cited] == ["amp-pytorch", "amp-hf-v100-memory"]
    assert row.ratio(row.cited[0]) == pytest.approx((0.5, 0.75))        # 1.5 / 3 .. 1.5 / 2
    assert row.ratio(row.cited[1]) is None                              # "x memory" is another unit
    assert measured("text", "batch 64", vs="amp-pytorch").ratio(row.cited[0]) is None
    assert measured("missing", float("nan")).yours is None
    np = pytest.importorskip("numpy")
    assert measured("numpy", np.float32(1.5), "x").yours == 1.5 and measured("int", np.int64(3)).yours == 3.0
    assert measured("pct", 0.123, "fraction").yours_text == "12%"
    assert measured("pct", 0.1234, "fraction", digits=5).yours_text == "12.34%"
    assert measured("bpp", 16.0123, "bytes/parameter", digits=4).yours_text == "16.01 bytes/parameter"
    assert measured("slower", -5.0, "x", vs="amp-pytorch").ratio(row.cited[0]) is None   # no ratio of a negative
    assert measured("rate", 11.5, " GB/s").yours_text == "11.5 GB/s"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(quantity="", yours=1.0), ValueError, "quantity"),
    (dict(quantity="q", yours=True), TypeError, "True"),
    (dict(quantity="q", yours=[1]), TypeError, r"\[1\]"),
    (dict(quantity="q", yours=float("inf")), ValueError, "inf"),
    (dict(quantity="q", yours=1.0, vs="no-such-key"), ValueError, "no-such-key"),
    (dict(quantity="q", yours=1.0, unit=3), TypeError, "unit"),
    (dict(quantity="q", yours=1.0, noisy="no"), TypeError, "noisy"),
    (dict(quantity="q", yours=1.0, digits=0), ValueError, "digits"),
    (dict(quantity="q", yours=1.0, vs=7), TypeError, "got 7"),
    (dict(quantity="q", yours=1.0, vs=["amp-pytorch", 7]), TypeError, "got 7"),
])
def test_measured_rejects_bad_input(kwargs, error, match):
    with pytest.raises(error, match=match):
        measured(**kwargs)


def test_your_numbers_table_lines_provenance_and_ratios():
    table = your_numbers([
        measured("fp32 matmul peak", 0.81, "TFLOP/s", vs=[datasheet(g, "fp32") for g in ("T4", "H100 SXM")]),
        measured("bf16 training speedup", 1.2, "x", vs=["amp-pytorch", "amp-hf-v100"], note="CPU, no AMX"),
        measured("accumulated vs full-batch gradients", "1e-07", claim="equal up to rounding", source="arithmetic"),
        measured("noisy speedup", 2.0, "x", vs="amp-pytorch", noisy=True),
    ], title="Lesson 99")
    df = table.to_dataframe()
    assert len(df) == 6                                       # one line per published figure or claim
    assert list(df["quantity"]) == ["fp32 matmul peak"] * 2 + ["bf16 training speedup"] * 2 + [
        "accumulated vs full-batch gradients", "noisy speedup"]
    assert df.loc[0, "ratio_low"] == pytest.approx(0.1) and df.loc[1, "ratio_low"] == pytest.approx(0.81 / 67)
    assert df.loc[2, ["ratio_low", "ratio_high"]].tolist() == pytest.approx([0.4, 0.6])
    assert df.loc[3, "ratio_low"] == pytest.approx(1.2 / 2.1)
    assert math.isnan(df.loc[4, "ratio_low"]) and df.loc[4, "published"] == "equal up to rounding"
    assert math.isnan(df.loc[5, "ratio_low"])                 # a noisy row draws no ratio
    assert df.loc[2, "source"] == "PyTorch AMP recipe" and df.loc[2, "url"].startswith("https://pytorch.org")

    text = repr(table)
    lines = text.splitlines()
    assert lines[0] == "Lesson 99"
    assert lines[1].split() == ["quantity", "yours", "published", "hardware", "source", "yours", "/", "published",
                                "note"]
    assert "0.81 TFLOP/s" in lines[3] and "8.1 TFLOP/s" in lines[3] and "0.1" in lines[3]
    assert lines[4].startswith(" ") and "67 TFLOP/s" in lines[4] and "0.012" in lines[4]
    assert "0.4-0.6" in lines[5] and "PyTorch AMP recipe (2020)" in lines[5] and "CPU, no AMX" in lines[5]
    assert "2x *" in lines[8] and "noisy" in lines[-1]
    html = table._repr_html_()
    assert "<table" in html and "Lesson 99" in html and "equal up to rounding" in html


def test_your_numbers_rejects_bad_rows():
    with pytest.raises(ValueError, match="at least one row"):
        your_numbers([])
    with pytest.raises(TypeError, match="dict"):
        your_numbers([{"quantity": "q"}])
    with pytest.raises(TypeError, match="list of rows"):
        your_numbers(measured("q", 1.0))
    with pytest.raises(ValueError, match=r"repeated: \['q'\]"):
        your_numbers([measured("q", 1.0), measured("q", 2.0)])


def test_cited_is_frozen():
    c = datasheet("T4", "fp32")
    assert isinstance(c, Cited)
    with pytest.raises(AttributeError):
        c.low = 1.0
