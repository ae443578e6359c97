"""What every lesson promises its learner (issue 15): Markdown that is true on every device, exercises whose
reference solution runs only in CI (hidden in JupyterLab and on Colab), and a measured challenge."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))
# Phrasings that state one machine's result as a fact (found by the reviews of lessons 00-09).
DEVICE_FACTS = re.compile(r"\b(2|two) cores\b|this machine has|no GPU to\b|on this machine there is|here compute runs|"
                          r"on this cpu\b|input-bound\s*(→|->)\s*launch-bound\s*(→|->)\s*compute-bound", re.I)
# A measured challenge (a code cell tagged 'challenge'): speed against a baseline, a memory budget, or
# (multi-GPU) all-reduces counted.
CHALLENGES = ("course.challenge(", "course.fit_challenge(", "course.check_no_sync(", "gl.memory_budget(",
              "course.fused_challenge(", "course.recipe_challenge(", "course.gpt_challenge(")
SOLUTION_TITLE = re.compile(r'^#@title .*\{ *display-mode: *"form" *\}')


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _src(cell: dict) -> str:
    return "".join(cell.get("source", []))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_markdown_states_no_one_machine_fact(path):
    hits = [(i, m.group(0)) for i, c in enumerate(_cells(path)) if c["cell_type"] == "markdown"
            for m in DEVICE_FACTS.finditer(_src(c))]
    assert not hits, f"{path.name}: Markdown true on one machine only (cell, phrase): {hits}"


def test_the_scan_catches_the_phrasings_it_should():
    for text in ("This machine has 2 cores.", "Here compute runs on the CPU", "On this CPU, bf16 is slow",
                 "input-bound → launch-bound → compute-bound"):
        assert DEVICE_FACTS.search(text), text
    for text in ("On a CPU the copy is a memcpy; on a GPU it crosses PCIe.", "your machine's cores"):
        assert not DEVICE_FACTS.search(text), text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_exercises_are_answered_only_in_ci_and_one_challenge_is_measured(path):
    cells = _cells(path)
    solutions = [c for c in cells if "solution" in c.get("metadata", {}).get("tags", [])]
    assert solutions, f"{path.name}: no reference-solution cell (tag 'solution')"
    for c in solutions:
        meta, src = c["metadata"], _src(c)
        assert meta.get("jupyter", {}).get("source_hidden") is True, f"{path.name}: solution not hidden in JupyterLab"
        assert meta.get("cellView") == "form" and SOLUTION_TITLE.match(src), \
            f"{path.name}: solution not hidden on Colab (cellView 'form' and a '#@title ... display-mode: \"form\"' line)"
        assert "if course.solutions():" in src, f"{path.name}: a solution that runs on the learner's Run All:\n{src}"
    challenges = [_src(c) for c in cells if c["cell_type"] == "code" and "challenge" in c["metadata"].get("tags", [])]
    assert any(call in src for src in challenges for call in CHALLENGES), \
        f"{path.name}: no measured challenge (a cell tagged 'challenge' that measures with one of {CHALLENGES})"


def _asserts(src: str) -> list[str]:
    """The ``assert`` statements of a code cell (IPython's ``%`` and ``!`` lines read as ``pass``)."""
    import ast

    lines = [(line[: len(line) - len(line.lstrip())] + "pass") if line.lstrip().startswith(("%", "!")) else line
             for line in src.splitlines()]
    return [ast.unparse(n.test) for n in ast.walk(ast.parse("\n".join(lines))) if isinstance(n, ast.Assert)]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_bare_assert_in_a_lesson_checks_a_computed_result_never_a_measurement(path):
    """A measurement can miss on a busy machine (a shared Colab host): a lesson reports it (course.narrate,
    course.check, a challenge) instead of stopping the learner's Run All. A bare ``assert`` is kept for results that
    are right or wrong whatever the load: a kernel's check (``.ok``), a compiled step's equality (``.same``)."""
    bare = [(i, test) for i, c in enumerate(_cells(path)) if c["cell_type"] == "code"
            for test in _asserts(_src(c)) if not re.search(r"\.(ok|same)\b", test)]
    assert not bare, f"{path.name}: asserts on what the machine measured stop Run All (cell, test): {bare}"


def test_the_assert_scan_reads_cells_as_the_lessons_write_them():
    assert _asserts('%pip install x\nif True:\n    %time f()\nassert fast < 0.5, "slow"') == ["fast < 0.5"]
    assert _asserts("assert mm_check.ok, mm_check") == ["mm_check.ok"]
