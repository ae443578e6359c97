"""``tools/course.py`` (the checker of the notebooks, the README and the pins) loaded from its path under a name of
its own, so it never meets ``tests/course`` (the course's tests) or ``gpulab.course`` on ``sys.path``."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

PATH = Path(__file__).resolve().parents[2] / "tools" / "course.py"
NAME = "gpulab_tools_course"


def load() -> ModuleType:
    """The tool's module, loaded once per process."""
    if NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(NAME, PATH)
        module = importlib.util.module_from_spec(spec)
        sys.modules[NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[NAME]
