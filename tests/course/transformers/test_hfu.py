"""Lesson 13's hardware FLOPs: a checkpointed step counted by FlopCounterMode holds each block's forward again, up to
the last tensor the backward needs (non-reentrant checkpointing's early stop), as exercise 1b asks the learner."""
from __future__ import annotations

import pytest

pytest.importorskip("torch")

from gpulab import course  # noqa: E402
from gpulab.transformer import TransformerShape  # noqa: E402


@pytest.mark.parametrize("shape", [TransformerShape(layers=2, d_model=64, heads=4, seq_len=64, vocab=256),
                                   TransformerShape(layers=1, d_model=96, heads=3, seq_len=128, vocab=128)])
def test_the_checkpointed_count_is_the_model_count_plus_the_forward_run_again_but_its_last_projection(shape):
    L, d, T = shape.layers, shape.d_model, shape.seq_len
    plain = course.counted_flops_per_token(shape)
    checkpointed = course.counted_flops_per_token(shape, checkpoint=True)
    assert plain == pytest.approx(shape.flops_per_token(), rel=0.02)
    assert checkpointed == pytest.approx(shape.flops_per_token() + L * (16 * d * d + 4 * d * T), rel=0.02)
    # the exercise's check can fail: recomputing every weight (8N + 16LdT) is off by more than its 3%
    assert abs((8 * shape.params_for_flops + 16 * L * d * T) / checkpointed - 1) > 0.03


def test_counted_flops_per_token_refuses_bad_input():
    shape = TransformerShape(layers=1, d_model=32, heads=2, seq_len=16, vocab=64)
    with pytest.raises(TypeError):
        course.counted_flops_per_token("gpt2")
    with pytest.raises((TypeError, ValueError), match="checkpoint"):
        course.counted_flops_per_token(shape, checkpoint="yes")
    with pytest.raises((TypeError, ValueError), match="batch"):
        course.counted_flops_per_token(shape, batch=0)
