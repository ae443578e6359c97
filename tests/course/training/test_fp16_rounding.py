"""Where fp16 rounds a value to zero: at or below 2^-25, half its smallest subnormal (round to nearest, ties to
even), as lesson 04 and the underflow report say."""
from __future__ import annotations

import torch

from gpulab import course
from gpulab.course.training.precision import FP16_ROUNDS_TO_ZERO, FP16_SMALLEST_SUBNORMAL


def test_the_threshold_is_what_torch_rounds_to_zero():
    assert FP16_ROUNDS_TO_ZERO == FP16_SMALLEST_SUBNORMAL / 2 == 2.0**-25
    values = torch.tensor([FP16_ROUNDS_TO_ZERO, FP16_ROUNDS_TO_ZERO * 0.99, FP16_ROUNDS_TO_ZERO * 1.01,
                           FP16_SMALLEST_SUBNORMAL * 0.75], dtype=torch.float32)
    assert values.half().float().tolist() == [0.0, 0.0, FP16_SMALLEST_SUBNORMAL, FP16_SMALLEST_SUBNORMAL]


def test_the_report_counts_what_rounds_to_zero():
    torch.manual_seed(0)
    r = course.gradient_underflow(course.models.mlp(hidden=64), course.models.example_batch("mlp", 8),
                                  loss_weight=1e-5)
    assert 0.0 < r.rounds_to_zero_fp16 <= r.below_fp16_subnormal <= 1.0
    values = torch.as_tensor(r.reference_abs)
    assert r.rounds_to_zero_fp16 == float((values <= FP16_ROUNDS_TO_ZERO).float().mean())
    assert "2^-25" in repr(r) and "round to 0" in repr(r)
