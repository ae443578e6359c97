"""Activation memory of the course's GPT, measured: one layer's bytes fit the block's own count (no dropout: 32 s b h
+ 2 a s^2 b per 16-bit value, doubled in fp32) written out, and lose the s^2 term through SDPA; bad points named."""
from __future__ import annotations

import pytest
import torch

from gpulab import course
from gpulab.transformer import TransformerShape

SHAPE = TransformerShape(layers=2, d_model=64, heads=4, seq_len=128, vocab=256)
POINTS = [(1, 32), (2, 32), (1, 64), (2, 128)]


def test_the_written_out_block_keeps_its_count():
    state = torch.get_rng_state()
    am = course.activation_memory(SHAPE, POINTS, manual_attention=True)
    assert torch.equal(torch.get_rng_state(), state)                      # weights drawn from a generator of its own
    assert am.value_bytes == 4 and am.expected == (64.0, 4.0)
    assert am.alpha == pytest.approx(64, abs=1.5) and am.beta == pytest.approx(4, abs=0.1)
    for p in am.points:
        assert p.fitted_bytes == pytest.approx(p.kept_bytes, rel=0.02)
        assert p.korthikanti_bytes == SHAPE.layers * (34 * p.tokens * p.batch * 64 + 5 * 4 * p.tokens ** 2 * p.batch)
    share = am.score_share(64)                               # 4·4·64 of (64·64 + 4·4·64) bytes per token
    assert share == pytest.approx(4 * 4 * 64 / (am.alpha * 64 + 4 * 4 * 64), rel=0.03) and 0 < share < 1
    text = repr(am)
    assert "fit per layer" in text and "34 s b h + 5 a s^2 b" in text and "attention written out" in text


def test_a_fused_kernel_keeps_no_scores():
    am = course.activation_memory(SHAPE, POINTS)
    assert am.beta == pytest.approx(0, abs=0.1) and am.alpha == pytest.approx(64, abs=4) and am.expected[1] == 0.0
    assert "fused attention: no s^2 term" in repr(am)


@pytest.mark.parametrize("kw,kind,match", [
    (dict(points=[(1, 32), (2, 32)]), TypeError, "points must be 3 or more"),
    (dict(points=[(1, 32), (2, 32), (1, "64")]), TypeError, "points must be 3 or more"),
    (dict(points=[(1, 32), (2, 32), (4, 32)]), ValueError, "two token counts or more"),
    (dict(points=[(1, 32), (2, 64), (1, 512)]), ValueError, "past the shape's context of 128"),
    (dict(manual_attention="yes"), TypeError, "manual_attention must be True or False"),
])
def test_bad_points_are_named(kw, kind, match):
    with pytest.raises(kind, match=match):
        course.activation_memory(SHAPE, **kw)
    with pytest.raises(ValueError, match="layers must be 2 or more"):
        course.activation_memory(TransformerShape(layers=1, d_model=64, heads=4, seq_len=128, vocab=256), POINTS)
