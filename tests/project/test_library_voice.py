"""The toolkit speaks as a library: its messages name the technique and link to its documentation, never a lesson
or the course's make targets; the course adds its own wording (``course.setup``'s banner)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

import gpulab as gl
from gpulab import course

ROOT = Path(__file__).resolve().parents[2]
# the course's own layers: its scaffolding, its published figures, its preflight over the notebooks
COURSE_SIDE = ("course", "figures", "preflight")
COURSE_WORDS = re.compile(r"\blessons?\b \d\d|\(lesson|\blessons? (need|run)|`make lab`|\b[CG]PU mode\b")


def _toolkit_strings():
    for path in sorted((ROOT / "gpulab").rglob("*.py")):
        rel = path.relative_to(ROOT / "gpulab")
        if rel.parts[0] in COURSE_SIDE:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                yield f"{rel}:{node.lineno}", node.value


def test_toolkit_messages_name_no_lesson():
    found = [(where, text[:90]) for where, text in _toolkit_strings() if COURSE_WORDS.search(text)]
    assert found == []


def test_setup_banner_is_the_toolkit_s_and_the_course_adds_its_mode():
    s = gl.setup()
    assert s.kind == "cpu" and s.banner.startswith("cpu: ") and "mode" not in s.banner and s.hardware in s.banner
    c = course.setup()
    assert c.banner == "CPU mode: sizes reduced; GPU figures shown from published sources"
    assert (c.device, c.kind, c.hardware) == (s.device, s.kind, s.hardware)


def test_fixes_link_to_the_technique_s_documentation():
    from gpulab._links import DOCS, see

    assert all(url.startswith("https://") for url in DOCS.values())
    report = gl.doctor()
    text = repr(report)
    assert "make lab" not in text and "the lessons" not in text
    try:
        see("no-such-topic")
    except ValueError as e:
        assert "no-such-topic" in str(e)
    else:  # pragma: no cover
        raise AssertionError("an unknown topic must be refused")
