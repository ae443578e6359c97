"""The unigram floor on the course text's held-out part: worked out here from the raw bytes, shown as a table, and
named by the GPT ablation when its baseline has not learned more than byte frequencies."""
from __future__ import annotations

import math
from collections import Counter

import pytest

from gpulab import course
from gpulab.course.transformers.heldout import split_text
from gpulab.course.transformers.lever_ablation import _ablation_notes


def test_the_unigram_floor_is_the_training_texts_byte_frequencies_on_the_held_out_tenth():
    tokens = course.text_tokens()
    train, held = split_text(tokens)
    assert len(train) + len(held) == len(tokens) and len(held) == len(tokens) - int(len(tokens) * 0.9)
    counts = Counter(train.tolist())
    total = len(train) + 256                                  # add-one smoothing over the 256 byte values
    expected = -sum(math.log((counts.get(b, 0) + 1) / total) for b in held.tolist()) / len(held)
    top = max(range(256), key=lambda b: counts.get(b, 0))
    u = course.unigram_baseline()
    assert u.top == top and u.tokens == len(held)
    assert u.loss == pytest.approx(expected, rel=1e-9) and u.loss < math.log(256)
    assert u.accuracy == pytest.approx(held.tolist().count(top) / len(held))
    text, page = repr(u), u._repr_html_()
    assert f"{u.accuracy:.1%}" in text and f"{u.loss:.2f}" in text and "ln 256 = 5.55" in text
    assert "<table" in page and "Unigram baseline" in page


def test_beating_the_floor_takes_the_margin():
    u = course.unigram_baseline()
    assert not u.beaten_by(u.accuracy) and not u.beaten_by(u.accuracy + 0.01)
    assert u.beaten_by(u.accuracy + 0.02 + 1e-9) and u.beaten_by(u.accuracy, margin=0.0)


def test_the_ablation_says_when_its_baseline_learned_nothing_beyond_byte_frequencies():
    u = course.unigram_baseline()
    stuck = _ablation_notes(24_576, u.accuracy)
    assert len(stuck) == 2 and "cannot tell a working lever from a broken one" in stuck[1] and "24,576" in stuck[1]
    learned = _ablation_notes(24_576, u.accuracy + 0.1)
    assert len(learned) == 1 and f"byte frequencies alone: {u.accuracy:.1%}" in learned[0]
    assert len(_ablation_notes(24_576, None)) == 1
