"""Lesson 13's MFU told like for like (``course.gpt_mfu``): the headline over the card's datasheet dense peak, as PaLM,
Llama 3 and nanoGPT quote it, the measured peak's share beside it, and on a CPU the measured peak only, said so; the
notebook sets every MFU beside published runs through it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import gpulab as gl
from gpulab import course

FPT, TOK_S = 855e6, 150_000.0          # GPT-2 small's FLOPs per token at 150k tokens/s: 128 TFLOP/s achieved


def test_a_gpu_with_a_datasheet_gets_the_datasheet_headline_and_the_measured_share_beside_it():
    m = course.gpt_mfu(FPT, TOK_S, precision="bfloat16", measured_peak_flops=700e12, gpu="NVIDIA H100 80GB HBM3",
                       label="the final recipe")
    assert m.datasheet_peak_flops == gl.gpu_spec("NVIDIA H100 80GB HBM3").bf16_tensor_flops == 989e12
    assert m.headline_peak == "datasheet" and m.headline == m.of_datasheet == pytest.approx(FPT * TOK_S / 989e12)
    assert m.of_measured == pytest.approx(gl.transformer.mfu(FPT, TOK_S, 700e12))
    text = repr(m)
    assert "MFU (datasheet bf16 peak)" in text and "share of what this card sustains (measured bf16 peak)" in text
    assert "13.0%" in text and "18.3%" in text and "NVIDIA H100 datasheet" in text and "<table" in m._repr_html_()
    first, second = m.rows(vs=["palm-mfu", "llama3-mfu"])
    assert first.quantity == "MFU of the final recipe (datasheet bf16 peak)" and first.yours == m.of_datasheet
    assert [c.key for c in first.cited] == ["palm-mfu", "llama3-mfu"]
    assert "what this card sustains" in second.quantity and second.yours == m.of_measured and not second.cited


def test_the_datasheet_comes_from_the_cuda_devices_name(monkeypatch):
    """A fake GPU: torch reports a T4, whose datasheet lists fp16 tensor cores and no bf16."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fp16 = course.gpt_mfu(FPT, 20_000, precision=torch.float16, measured_peak_flops=40e12, device="cuda")
    assert fp16.gpu == "Tesla T4" and fp16.datasheet_peak_flops == 65e12 and fp16.headline_peak == "datasheet"
    assert fp16.headline == pytest.approx(FPT * 20_000 / 65e12)
    bf16 = course.gpt_mfu(FPT, 20_000, precision="bf16", measured_peak_flops=10e12, device="cuda")
    assert bf16.datasheet_peak_flops is None and bf16.headline_peak == "measured"
    assert "lists no bf16 tensor-core peak" in bf16.datasheet and bf16.headline == bf16.of_measured
    (row,) = bf16.rows(vs=["palm-mfu"])
    assert "no datasheet peak for this device" in row.quantity and "no datasheet for Tesla T4" in row.note


def test_on_a_cpu_the_measured_peak_is_the_only_one_and_it_says_so():
    m = course.gpt_mfu(1e6, 1e4, precision="float32", measured_peak_flops=1e11, device="cpu", label="plain fp32")
    assert m.gpu is None and m.datasheet_peak_flops is None and m.of_datasheet is None
    assert m.headline_peak == "measured" and m.headline == m.of_measured == pytest.approx(0.1)
    text = repr(m)
    assert text.startswith("MFU against the measured peak only") and "MFU (measured fp32 peak)" in text
    assert "none for a CPU" in text and "datasheet bf16" not in text and "the measured peak only" in m.describe()
    (row,) = m.rows(vs=["palm-mfu"], note="0.5M parameters on cpu")
    assert row.quantity == "MFU of plain fp32 (measured fp32 peak: no datasheet peak for this device)"
    assert "a CPU has no datasheet peak" in row.note and row.note.startswith("0.5M parameters on cpu")
    assert "not like for like" in text


def test_an_unknown_gpu_falls_back_to_the_measured_peak_and_names_it():
    m = course.gpt_mfu(FPT, TOK_S, precision="float32", measured_peak_flops=30e12, gpu="NVIDIA A10G")
    assert m.headline_peak == "measured" and "no datasheet for 'NVIDIA A10G'" in m.datasheet


@pytest.mark.parametrize("kwargs, error, match", [
    ({"precision": "fp8"}, ValueError, "precision must be one of"),
    ({"tokens_per_s": -1.0}, ValueError, "tokens_per_s must be a positive"),
    ({"flops_per_token": float("nan")}, ValueError, "flops_per_token must be a positive"),
    ({"measured_peak_flops": 0}, ValueError, "measured_peak_flops must be a positive finite number or None"),
    ({"gpu": 3}, TypeError, "gpu must be a GPU's name"),
    ({"label": ""}, ValueError, "label"),
    ({"device": "tpu"}, ValueError, "device"),
])
def test_bad_input_is_refused_clearly(kwargs, error, match):
    args = {"flops_per_token": FPT, "tokens_per_s": TOK_S, "precision": "float32", "measured_peak_flops": 1e12,
            "device": "cpu", **kwargs}
    with pytest.raises(error, match=match):
        course.gpt_mfu(**args)


def test_lesson_13_sets_every_mfu_beside_published_runs_through_the_helper():
    nb = json.loads((Path(__file__).resolve().parents[3] / "notebooks" / "13_transformers.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    assert not any("gl.transformer.mfu(" in c for c in code)        # every MFU now names its peak
    closing = next(c for c in code if "course.your_numbers(" in c)
    assert "final_mfu.rows(" in closing and "gpt2_small_train_mfu_of_datasheet_peak" in closing
    assert "measured_vs=" in closing
    assert any("course.gpt_mfu(" in c and "plain fp32" in c for c in code)
