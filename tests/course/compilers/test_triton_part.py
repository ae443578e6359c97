"""course.triton_part: lessons 11 and 13's Triton cells run on Triton 3.4 or newer; on older releases (PyTorch 2.5's
3.1: its interpreter fails inside a notebook, and kernel_resources cannot compile ahead of time) the lesson skips them
with one line saying what to install, and goes on."""
from __future__ import annotations

import pytest

from gpulab import course


@pytest.mark.parametrize("version,runs", [("3.4.0", True), ("3.8.0", True), ("4.0.1", True), ("3.3.1", False),
                                          ("3.1.0", False), ("3.4.0+git1234", True), (None, False)])
def test_the_part_runs_from_triton_3_4(version, runs):
    part = course.triton_part("section 3 (Triton)", version=version)
    assert bool(part) is runs and part.available is runs
    line = repr(part)
    if runs:
        assert line == f"Triton {version} is installed: section 3 (Triton) runs."
    elif version is None:
        assert "Triton is not installed" in line and "pip install 'triton>=3.4'" in line
    else:
        assert f"Triton {version} is older than 3.4" in line and "torch>=2.8" in line
    assert "<div" in part._repr_html_()


def test_the_installed_triton_is_read_without_importing_it():
    from importlib import metadata

    try:
        installed = metadata.version("triton")
    except metadata.PackageNotFoundError:
        installed = None
    assert course.triton_part("x").version == installed


@pytest.mark.parametrize("kw,err", [(dict(part=""), TypeError), (dict(part=3), TypeError),
                                    (dict(part="x", version=3.4), TypeError)])
def test_bad_arguments_are_refused(kw, err):
    with pytest.raises(err):
        course.triton_part(**kw)
