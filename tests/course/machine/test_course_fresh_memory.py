"""Appendix A1's buffer-reuse challenge asks for part of the gap fresh memory opens on the learner's CPU, measured on
one thread just before it, not a fixed 2x (a CPU whose page faults cost less could never reach that)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpulab import course
from gpulab.course.machine.fresh_memory import ReuseTarget

A1 = Path(__file__).resolve().parents[3] / "notebooks" / "A1_measuring_on_a_shared_cpu.ipynb"


def test_the_target_is_part_of_the_measured_gap():
    assert ReuseTarget(2**26, clone_s=0.09, copy_s=0.03, share=0.5, noisy=False).target_speedup == 2.0
    assert ReuseTarget(2**26, clone_s=0.045, copy_s=0.03, share=0.5, noisy=False).target_speedup == 1.25
    assert ReuseTarget(2**26, clone_s=0.03, copy_s=0.03, share=0.5, noisy=False).target_speedup == 1.0
    assert ReuseTarget(2**26, clone_s=0.02, copy_s=0.03, share=0.5, noisy=False).target_speedup == 1.0  # never < 1
    assert "1.25x" in repr(ReuseTarget(2**26, 0.045, 0.03, 0.5, False))


def test_reuse_target_measures_on_one_thread_and_restores_the_threads():
    import torch

    before = torch.get_num_threads()
    t = course.reuse_target(8 * 2**20, min_run_time=0.1)
    assert torch.get_num_threads() == before
    assert t.clone_s > 0 and t.copy_s > 0 and t.target_speedup >= 1.0 and t.nbytes == 8 * 2**20
    for bad in ({"share": 0}, {"share": 1.5}, {"share": True}):
        with pytest.raises(ValueError):
            course.reuse_target(2**20, **bad)
    with pytest.raises(TypeError):
        course.reuse_target(2.5)


def test_a1s_challenge_takes_its_target_from_the_measurement():
    cells = ["".join(c["source"]) for c in json.loads(A1.read_text())["cells"] if c["cell_type"] == "code"]
    challenge = next(c for c in cells if 'course.challenge("reuse the output buffer"' in c)
    assert "speedup=reuse.target_speedup" in challenge and "speedup=2.0" not in challenge
    assert "gl.interleaved.threads(1)" in challenge
    assert any("course.reuse_target(" in c for c in cells[:cells.index(challenge)])
