"""course.generation_speed: the cache's bytes are the counted ones, and the table renders (its timings are
printed in the lesson, not asserted)."""
from __future__ import annotations

import pytest
import torch

from gpulab.course.transformers.generation import generation_speed
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
