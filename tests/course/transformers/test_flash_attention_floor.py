"""flash_attention on an older Triton: its interpreter (before 3.7) cannot loop to a runtime bound under NumPy 2.4,
and the call says so with the fix instead of failing inside the interpreter (the compat venv runs Triton 3.1)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import gpulab as gl
from gpulab import course
from gpulab.course.transformers import flash_attention as fa

gl.kernels.triton_backend("cpu")        # the interpreter, before any kernel is defined
import triton  # noqa: E402


def _numpy_refuses() -> bool:
    try:
        int(np.zeros(1))
        return False
    except TypeError:
        return True


@pytest.mark.skipif(not _numpy_refuses(), reason=f"NumPy {np.__version__} still converts one-element arrays")
def test_an_interpreter_older_than_3_7_is_refused_with_the_fix(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "3.1.0")
    q = torch.randn(1, 1, 20, 16)
    with pytest.raises(RuntimeError, match=r"Triton 3\.1\.0's interpreter .* NumPy .* upgrade Triton to 3\.7"):
        course.flash_attention(q, q, q)


def test_a_current_interpreter_is_let_through(monkeypatch):
    monkeypatch.setattr(triton, "__version__", "3.8.0")
    fa._interpreter_can_loop()


@pytest.mark.skipif(not _numpy_refuses(), reason=f"NumPy {np.__version__} still converts one-element arrays")
def test_the_lessons_check_says_it_cannot_run_here_instead_of_stopping_run_all(monkeypatch):
    """Lesson 13's check cell on a CPU with such a Triton (torch 2.5's 3.1 under NumPy 2.4): shown, not raised, with
    the reason and the fix; nothing about the learner's kernel is claimed."""
    monkeypatch.setattr(triton, "__version__", "3.1.0")
    shown = course.check_flash_attention(course.flash_attention, device="cpu")
    assert isinstance(shown, course.CannotRunHere)
    assert "not checked here" in repr(shown) and "upgrade Triton to 3.7" in repr(shown)
    assert "not checked here" in shown._repr_html_()
