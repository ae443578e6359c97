"""gpulab.course.training.oom_fixes: lesson 09's fix -> training settings map and the ladder built from a report."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path
from types import SimpleNamespace as Fix

import pytest

from gpulab.course.training.oom_fixes import (ACCUMULATION, GRADIENT_CHECKPOINTING, MIXED_PRECISION, fix_settings,
                                     ladder_rungs)


def test_fix_names_are_the_ones_explain_oom_gives():
    import gpulab as gl

    here = Path(inspect.getsourcefile(sys.modules[gl.explain_oom.__module__])).parent   # its package's modules
    source = "\n".join(p.read_text() for p in here.glob("*.py"))
    for name in (ACCUMULATION, MIXED_PRECISION, GRADIENT_CHECKPOINTING):
        assert f'Fix("{name}"' in source, f"explain_oom no longer names a fix {name!r}"


def test_fix_settings_map():
    s = fix_settings("bf16")
    assert s == {ACCUMULATION: {"accumulation_steps": 4}, MIXED_PRECISION: {"precision": "bf16"},
                 GRADIENT_CHECKPOINTING: {"checkpoint_segments": 4}}
    assert fix_settings("fp16", accumulation_steps=8, checkpoint_segments=3)[ACCUMULATION] == {"accumulation_steps": 8}
    s[ACCUMULATION]["accumulation_steps"] = 99                  # a new dict every call
    assert fix_settings("bf16")[ACCUMULATION] == {"accumulation_steps": 4}
    with pytest.raises(ValueError, match="'fp32'"):
        fix_settings("fp32")
    with pytest.raises(ValueError, match="accumulation_steps"):
        fix_settings("bf16", accumulation_steps=1)
    with pytest.raises(TypeError, match="checkpoint_segments"):
        fix_settings("bf16", checkpoint_segments=2.0)


def test_ladder_stacks_applicable_fixes_in_report_order():
    fixes = [Fix(name="zero_grad(set_to_none=True)", applies=False),
             Fix(name=MIXED_PRECISION, applies=True),
             Fix(name=ACCUMULATION, applies=False),                # does not apply: no rung
             Fix(name="more GPUs: shard with FSDP", applies=True),  # applies, but no training setting
             Fix(name=GRADIENT_CHECKPOINTING, applies=True)]
    rungs = ladder_rungs(fixes, fix_settings("fp16"))
    assert rungs == {"baseline": {},
                     f"+ {MIXED_PRECISION}": {"precision": "fp16"},
                     f"+ {GRADIENT_CHECKPOINTING}": {"precision": "fp16", "checkpoint_segments": 4}}
    assert list(rungs) == ["baseline", f"+ {MIXED_PRECISION}", f"+ {GRADIENT_CHECKPOINTING}"]
    rungs[f"+ {MIXED_PRECISION}"]["precision"] = "bf16"       # rungs are independent copies
    assert rungs[f"+ {GRADIENT_CHECKPOINTING}"]["precision"] == "fp16"


def test_ladder_rejects_things_that_are_not_fixes():
    with pytest.raises(TypeError, match="applies"):
        ladder_rungs([Fix(name=ACCUMULATION, applies="yes")], fix_settings("bf16"))
    with pytest.raises(TypeError, match="name"):
        ladder_rungs(["gradient checkpointing"], fix_settings("bf16"))
    with pytest.raises(TypeError, match="settings"):
        ladder_rungs([], [("a", {})])
