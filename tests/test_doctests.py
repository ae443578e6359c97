"""Every docstring example in gpulab runs on a CPU (the house rule: each public name's example runs)."""
from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import gpulab

MODULES = sorted(m.name for m in pkgutil.walk_packages(gpulab.__path__, "gpulab.")
                 if not m.name.startswith("gpulab.scripts."))


def test_every_module_is_collected():
    assert {"gpulab.telemetry.nvml", "gpulab.telemetry.gpu", "gpulab.system", "gpulab.memory"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} docstring examples in {name} failed"
