"""course.attention_sweep: the written-out attention's memory grows as T^2 and SDPA's as T (measured, fitted), the
two agree on the result, and the table, fit and figure render."""
from __future__ import annotations

import matplotlib
import pytest
import torch

from gpulab.course.transformers.attention_sweep import AttentionPoint, AttentionSweep, attention_sweep, manual_attention

matplotlib.use("Agg")


def test_memory_grows_as_t_squared_written_out_and_linearly_with_sdpa():
    sweep = attention_sweep([128, 256, 512], batch=1, heads=2, head_dim=16, min_run_time=0.02)
    assert sweep.growth("manual") == pytest.approx(2.0, abs=0.25)
    assert sweep.growth("sdpa") == pytest.approx(1.0, abs=0.25)
    assert all(p.backend == "flash" for p in sweep.points)        # torch's CPU flash kernel for float32, causal
    text = repr(sweep)
    assert "T^" in text and "SDPA backend" in text and "float32 on cpu" in text
    assert list(sweep.to_dataframe().index) == [128, 256, 512]
    assert len(sweep.plot().axes) == 2


def test_forward_and_backward_keep_the_probabilities_written_out_and_o_of_t_with_sdpa():
    """What training pays: the written-out attention keeps its T x T probabilities for the backward (more than its
    forward alone peaks at), SDPA's fused kernel keeps O(T); the note says which was measured."""
    fwd = attention_sweep([128, 256, 512], batch=1, heads=2, head_dim=16, min_run_time=0.02)
    both = attention_sweep([128, 256, 512], batch=1, heads=2, head_dim=16, min_run_time=0.02, backward=True)
    assert both.growth("manual") == pytest.approx(2.0, abs=0.25) and both.growth("sdpa") == pytest.approx(1.0, abs=0.25)
    assert both.points[-1].manual_peak_bytes > fwd.points[-1].manual_peak_bytes
    assert "forward and backward" in repr(both) and "one forward pass without autograd" in repr(fwd)
    assert "backward=True" in repr(fwd)
    with pytest.raises(TypeError, match="backward must be True or False"):
        attention_sweep([128], backward="yes")


def test_written_out_attention_is_attention():
    q, k, v = (torch.randn(2, 3, 40, 8) for _ in range(3))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(manual_attention(q, k, v), ref, atol=1e-5)


def test_a_fit_needs_two_points_and_names_its_choices():
    one = AttentionSweep((AttentionPoint(64, 1e-3, 1e-4, 100, 10, "flash"),), 1, 1, 8, "float32", "cpu")
    assert one.growth() is None
    with pytest.raises(ValueError, match="which"):
        one.growth("both")
    with pytest.raises(TypeError, match="seq_lens"):
        attention_sweep("128")
    with pytest.raises(ValueError, match="seq_lens"):
        attention_sweep([0, 128])
