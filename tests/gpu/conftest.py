"""The GPU conformance tests: each runs a real GPU path (never a fake) and asserts its behaviour.

Every test here is marked ``gpu`` and skipped, with the reason, where no CUDA GPU is usable, so CPU CI stays
green. ``python -m gpulab check`` (and ``make gpu-check``) runs them on a GPU and collects the figures they
record (``figure`` below) into its report.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest


def _cuda_reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "torch is not installed (pip install torch)"
    if not torch.cuda.is_available():
        return "no usable CUDA GPU (torch.cuda.is_available() is False)"
    return None


def pytest_configure(config):
    """Under ``GPULAB_AS=t4`` (``python -m gpulab check --as t4``) the tests run as the rehearsed GPU: its memory
    cap, fp16 instead of bf16, no TF32, its attention kernels (:mod:`gpulab.rehearsal`)."""
    if _cuda_reason() is None:
        from gpulab import rehearsal

        rehearsal.apply()


def _rehearsal_label() -> str | None:
    from gpulab import rehearsal

    if rehearsal.active() is None or _cuda_reason() is not None:
        return None
    import torch

    return rehearsal.label(torch.cuda.get_device_name(torch.cuda.current_device()))


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    reason = None
    for item in items:
        if here not in Path(str(item.fspath)).parents:
            continue
        item.add_marker(pytest.mark.gpu)
        if reason is None:
            reason = _cuda_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_runtest_logreport(report):
    """Each test's outcome as it ends, one JSON line in ``$GPULAB_CHECK_OUTCOMES`` (the check keeps what finished
    when it is stopped before pytest writes its own report)."""
    path = os.environ.get("GPULAB_CHECK_OUTCOMES")
    if not path or not (report.when == "call" or (report.when == "setup" and not report.passed)):
        return
    status = "passed" if report.passed else "skipped" if report.skipped else "failed"
    detail = ""
    if report.skipped and isinstance(report.longrepr, tuple):
        detail = str(report.longrepr[2])
    elif report.failed:
        detail = str(getattr(report.longrepr, "reprcrash", None) and report.longrepr.reprcrash.message
                     or report.longreprtext)[:500]
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"name": report.nodeid, "status": status, "seconds": round(report.duration, 2),
                            "detail": detail}) + "\n")


@pytest.fixture
def figure(request):
    """Record a figure a learner will see (``figure("h2d_pinned", 24.1, "GB/s", datasheet=32.0, note=...)``):
    appended as one JSON line to ``$GPULAB_CHECK_FIGURES`` when ``python -m gpulab check`` runs the tests, and
    returned either way."""
    def record(name: str, value: float | None, unit: str, *, datasheet: float | None = None, note: str = "") -> dict:
        rehearsed = _rehearsal_label()
        note = "; ".join(filter(None, [rehearsed, note]))
        row = {"name": name, "value": value, "unit": unit, "datasheet": datasheet, "note": note,
               "test": request.node.nodeid, "at": time.time()}
        path = os.environ.get("GPULAB_CHECK_FIGURES")
        if path:
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row, default=str) + "\n")
        return row

    return record


@pytest.fixture
def cuda():
    """The CUDA device, with the caching allocator emptied after the test (the next one starts clean)."""
    import torch

    yield torch.device("cuda", torch.cuda.current_device())
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


@pytest.fixture
def spec():
    """The datasheet figures (:class:`gpulab.reference.GPUSpec`) of the current CUDA device, or None when
    ``gl.gpu_spec`` does not know the card (a figure is then recorded without its datasheet peak)."""
    import torch

    import gpulab as gl

    try:
        return gl.gpu_spec(torch.cuda.get_device_name(torch.cuda.current_device()))
    except KeyError:
        return None
