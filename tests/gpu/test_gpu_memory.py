"""Lesson 09 on CUDA: a real out-of-memory error on a capped allocator, parsed and explained by gl.explain_oom,
and gl.memory.reconcile_memory's allocator figures against NVML's."""
from __future__ import annotations

import pytest

import gpulab as gl
from gpulab import course

HEADROOM = 160 * gl.MiB       # what the capped allocator may add to what it holds already


def test_a_capped_card_raises_a_real_oom_that_explain_oom_parses_and_explains(cuda, figure):
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    total = torch.cuda.get_device_properties(cuda).total_memory
    base = int(torch.cuda.memory_allocated(cuda))          # tensors other code keeps alive (inside the cap too)
    cap = int(torch.cuda.memory_reserved(cuda)) + HEADROOM
    error = model = optimizer = batch = None
    try:
        torch.cuda.set_per_process_memory_fraction(cap / total, cuda)
        torch.manual_seed(0)
        model = course.models.mlp(hidden=2048, layers=2).to(cuda)                    # ~23 MB of weights
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        batch = course.models.example_batch("mlp", 16384, device=cuda)               # ~51 MB of images
        course.train_step(model, optimizer, batch)       # 2 x 134 MB of activations: more than the cap leaves
    except torch.OutOfMemoryError as e:
        error = e
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, cuda)
    try:
        assert error is not None, (f"a training step needing well over {HEADROOM >> 20} MiB ran within an allocator "
                                   f"capped at {cap >> 20} MiB: set_per_process_memory_fraction did not cap it")
        text = str(error)
        msg = gl.memory.parse_oom_message(text)
        assert msg is not None and not msg.simulated, f"not parsed as a CUDA out-of-memory message: {text[:300]}"
        assert msg.requested_bytes and msg.requested_bytes > 0, f"no requested size parsed from: {text[:300]}"
        assert msg.free_bytes is not None and msg.free_bytes > 0, f"no free memory parsed from: {text[:300]}"
        assert msg.capacity_bytes == pytest.approx(total, rel=0.01), (
            f"capacity parsed as {msg.capacity_bytes}, the card has {total} bytes: {text[:300]}")
        allowed = course.allowed_bytes(text)
        assert allowed is not None and allowed == pytest.approx(cap, rel=0.02), (
            f"CUDA's message should name the cap ('<X> allowed;', {cap >> 20} MiB), course.allowed_bytes read "
            f"{allowed}: {text[:400]}")
        report = gl.explain_oom(error, model=model, optimizer=optimizer, batch=batch, capacity_bytes=cap)
        assert report.device.startswith("cuda"), f"explain_oom placed the step on {report.device!r}"
        assert report.usable_bytes == cap, f"the explanation should be against the cap {cap}, got {report.usable_bytes}"
        usable_note = next(n for k, _, n in report.rows if k == "usable for this step")
        assert "cap" in usable_note, f"the 'usable for this step' row should name the allocator's cap: {usable_note!r}"
        assert report.value("request that failed") == msg.requested_bytes
        assert report.needed_bytes and report.needed_bytes > 0, f"no estimate of the step's need:\n{report}"
        if base < 32 * gl.MiB:       # the cap holds little else: the step alone must overflow it
            assert report.shortfall_bytes > 0, (
                f"the step's estimated need {report.needed_bytes} fits the cap {cap} although it ran out:\n{report}")
        assert report.fixes and report.fixes[0].applies, f"the top fix should apply to this case:\n{report}"
        assert report.failed_during in ("forward", "backward", "optimizer step"), report.failed_during
        figure("oom_step_needs", report.needed_bytes / gl.MiB, "MiB",
               note=f"explain_oom's estimate for the failed step against a {cap >> 20} MiB cap; "
                    f"failed in the {report.failed_during}; first fix: {report.fixes[0].name}")
    finally:
        del error, model, optimizer, batch
        gl.memory.recover_memory()
        torch.cuda.empty_cache()


def test_reconcile_memory_allocator_figures_fit_inside_nvml_used(cuda, figure):
    import torch

    x = torch.empty(256 * gl.MiB, dtype=torch.uint8, device=cuda)
    torch.cuda.synchronize()
    r = gl.memory.reconcile_memory(cuda)
    assert r.available, f"reconcile_memory found no CUDA: {r.note}"
    allocated, reserved = r.value("PyTorch allocated"), r.value("PyTorch reserved")
    assert allocated >= x.numel(), f"PyTorch allocated {allocated} bytes but a {x.numel()}-byte tensor is alive"
    assert allocated <= reserved, f"allocated {allocated} > reserved {reserved}"
    used = r.value("NVML used")
    if used is None:
        pytest.skip(f"NVML is unavailable, so there is no used figure to compare with ({r.note}): "
                    "pip install nvidia-ml-py")
    assert reserved <= used, f"PyTorch reserved {reserved} bytes but NVML shows only {used} used on the card"
    rows = {k: v for k, v, _ in r.rows}
    mine = rows.get("this process (NVML)")
    if mine is None:         # inside a container NVML may list this process under its host PID
        mine = rows.get("another PID, possibly this process (NVML)")
    if mine is not None:
        assert reserved <= mine, (f"PyTorch reserved {reserved} bytes but NVML counts only {mine} for this process: "
                                  "the allocator's figures must fit inside the process's")
        figure("cuda_context_and_non_pytorch", (mine - reserved) / gl.MiB, "MiB",
               note="NVML's figure for this process minus PyTorch reserved: CUDA context, kernels, library buffers")
    else:
        figure("cuda_context_and_non_pytorch", None, "MiB",
               note="NVML lists no process with this PID (a container's PID namespace): compared with NVML used only")
    del x
