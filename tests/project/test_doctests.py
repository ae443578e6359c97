"""Every docstring example in gpulab runs on a CPU (the house rule: each public name's example runs).
Examples that need an optional package (DALI, TensorFlow, Numba) skip where it is absent (the lean compat venv)."""
from __future__ import annotations

import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import gpulab

MODULES = sorted(m.name for m in pkgutil.walk_packages(gpulab.__path__, "gpulab.")
                 if not m.name.startswith("gpulab.course.scripts."))
NEEDS = {"gpulab.course.data.dali.dali_loader": "nvidia.dali", "gpulab.course.data.dali.check_dali": "nvidia.dali",
         "gpulab.course.data.pipelines.tf_dataset": "tensorflow", "gpulab.kernels.backends.numba_backend": "numba",
         "gpulab.tracking": "mlflow", "gpulab.tracking.run": "mlflow", "gpulab.tracking.run.track": "mlflow",
         "gpulab.tracking.query": "mlflow", "gpulab.tracking.query.runs": "mlflow",
         "gpulab.tracking.query.load_trace": "mlflow"}


# examples that run Triton's interpreter as the course pins it (the compat venv's Triton 3.1 cannot: it refuses)
NEEDS_TRITON = {"gpulab.course.transformers.flash_attention": (3, 7),
                "gpulab.course.transformers.flash_attention.flash_attention": (3, 7)}


def _triton_older(version: tuple[int, int]) -> bool:
    if _absent("triton"):
        return True
    import triton
    return tuple(int(p) for p in triton.__version__.split(".")[:2]) < version


def _absent(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is None
    except ModuleNotFoundError:        # its parent package ("nvidia") is missing too
        return True


def test_every_module_is_collected():
    assert {"gpulab.telemetry.nvml", "gpulab.telemetry.gpu", "gpulab.system", "gpulab.memory"} <= set(MODULES)
    found = {t.name for m in ("gpulab.course.data.pipelines", "gpulab.course.data.dali", "gpulab.kernels.backends",
                              "gpulab.tracking", "gpulab.tracking.run", "gpulab.tracking.query")
             for t in doctest.DocTestFinder().find(importlib.import_module(m))}
    assert set(NEEDS) <= found


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    failed = []
    for test in doctest.DocTestFinder().find(module):
        if test.name in NEEDS and _absent(NEEDS[test.name]):
            continue
        if test.name in NEEDS_TRITON and _triton_older(NEEDS_TRITON[test.name]):
            continue
        if runner.run(test).failed:
            failed.append(test.name)
    assert not failed, f"docstring examples failed in {name}: {failed}"
