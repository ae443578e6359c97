"""A lesson runs with what the machine has: every cell that uses TensorFlow, DALI, MLflow or ONNX Runtime runs
under a ``course.needs(...)`` answer for that package, and without the package the part is skipped in one line
(with its ``pip install``) while the rest of the notebook runs. Checked statically for every lesson, and by running
lesson 01 in a kernel where ``import tensorflow`` fails as on a PyTorch-only machine."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpulab import course
from gpulab.course.lesson import optional

ROOT = Path(__file__).resolve().parents[3]
NOTEBOOKS = [p for p in sorted((ROOT / "notebooks").glob("*.ipynb")) if not p.name.startswith(("08", "11"))]

# How a statement uses each optional package: imports, the course's and gpulab's calls that import it, and the
# names the lessons give TensorFlow's modules.
IMPORTS = {"tensorflow": ("tensorflow", "keras", "tf_keras"), "dali": ("nvidia.dali",), "mlflow": ("mlflow",),
           "onnx": ("onnx", "onnxruntime", "onnxscript"), "hta": ("hta",)}
CALLS = {
    "tensorflow": {"start_keras", "keras_cnn", "keras_step_times", "tf_dataset", "keras_ablation", "keras_changes",
                   "train_keras_recipe", "tf_limit_gpu_memory", "dali_tf_dataset", "mirrored_strategy"},
    "dali": {"dali_loader", "check_dali", "dali_tf_dataset"},
    "mlflow": {"track", "runs", "load_trace", "ui_commands", "check_tracked"},
    "onnx": {"onnx_runtime"},
    "hta": {"trace_breakdown"},
}
NAMES = {"tensorflow": {"tf", "keras", "ks"}}


def _code(cell: dict) -> str:
    src = "".join(cell.get("source", []))
    return "\n".join(line[:len(line) - len(line.lstrip())] + "pass" if line.lstrip().startswith(("%", "!")) else line
                     for line in src.split("\n"))


def _uses(node: ast.AST) -> set[str]:
    """The optional packages a statement uses."""
    found = set()
    for n in ast.walk(node):
        modules = ([a.name for a in n.names] if isinstance(n, ast.Import) else
                   [n.module or ""] if isinstance(n, ast.ImportFrom) else [])
        for package, roots in IMPORTS.items():
            if any(m == r or m.startswith(r + ".") for m in modules for r in roots):
                found.add(package)
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = ast.unparse(f.value) if isinstance(f, ast.Attribute) else ""
            for package, calls in CALLS.items():
                if name in calls and (package != "mlflow" or owner in ("gl", "gl.tracking", "course")):
                    found.add(package)
            if any(k.arg == "track" and not (isinstance(k.value, ast.Constant) and k.value.value is None)
                   for k in n.keywords):
                found.add("mlflow")
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            found |= {p for p, names in NAMES.items() if n.id in names}
    return found


def _flags(tree: ast.AST) -> dict[str, str]:
    """Names bound to ``course.needs("<package>", ...)``: name -> package."""
    out = {}
    for n in ast.walk(tree):
        if (isinstance(n, ast.Assign) and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "course.needs"
                and n.value.args and isinstance(n.value.args[0], ast.Constant)):
            out.update({t.id: n.value.args[0].value for t in n.targets if isinstance(t, ast.Name)})
    return out


def unguarded(path: Path) -> list[tuple[int, str, str]]:
    """(cell, package, statement) for each top-level statement that uses an optional package without naming a
    ``course.needs`` answer for it. The Colab install block and the CI-only reference solutions are exempt."""
    flags: dict[str, str] = {}
    problems = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "code" or "solution" in cell.get("metadata", {}).get("tags", []):
            continue
        tree = ast.parse(_code(cell))
        for stmt in tree.body:
            flags.update(_flags(stmt))
            if isinstance(stmt, ast.If) and "google.colab" in ast.unparse(stmt.test):
                continue
            named = {flags[n.id] for n in ast.walk(stmt) if isinstance(n, ast.Name) and n.id in flags}
            if isinstance(stmt, ast.Assign) and _flags(stmt):
                continue
            problems += [(i, p, ast.unparse(stmt).splitlines()[0][:90]) for p in sorted(_uses(stmt) - named)]
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_optional_package_cell_runs_under_course_needs(path):
    problems = unguarded(path)
    assert not problems, (f"{path.name}: statements using an optional package without a course.needs(...) answer "
                          f"(cell, package, statement): {problems}")


def test_the_static_check_finds_an_unguarded_cell(tmp_path):
    cells = [{"cell_type": "code", "metadata": {}, "source": src} for src in (
        "import tensorflow as tf", 'ok = course.needs("tensorflow", "part")\nif ok:\n    ks = course.start_keras()',
        "keras_model = ks.keras.Sequential()", 'x = gl.compiling.onnx_runtime(m, b)', "onnx_ok = 1")]
    nb = tmp_path / "nb.ipynb"
    nb.write_text(json.dumps({"cells": cells}))
    assert [(c, p) for c, p, _ in unguarded(nb)] == [(0, "tensorflow"), (2, "tensorflow"), (3, "onnx")]


def test_needs_says_in_one_line_what_is_skipped_and_how_to_install_it(monkeypatch):
    monkeypatch.setattr(optional, "_installed", lambda module: module != "tensorflow")
    part = course.needs("tensorflow", "section 4 (Keras)")
    assert not part and part.missing == ("tensorflow",)
    assert repr(part) == ("Skipping section 4 (Keras): TensorFlow is not installed (tensorflow not found); to run it: "
                          "pip install tensorflow (the 'gpulab[tensorflow]' extra), then restart the kernel.")
    assert "pip install onnx onnxscript onnxruntime" in repr(course.needs("onnx", "x")) or course.needs("onnx", "x")
    assert "\n" not in part._repr_html_() and "pip install tensorflow" in part._repr_html_()
    monkeypatch.setattr(optional, "_installed", lambda module: True)
    assert course.needs("dali", "section 6") and repr(course.needs("dali", "section 6")) == \
        "NVIDIA DALI is installed: section 6 runs."
    with pytest.raises(ValueError, match="'torch'"):
        course.needs("torch", "x")
    with pytest.raises(TypeError, match="part"):
        course.needs("mlflow", "")


def test_a_missing_parent_package_counts_as_missing(monkeypatch):
    import importlib.util

    def find_spec(name, *a):
        raise ModuleNotFoundError(f"No module named {name.split('.')[0]!r}")

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert course.needs("dali", "section 6").missing == ("nvidia.dali",)


# ------------------------------------------------------------------------------------------------------------
# a kernel without TensorFlow: the path finder no longer finds tensorflow or keras, as on a PyTorch-only machine
BLOCKER = textwrap.dedent('''
    import sys
    from importlib.machinery import PathFinder

    BLOCKED = ("tensorflow", "keras", "tf_keras")

    class _WithoutTensorFlow(PathFinder):
        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                return None
            return PathFinder.find_spec(name, path, target)

    sys.meta_path[:] = [_WithoutTensorFlow if f is PathFinder else f for f in sys.meta_path]
''')

RUNNER = textwrap.dedent('''
    import json, sys, nbformat
    from nbclient import NotebookClient
    nb = nbformat.read(sys.argv[1], as_version=4)
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            out.append(o.get("text", "") + "".join(str(v) for v in o.get("data", {}).values()))
    print(json.dumps(out))
''')


@pytest.mark.slow
def test_lesson_01_runs_without_tensorflow(tmp_path):
    pytest.importorskip("nbclient", reason="nbclient runs the notebook (the course's stack)")
    pytest.importorskip("nbformat", reason="nbformat reads the notebook (the course's stack)")
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {k: v for k, v in os.environ.items() if k != "GPULAB_SOLUTIONS"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    check = subprocess.run([sys.executable, "-c", "import importlib.util, gpulab\n"
                            "print(importlib.util.find_spec('tensorflow'))\nimport tensorflow"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert check.stdout.startswith("None") and "No module named 'tensorflow'" in check.stderr   # as if not installed
    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-c", RUNNER, str(ROOT / "notebooks" / "01_setup_verification.ipynb"),
                          str(tmp_path)], env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - t0
    assert run.returncode == 0, run.stderr[-3000:]
    outputs = json.loads(run.stdout.strip().splitlines()[-1])
    skipped = [o for o in outputs if "Skipping TensorFlow's part of this lesson: TensorFlow is not installed" in o]
    assert skipped and all("pip install tensorflow" in o for o in skipped)
    assert not any("Traceback" in o for o in outputs)
    print(f"lesson 01 without TensorFlow: {elapsed:.0f} s")
