"""Every notebook in notebooks/ runs through a real JupyterLab UI (Run All in headless Chromium).

Plus self-tests of the checker: a deliberately broken notebook must be reported as failing, and a
figure updated in place must be told apart from figures appended one after another.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .jupyterlab import FIXTURES_DIR, NotebookResult, assert_live_figure_updates, course_notebooks

RunUI = Callable[[str], NotebookResult]


NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def live_figure_cells(name: str) -> list[int]:
    """Indices of the cells tagged ``live-figure`` (a gl.Monitor(live=True) drawing in place)."""
    path = NOTEBOOKS / name
    if not path.is_file():
        return []
    cells = json.loads(path.read_text())["cells"]
    return [i for i, c in enumerate(cells) if "live-figure" in c.get("metadata", {}).get("tags", [])]


@pytest.mark.parametrize("name", course_notebooks(), ids=lambda name: name)
def test_notebook_runs_in_jupyterlab(name: str, run_ui: RunUI, page: Any) -> None:
    """Run All finishes, every code cell has an execution number, no error output, figures drawn,
    and every live figure was updated in place."""
    result = run_ui(name)
    for warning in result.warnings:  # plain stderr warnings: shown in pytest's warnings summary
        warnings.warn(f"{name}: {warning}", UserWarning, stacklevel=1)
    assert result.ok, result.summary()
    assert result.screenshot is not None and result.screenshot.is_file()
    for index in live_figure_cells(name):
        assert_live_figure_updates(page, cell_index=index, min_updates=3)


def test_broken_notebook_is_reported_as_failing(run_ui: RunUI) -> None:
    """The same check, on a notebook that raises, says failure and names the error."""
    result = run_ui(f"{FIXTURES_DIR}/broken.ipynb")
    assert not result.ok, result.summary()
    assert any("ValueError: deliberately broken" in failure for failure in result.failures), result.summary()
    # Run All stops at the error: the cell after it is left without an execution number.
    assert any(failure.startswith("cell 3: no execution number") for failure in result.failures), result.summary()
    executed = [cell.index for cell in result.cells if cell.execution_count is not None]
    assert executed == [1, 2], result.summary()
    assert result.screenshot is not None and result.screenshot.is_file()


def test_live_figure_is_updated_in_place(run_ui: RunUI, page: Any) -> None:
    """One figure updated via display(fig, display_id=True) + handle.update(fig) passes the
    live-figure check; figures appended with display(fig) in a loop do not."""
    result = run_ui(f"{FIXTURES_DIR}/live.ipynb")
    assert result.ok, result.summary()
    assert_live_figure_updates(page, cell_index=1)
    with pytest.raises(AssertionError, match="images at once"):
        assert_live_figure_updates(page, cell_index=2)


def test_ci_deadline_leaves_out_only_what_would_not_finish(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under CI's deadline a notebook runs while the time left covers the longest one so far; past it, it is skipped
    with the figures; without the variable every notebook runs; a value that is not a time is refused by name."""
    from .conftest import DEADLINE_ENV, over_ci_deadline

    done = [NotebookResult("a.ipynb", total_seconds=40.0), NotebookResult("b.ipynb", total_seconds=95.0)]
    monkeypatch.delenv(DEADLINE_ENV, raising=False)
    assert over_ci_deadline(done, now=1e12) is None
    monkeypatch.setenv(DEADLINE_ENV, "1000")
    assert over_ci_deadline(done, now=900.0) is None                       # 100 s left, the longest took 95 s
    why = over_ci_deadline(done, now=950.0)
    assert why is not None and "50 s left" in why and "took 95 s" in why and DEADLINE_ENV in why
    assert over_ci_deadline([], now=930.0) is None and over_ci_deadline([], now=950.0) is not None   # 60 s first
    monkeypatch.setenv(DEADLINE_ENV, "tomorrow")
    with pytest.raises(ValueError, match="'tomorrow'"):
        over_ci_deadline(done)
