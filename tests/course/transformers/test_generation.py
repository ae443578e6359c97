"""course.generation_speed: the cache's bytes are the counted ones, the decode roofline is batch x bandwidth / the
bytes a step reads (worked out here by hand), and the table renders (its timings are printed in the lesson, not
asserted)."""
from __future__ import annotations

import pytest
import torch

import gpulab as gl
from gpulab.course.transformers.generation import decode_bytes_per_step, generation_speed
from gpulab.course.transformers.gpt import gpt
from gpulab.transformer import TransformerShape


def test_cache_bytes_match_the_count():
    torch.manual_seed(0)
    model = gpt(TransformerShape(layers=2, d_model=64, heads=4, seq_len=160, vocab=256))
    g = generation_speed(model, prompt_len=8, new_tokens=32, batches=(1, 4), repeats=1)
    for r in g.rows:
        assert r.cache_bytes == r.counted_bytes > 0
    assert g.cache_speedup(4) > 0 and g.row(1).step_latency_s > 0     # timings are printed, not asserted
    assert g.row(4).cache_bytes == 4 * g.row(1).cache_bytes
    assert "latency per token" in repr(g) and list(g.to_dataframe().index) == [1, 4]
    with pytest.raises(KeyError, match="batches"):
        g.row(3)


def test_bad_arguments_are_named():
    model = gpt(TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=256))
    with pytest.raises(TypeError, match="batches"):
        generation_speed(model, batches=4)
    with pytest.raises(ValueError, match="new_tokens"):
        generation_speed(model, new_tokens=0)
    with pytest.raises(ValueError, match="context"):
        generation_speed(model, prompt_len=30, new_tokens=10, batches=(1,))


def test_the_decode_roofline_is_the_bandwidth_over_the_bytes_a_step_reads():
    shape = TransformerShape(layers=2, d_model=64, heads=4, seq_len=160, vocab=256)
    torch.manual_seed(0)
    model = gpt(shape)
    # by hand: every weight once (the tied output layer once), plus K and V of the cache's mean length, 4 B each
    weights = 4 * shape.params
    per_token = 2 * shape.layers * shape.d_model * 4                   # K and V, every layer, fp32
    assert decode_bytes_per_step(model, 1, 8, 33, 4) == int(weights + (8 + 16) * per_token)
    assert decode_bytes_per_step(model, 4, 8, 33, 4) == int(weights + 4 * (8 + 16) * per_token)
    limits = gl.machine_limits("cpu", dtypes=["float32"], sizes=[128], copy_bytes=1 << 22, min_run_time=0.05)
    g = generation_speed(model, prompt_len=8, new_tokens=33, batches=(1, 4), repeats=1, limits=limits)
    for r in g.rows:
        assert r.bytes_per_step == decode_bytes_per_step(model, r.batch, 8, 33, 4)
        assert r.roofline_tokens_per_s == pytest.approx(r.batch * limits.bandwidth_for(r.bytes_per_step)
                                                        / r.bytes_per_step)
        assert 0 < r.roofline_share <= 1
    text = repr(g)
    assert "decode roofline" in text and "read per step" in text and "measured copy bandwidth" in text
    assert "decode roofline" not in repr(generation_speed(model, prompt_len=8, new_tokens=8, batches=(1,), repeats=1))
    with pytest.raises(TypeError, match="limits must be the gl.machine_limits"):
        generation_speed(model, prompt_len=8, new_tokens=8, batches=(1,), repeats=1, limits={"bandwidth": 1e9})
