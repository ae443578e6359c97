"""The house rules the package's shape promises (ARCHITECTURE.md): a small documented face, the course's
scaffolding beside the toolkit and never below it, no import circles, no oversized modules, and the old
top-level names still working for one release."""
from __future__ import annotations

import ast
import importlib
import inspect
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gpulab
from gpulab._deprecated import MOVED, new_place

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "gpulab"
MAX_LINES = 520          # "no module over ~500 lines"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every gpulab module a file imports, at the top or inside functions, relative or absolute."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.startswith("gpulab"):
                subs = {f"{target}.{a.name}" for a in node.names
                        if (PKG.parent / f"{target}.{a.name}".replace(".", "/")).with_suffix(".py").exists()
                        or (PKG.parent / f"{target}.{a.name}".replace(".", "/") / "__init__.py").exists()}
                # "from . import nvml" imports the submodule (and runs the package, already running)
                out.update(subs if subs and len(subs) == len(node.names) else subs | {target})
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("gpulab"))
    return out - {name}


GRAPH = {_module_name(p): _imports(p) for p in sorted(PKG.rglob("*.py"))}


def test_the_face_is_small_and_every_name_is_documented_with_an_example():
    assert len(gpulab.__all__) <= 40, f"{len(gpulab.__all__)} top-level names: the toolkit's face is at most 40"
    grouped = [n for _, names in gpulab.GROUPS for n in names]
    assert sorted(grouped) == sorted(set(gpulab.__all__) - {"__version__"}), "every name of the face in one group"
    missing = []
    for name in gpulab.__all__:
        obj = getattr(gpulab, name)
        if isinstance(obj, (int, str)):
            continue
        doc = inspect.getdoc(obj) or ""
        assert doc, f"gpulab.{name} has no docstring"
        module = obj.__module__
        docs = [inspect.getdoc(sys.modules[m]) or "" for m in (module, module.rsplit(".", 1)[0])]
        # a function shows a call; a result class is shown by the example of the function that makes it
        shown = f"gl.{name}(" if not inspect.isclass(obj) else ">>>"
        if not (">>>" in doc or any(shown in d and ">>>" in d for d in docs)):
            missing.append(name)
    assert not missing, f"no runnable example in the docstring, its module's or its package's: {missing}"


def test_no_module_is_oversized():
    big = {str(p.relative_to(ROOT)): n for p in PKG.rglob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"split these modules (over {MAX_LINES} lines): {big}"


def test_no_import_circle():
    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for nxt in GRAPH.get(todo.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    # the package root re-exports everything, so only circles between the modules below it count
    circles = sorted(m for m in GRAPH if m != "gpulab" and m in reach(m) - {"gpulab"} and "gpulab" not in GRAPH[m])
    assert not circles, f"import circles through: {circles}"


def test_the_toolkit_never_imports_the_course():
    offenders = {m: sorted(t for t in targets if t.startswith("gpulab.course"))
                 for m, targets in GRAPH.items() if not m.startswith("gpulab.course")}
    offenders = {m: t for m, t in offenders.items() if t}
    assert offenders == {}, f"the toolkit imports the course's scaffolding: {offenders}"
    # ... nor at run time: importing gpulab leaves the course unloaded
    code = "import sys, gpulab; print(sorted(m for m in sys.modules if m.startswith('gpulab.course')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


def test_planted_circle_and_upward_import_are_caught(tmp_path):
    """The graph scan sees relative imports inside functions (what a circle usually hides behind)."""
    assert {"gpulab.system", "gpulab._check"} <= _imports(PKG / "timing.py")
    fake = tmp_path / "gpulab" / "x.py"
    fake.parent.mkdir()
    fake.write_text("def f():\n    from .course.lesson import models\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert _imports(fake) == {"gpulab.course.lesson.models"}
    finally:
        ROOT = saved


# the course's parts, each above the ones it may import (ARCHITECTURE.md): lesson/ at the bottom; a part imports
# lesson/ and parts of a lower rank, never one of its own rank or above
COURSE_RANKS = {"lesson": 0, "machine": 1, "training": 1, "data": 1, "profiling": 1, "distributed": 1, "compilers": 1,
                "capstone": 2, "transformers": 3, "scripts": 4}


def _course_part(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["gpulab", "course"] else None


def _course_upward(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    bad = {}
    for m, targets in graph.items():
        mine = _course_part(m)
        if mine is None:
            continue
        up = sorted(t for t in targets if (other := _course_part(t)) is not None and other != mine
                    and COURSE_RANKS[other] >= COURSE_RANKS[mine])
        if up:
            bad[m] = up
    return bad


def test_the_course_is_a_map_of_its_parts_and_imports_only_go_down():
    course = PKG / "course"
    top = sorted(p.name for p in course.iterdir() if p.name != "__pycache__")
    assert top == sorted(["__init__.py", *COURSE_RANKS]), f"gpulab/course holds only its parts: {top}"
    for part in COURSE_RANKS:
        doc = ast.get_docstring(ast.parse((course / part / "__init__.py").read_text())) or ""
        assert doc and ("lesson" in doc.lower() or part == "scripts"), f"course/{part} says which lessons it serves"
    assert _course_upward(GRAPH) == {}
    planted = {"gpulab.course.lesson.checks": {"gpulab.course.capstone.digits"},
               "gpulab.course.machine.tf32": {"gpulab.course.training.precision"},
               "gpulab.course.capstone.recipe": {"gpulab.course.training.batching", "gpulab.course.lesson.loop"}}
    assert _course_upward(planted) == {"gpulab.course.lesson.checks": ["gpulab.course.capstone.digits"],
                                       "gpulab.course.machine.tf32": ["gpulab.course.training.precision"]}


@pytest.mark.parametrize("name", sorted(MOVED))
def test_every_moved_name_still_works_and_says_where_it_went(name):
    import gpulab._deprecated as dep

    dep._warned.discard(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        obj = getattr(gpulab, name)
    module, attr = new_place(name).rsplit(".", 1)
    assert obj is getattr(importlib.import_module(module), attr)
    assert [w.category for w in caught] == [DeprecationWarning]
    assert new_place(name) in str(caught[0].message)


def test_moved_names_are_not_on_the_face_and_unknown_names_fail_clearly():
    assert not set(MOVED) & set(gpulab.__all__)
    added_since_0_1 = {"device_query"}                     # new names on the face, not part of 0.1's count
    assert added_since_0_1 <= set(gpulab.__all__)
    # gpulab 0.1's names: moved + kept + the distributed module
    assert len(MOVED) + len(set(gpulab.__all__) - added_since_0_1) + 1 == 167
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        gpulab.not_a_name  # noqa: B018
    with pytest.raises(KeyError, match="not a moved gpulab name"):
        new_place("benchmark")


def test_paths_derived_from_module_files_point_at_the_checkout(monkeypatch):
    """Modules that moved one folder down must still find the checkout: the data folder, and the folder put on
    the PYTHONPATH of torchrun's ranks and of the Keras timing process."""
    from gpulab.course.data.images import data_dir

    monkeypatch.delenv("GPULAB_DATA", raising=False)
    assert data_dir() == ROOT / "data"
    for rel in ("gpulab/distributed/torchrun.py", "gpulab/course/training/precision.py"):
        src = (ROOT / rel).read_text()
        depth = len(Path(rel).parts) - 1            # folders between the file and the checkout
        assert f"Path(__file__).resolve().parents[{depth}]" in src, f"{rel} must put {ROOT} on the child's path"
