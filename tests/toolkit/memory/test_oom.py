"""gpulab.oom / leaks / cuda_memory / errors: explain_oom's breakdown against hand-computed numbers,
the ladder's ranking per case, message parsing (current, legacy and simulated wording), leak demos,
recovery, and the GPU-only pieces against fakes shaped like torch.cuda and nvidia-ml-py."""
from __future__ import annotations

import doctest
import gc
import os
import sys
import types

import pytest
import torch
import torch.nn.functional as F

import gpulab as gl
from support.fake_cuda import fake_cuda as _fake_cuda
from gpulab import course
import gpulab.memory.cuda
import gpulab.errors
import gpulab.memory.leaks
import gpulab.memory.oom
import gpulab.memory.fixes
import gpulab.memory.oom_message
from gpulab.memory import parse_oom_message

MiB, GiB = 2**20, 2**30


@pytest.mark.parametrize("module", [gpulab.memory.oom, gpulab.memory.oom_message, gpulab.memory.fixes,
                                    gpulab.memory.leaks, gpulab.memory.cuda, gpulab.errors],
                         ids=lambda m: m.__name__)
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


# ---- parsing --------------------------------------------------------------------------------------
CURRENT = ("CUDA out of memory. Tried to allocate 3.15 GiB. GPU 0 has a total capacity of 39.56 GiB of which 6.80 GiB "
           "is free. Process 4242 has 1.50 GiB memory in use. Including non-PyTorch memory, this process has 31.20 GiB "
           "memory in use. Of the allocated memory 25.00 GiB is allocated by PyTorch, and 5.00 GiB is reserved by "
           "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
           "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
LEGACY = ("CUDA out of memory. Tried to allocate 36.00 MiB (GPU 0; 7.93 GiB total capacity; 130.35 MiB already "
          "allocated; 47.06 MiB free; 188.00 MiB reserved in total by PyTorch)")
LEGACY_FRACTION = ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 15.78 GiB total capacity; 1.00 GiB already "
                   "allocated; 13.00 GiB free; 2.00 GiB allowed; 1.50 GiB reserved in total by PyTorch)")


def test_parse_current_message():
    m = parse_oom_message(CURRENT)
    assert m.requested_bytes == round(3.15 * GiB) and m.capacity_bytes == round(39.56 * GiB)
    assert m.free_bytes == round(6.8 * GiB) and m.gpu_index == 0
    assert m.process_bytes == round(31.2 * GiB) and m.other_processes == ((4242, round(1.5 * GiB)),)
    assert m.allocated_bytes == 25 * GiB and m.reserved_unallocated_bytes == 5 * GiB and m.reserved_bytes == 30 * GiB
    assert not m.simulated


def test_parse_legacy_simulated_and_other_messages():
    m = parse_oom_message(LEGACY)
    assert m.gpu_index == 0 and m.capacity_bytes == round(7.93 * GiB) and m.free_bytes == round(47.06 * MiB)
    assert m.allocated_bytes == round(130.35 * MiB)
    assert m.reserved_unallocated_bytes == round(188 * MiB) - round(130.35 * MiB)
    f = parse_oom_message(LEGACY_FRACTION)
    assert f.capacity_bytes == 2 * GiB and f.gpu_index == 1      # the fraction cap is what PyTorch could use
    r = parse_oom_message("CUDA out of memory. Allocation was preemptively rejected because it would exceed "
                          "per_process_memory_fraction limit. Requested size: 512.00 MiB")
    assert r.requested_bytes == 512 * MiB
    try:
        with gl.memory_budget(1 * MiB):
            torch.ones(1024, 1024)
    except torch.OutOfMemoryError as e:
        s = parse_oom_message(str(e))
    assert s.simulated and s.requested_bytes == 4 * MiB and s.capacity_bytes == 1 * MiB
    assert parse_oom_message("RuntimeError: CUDA error: device-side assert triggered") is None
    with pytest.raises(TypeError):
        parse_oom_message(None)


# ---- explain_oom: the breakdown against hand computation -----------------------------------------
def _mlp_oom(batch_size=256, card=6 * MiB, set_to_none=True):
    """An MLP 784-512-512-10 with Adam, built on a small card, run until it runs out of memory."""
    torch.manual_seed(0)
    err = None
    try:
        with gl.memory.smaller_card(card, device="cpu"):
            model = course.models.mlp()
            opt = torch.optim.Adam(model.parameters(), lr=1e-3)
            batch = course.models.example_batch("mlp", batch_size)
            for _ in range(2):
                opt.zero_grad(set_to_none=set_to_none)
                F.cross_entropy(model(batch[0]), batch[1]).backward()
                opt.step()
    except torch.OutOfMemoryError as e:
        err = e
    assert err is not None, "the configuration was meant to run out of memory"
    return err, model, opt, batch


def test_explain_oom_matches_hand_computation():
    B = 256
    err, model, opt, batch = _mlp_oom(B)
    report = gl.explain_oom(err, model=model, optimizer=opt, batch=batch)
    n = 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10
    hand = {
        "parameters": 4 * n,
        "gradients": 4 * n,
        "optimizer state": 8 * n,                     # Adam: two fp32 moments per parameter (+ tiny step counters)
        "activations (estimate)": B * (512 + 512 + 10 + 10) * 4,   # ReLU outputs, logits, log-softmax saved
        "batch": B * 784 * 4 + B * 8,                 # float32 images, int64 labels
    }
    for k, v in hand.items():
        assert report.value(k) == pytest.approx(v, rel=0.10), k
    # the estimated step peak against a measurement of the same two steps on a card big enough
    def steps():
        torch.manual_seed(0)
        m = course.models.mlp()
        o = torch.optim.Adam(m.parameters(), lr=1e-3)
        x, y = course.models.example_batch("mlp", B)
        for _ in range(2):
            o.zero_grad(set_to_none=True)
            F.cross_entropy(m(x), y).backward()
            o.step()
    measured = gl.memory.try_fixes({"big": steps}, budget=1 * GiB).trials[0].peak_bytes
    assert report.needed_bytes == pytest.approx(measured, rel=0.10)
    assert report.usable_bytes == 6 * MiB and report.shortfall_bytes > 0
    assert report.device == "simulated card" and report.message.simulated
    assert report.value("CUDA context + non-PyTorch") is None
    assert "simulated card" in repr(report) and "<table" in report._repr_html_()
    assert list(report.ladder().columns[:3]) == ["fix", "applies", "saves_bytes"]
    del err


def test_failed_phase_and_static_heavy_ladder():
    err, model, opt, batch = _mlp_oom(64, card=9 * MiB)          # weights + grads fit, Adam's state does not
    report = gl.explain_oom(err, model=model, optimizer=opt, batch=batch)
    assert report.failed_during == "optimizer step"
    top = [f.name for f in report.fixes[:2]]
    assert "a smaller model" in top or "more GPUs: shard with FSDP" in top
    acc = next(f for f in report.fixes if f.name.startswith("smaller batch"))
    assert not acc.resolves                          # activations are not the problem here
    del err


def test_activation_heavy_ladder_puts_activation_fixes_first():
    torch.manual_seed(0)
    err = None
    try:
        with gl.memory.smaller_card(16 * MiB, device="cpu"):
            model = course.models.small_cnn(width=16)
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            batch = course.models.example_batch("small_cnn", 128)
            course.train_step(model, opt, batch)
    except torch.OutOfMemoryError as e:
        err = e
    report = gl.explain_oom(err, model=model, optimizer=opt, batch=batch)
    assert report.failed_during in ("forward", "backward")
    assert report.value("activations (estimate)") > 10 * report.value("parameters")
    first = report.fixes[0]
    assert first.applies and first.resolves
    assert first.name in ("smaller batch + gradient accumulation", "mixed precision (bf16/fp16 autocast)",
                          "gradient checkpointing")
    assert not next(f for f in report.fixes if f.name == "a smaller model").applies
    assert report.value("optimizer state") == pytest.approx(report.value("gradients"), rel=0.02)  # SGD momentum: 1
    del err


def test_cuda_shaped_message_fragmentation_context_and_others():
    model = torch.nn.Linear(1024, 1024)
    x = torch.randn(8, 1024)
    report = gl.explain_oom(CURRENT, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                            batch=x, device="cuda:0", scan_references=False)
    assert report.device == "cuda:0"
    assert report.value("CUDA context + non-PyTorch") == round(31.2 * GiB) - 30 * GiB     # process - reserved
    assert report.value("other processes") == round(1.5 * GiB)
    assert report.value("allocator cache / fragmentation") == 5 * GiB
    assert report.usable_bytes == round(39.56 * GiB) - round(1.2 * GiB) - round(1.5 * GiB)
    frag = next(f for f in report.fixes if f.name.startswith("PYTORCH_CUDA_ALLOC_CONF"))
    assert frag.applies and frag.saves_bytes == 5 * GiB                # 5 GiB cached > a 3.15 GiB request
    capped = gl.explain_oom(CURRENT, model=model, batch=x, device="cuda:0", capacity_bytes=2 * GiB,
                            scan_references=False)
    assert capped.usable_bytes == 2 * GiB
    assert report.value("driver reserve (NVML)") is None                # no NVML here


def test_explain_oom_shows_the_driver_reserve_apart(fake_nvml):
    fake = fake_nvml(machine="t4_colab")
    report = gl.explain_oom(CURRENT, device="cuda:0", scan_references=False)
    assert report.value("driver reserve (NVML)") == 257 * 2**20
    assert report.usable_bytes == round(39.56 * GiB) - round(1.2 * GiB) - round(1.5 * GiB)   # not subtracted twice
    assert fake.calls.count("init") == 1


def test_text_only_gradients_and_graph_holders():
    model = torch.nn.Linear(256, 256)
    model(torch.randn(4, 256)).sum().backward()                       # gradients exist now
    w = torch.ones(8, requires_grad=True)
    kept_losses = [(w * i).sum() for i in range(6)]                   # the classic: losses kept with graphs
    report = gl.explain_oom("CUDA out of memory. Tried to allocate 2.00 MiB.", model=model)
    stn = next(f for f in report.fixes if f.name.startswith("zero_grad"))
    assert stn.applies and stn.saves_bytes == (256 * 256 + 256) * 4
    graphs = next(f for f in report.fixes if f.name.startswith("don't keep"))
    assert graphs.applies and "6 tensors with autograd history" in graphs.why
    assert report.value("activations (estimate)") is None              # no batch: not estimated, and said so
    assert len(kept_losses) == 6


def test_explain_oom_bad_input():
    with pytest.raises(ValueError):
        gl.explain_oom(RuntimeError("CUDA error: device-side assert triggered"))
    with pytest.raises(TypeError):
        gl.explain_oom(42)
    with pytest.raises(ValueError):
        gl.explain_oom(CURRENT, capacity_bytes=0)


# ---- try_fixes and smaller_card -------------------------------------------------------------------
def test_try_fixes_and_errors():
    ladder = gl.memory.try_fixes({"big": lambda: torch.ones(1024, 1024), "small": lambda: torch.ones(128, 1024)},
                          budget=2 * MiB)
    assert [t.fits for t in ladder.trials] == [False, True] and ladder.first_fit == "small"
    assert ladder.trial("small").peak_bytes == 128 * 1024 * 4 and ladder.trial("big").error
    assert "OOM" in repr(ladder) and ladder.to_dataframe().loc["small", "fits"]
    with pytest.raises(ValueError):
        gl.memory.try_fixes({"x": lambda: None}, device="cpu")                # no budget on CPU
    with pytest.raises(TypeError):
        gl.memory.try_fixes({"x": 3}, budget=MiB)
    with pytest.raises(ZeroDivisionError):                              # a real bug is not an OOM: it propagates
        gl.memory.try_fixes({"bug": lambda: 1 / 0}, budget=MiB)


def test_smaller_card_caps_the_cuda_allocator_with_a_fake(monkeypatch, pretend_gpus):
    calls = []
    c = torch.cuda
    monkeypatch.setattr(c, "get_device_properties", lambda d: types.SimpleNamespace(total_memory=16 * GiB))
    for name in ("synchronize", "empty_cache", "reset_peak_memory_stats"):
        monkeypatch.setattr(c, name, lambda *a, name=name: calls.append(name))

    def fraction(f, d=None):            # torch's: a device must name its index ("cuda" alone is a ValueError)
        if isinstance(d, (str, torch.device)) and torch.device(d).index is None:
            raise ValueError(f"Expected a torch.device with a specified index or an integer, but got:{d}")
        calls.append(("fraction", f))

    monkeypatch.setattr(c, "set_per_process_memory_fraction", fraction)
    monkeypatch.setattr(c, "current_device", lambda: 0)
    monkeypatch.setattr(c, "memory_allocated", lambda d=None: 100)
    monkeypatch.setattr(c, "max_memory_allocated", lambda d=None: 100 + 5 * MiB)
    for device in ("cuda:0", "cuda", None):          # None and "cuda": the current GPU, as a lesson passes it
        with gl.memory.smaller_card(2 * GiB, device=device) as card:
            assert not card.simulated and card.peak_bytes == 5 * MiB and card.device == "cuda:0"
        assert ("fraction", 2 / 16) in calls and calls[-1] == ("fraction", 1.0)
    with pytest.raises(RuntimeError):
        with gl.memory.smaller_card(2 * GiB, device="cuda:0"):
            raise RuntimeError("boom")
    assert calls[-1] == ("fraction", 1.0)                              # lifted even when the body fails
    with pytest.raises(ValueError):
        with gl.memory.smaller_card(32 * GiB, device="cuda:0"):
            pass


# ---- leaks -----------------------------------------------------------------------------------------
def test_leak_demos():
    torch.manual_seed(0)
    model = course.models.mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = course.models.example_batch("mlp", 64)
    kept_eval, kept_train, numbers = [], [], []

    def eval_keeping():
        kept_eval.append(F.cross_entropy(model(x), y))

    def train_keeping():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        kept_train.append(loss)

    def eval_item():
        with torch.no_grad():
            numbers.append(F.cross_entropy(model(x), y).item())

    ev = gl.memory.memory_growth(eval_keeping, steps=4, label="eval keeps loss")
    act = 64 * (512 + 512 + 10 + 10) * 4                          # what one forward saves for backward
    assert ev.leaks and ev.growth_per_step_bytes == pytest.approx(act, rel=0.10)
    tr = gl.memory.memory_growth(train_keeping, steps=4)
    assert tr.leaks and tr.growth_per_step_bytes < 64                  # backward freed the activations: bytes remain
    ok = gl.memory.memory_growth(eval_item, steps=4)
    assert not ok.leaks and ok.growth_per_step_bytes == 0
    holders = gl.memory.graph_holders(min_tensors=4)
    assert any(h.graph_tensors >= 4 and h.kind == "list" for h in holders)
    assert "leaks" in repr(ev) and "<table" in ev._repr_html_() and list(ev.to_dataframe().columns) == [
        "live_bytes", "growth_bytes"]
    with pytest.raises(ValueError):
        gl.memory.memory_growth(eval_item, steps=1)
    with pytest.raises(TypeError):
        gl.memory.memory_growth("not callable")


def test_recover_memory_releases_traceback_and_names():
    model = course.models.mlp()

    def failing():
        activations = model(torch.randn(128, 784))          # noqa: F841 - kept alive by the frame
        assert activations is not None
        raise RuntimeError("failed after forward")

    ns = {"out": None}
    with gl.memory_budget(1 * GiB) as tracker:
        ns["out"] = model(torch.randn(128, 784))
        try:
            failing()
        except RuntimeError as e:
            sys.last_type, sys.last_value, sys.last_traceback = type(e), e, e.__traceback__
        gc.collect()
        held = tracker.current_bytes
        r = gl.memory.recover_memory(ns, ["out"])
        after = tracker.current_bytes
    assert held > 2 * 128 * 512 * 4 and after < 0.05 * held
    assert "out" not in ns and sys.last_traceback is None
    assert any("last exception" in a for a in r.actions) and r.allocated_before is None
    with pytest.raises(TypeError):
        gl.memory.recover_memory(ns, "out")
    with pytest.raises(ValueError):
        gl.memory.recover_memory(None, ["out"])


# ---- GPU-only views against fakes -------------------------------------------------------------------
def test_cuda_memory_state_with_fake():
    st = gl.memory.cuda_memory_state(cuda=_fake_cuda())
    assert st.cached_bytes == GiB and st.inactive_split_bytes == 256 * MiB and st.ooms == 1
    assert gl.memory.cuda_memory_state(cuda=types.SimpleNamespace(is_available=lambda: False)) is None


def test_reconcile_memory_with_fake_cuda_and_nvml(fake_nvml, monkeypatch):
    fake = fake_nvml(gpus=(("Tesla T4", (7, 5), 16 * GiB),))
    t4 = fake.gpus[0]
    t4.used, t4.reserved = int(6.5 * GiB), GiB // 2      # v2: processes' 6.5 GiB; the driver keeps 0.5 GiB apart
    t4.processes = [(os.getpid(), int(4.5 * GiB)), (1, 2 * GiB), (2, None)]   # None: NVML cannot tell (WDDM)
    assert gl.memory.nvml_processes(0) == [(os.getpid(), int(4.5 * GiB)), (1, 2 * GiB), (2, None)]
    r = gl.memory.reconcile_memory(cuda=_fake_cuda())
    assert r.available
    assert r.value("NVML used") == int(6.5 * GiB) and r.value("driver reserve (NVML)") == GiB // 2
    assert r.value("PyTorch reserved") == 4 * GiB
    assert r.value("cached (reserved - allocated)") == GiB
    assert r.value("CUDA context + non-PyTorch") == int(0.5 * GiB)    # 4.5 GiB for this process - 4 GiB reserved
    assert r.value("other processes (NVML)") == 2 * GiB
    assert "CUDA context" in repr(r) and r.to_dataframe().loc["NVML used", "bytes"] == int(6.5 * GiB)
    st = gl.memory.cuda_memory_state(cuda=_fake_cuda())
    assert (st.nvml_used_bytes, st.driver_reserved_bytes) == (int(6.5 * GiB), GiB // 2)
    assert not gl.memory.reconcile_memory(cuda=types.SimpleNamespace(is_available=lambda: False)).available


def test_reconcile_memory_on_a_pre_r510_driver_says_used_includes_the_reserve(fake_nvml):
    fake = fake_nvml(gpus=(("Tesla T4", (7, 5), 16 * GiB),), memory_v2=False)
    fake.gpus[0].used, fake.gpus[0].reserved = 6 * GiB, GiB // 2
    r = gl.memory.reconcile_memory(cuda=_fake_cuda())
    assert r.value("NVML used") == int(6.5 * GiB) and r.value("driver reserve (NVML)") is None
    assert "reserve" in r.note


def test_capture_memory_history_with_fake(tmp_path):
    cuda = _fake_cuda()
    snap = gl.memory.capture_memory_history(lambda: 7, path=tmp_path / "s.pickle", max_entries=1000, cuda=cuda)
    assert snap.available and snap.result == 7 and open(snap.path, "rb").read() == b"snapshot"
    assert [c[0] for c in cuda.calls] == ["record", "dump", "record"]
    assert cuda.calls[0][1] == {"max_entries": 1000} and cuda.calls[2][1] == {"enabled": None}
    cuda.calls.clear()

    def oom():
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB.")
    with pytest.raises(torch.OutOfMemoryError) as info:
        gl.memory.capture_memory_history(oom, path=tmp_path / "oom.pickle", cuda=cuda)
    assert [c[0] for c in cuda.calls] == ["record", "dump", "record"]      # dumped and stopped despite the error
    assert any("oom.pickle" in n for n in getattr(info.value, "__notes__", []))
    off = gl.memory.capture_memory_history(lambda: 3, cuda=types.SimpleNamespace(is_available=lambda: False))
    assert not off.available and off.result == 3 and off.path is None
    with pytest.raises(TypeError):
        gl.memory.capture_memory_history(None)


# ---- other errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, code, restart", [
    ("RuntimeError: Found no NVIDIA driver on your system.", "no-driver", True),
    ("RuntimeError: No CUDA GPUs are available", "no-visible-gpu", True),
    ("RuntimeError: CUDA error: no CUDA-capable device is detected", "no-device", True),
    ("RuntimeError: The NVIDIA driver on your system is too old (found version 11040).", "driver-too-old", True),
    ("RuntimeError: CUDA driver version is insufficient for CUDA runtime version", "driver-too-old", True),
    ("AssertionError: Torch not compiled with CUDA enabled", "cpu-only-torch", True),
    ("RuntimeError: CUDA error: invalid device ordinal", "invalid-device-ordinal", False),
    ("RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
     "wrong-device", False),
    ("RuntimeError: CUDA error: device-side assert triggered", "device-side-assert", True),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal-memory-access", True),
    ("RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
     "library-init-failed", False),
    (CURRENT, "out-of-memory", False),
    ("ValueError: something else entirely", "unknown", False),
])
def test_explain_error(text, code, restart):
    x = gl.errors.explain_error(text)
    assert x.code == code and x.restart_needed is restart and x.fix
    assert x.code in repr(x) and "<table" in x._repr_html_()


def test_explain_error_on_real_exceptions():
    try:
        torch.nn.Linear(4, 2)(torch.ones(1, 4, device="meta"))
    except RuntimeError as e:
        assert gl.errors.explain_error(e).code == "wrong-device"
    x = gl.errors.explain_error("RuntimeError: CUDA error: device-side assert triggered")
    assert x.asynchronous and "CUDA_LAUNCH_BLOCKING=1" in repr(x)
    with pytest.raises(TypeError):
        gl.errors.explain_error(3)


def test_an_ooms_own_process_under_its_host_pid_is_not_counted_as_another(monkeypatch):
    """Inside a container NVML can list this process under its host PID: its memory is this process's reserve plus
    a CUDA context, so it is the context's figure, not "other processes"."""
    from gpulab.memory import cuda as mem_cuda
    from gpulab.memory.oom import _cuda_context
    from gpulab.memory.oom_message import OOMMessage

    host_pid = 4_000_000 + os.getpid()
    monkeypatch.setattr(mem_cuda, "nvml_processes",
                        lambda index: [(host_pid, int(4.4 * GiB)), (77, 2 * GiB)])
    msg = OOMMessage("CUDA out of memory", gpu_index=0, allocated_bytes=3 * GiB, reserved_unallocated_bytes=GiB)
    ctx, others, src = _cuda_context(msg, "cuda:0")
    assert others == 2 * GiB, "this process, listed under its host PID, was counted as another process"
    assert ctx == int(0.4 * GiB) and "NVML" in src


def test_try_fixes_default_budget_is_the_process_share_of_the_card(monkeypatch):
    """On a GPU the preflight shares among notebooks (or a rehearsed T4) the default budget is the allocator cap,
    not the whole card: smaller_card refuses a budget above the cap (seen on an H200: 140 GiB vs a 23.4 GiB share)."""
    props = types.SimpleNamespace(total_memory=140 * gl.GiB)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    monkeypatch.setenv("GPULAB_GPU_MEMORY_CAP", str(int(23.4 * gl.GiB)))
    monkeypatch.delenv("GPULAB_AS", raising=False)
    assert gpulab.memory.fixes._card_bytes("cuda") == int(23.4 * gl.GiB)
    monkeypatch.delenv("GPULAB_GPU_MEMORY_CAP")
    assert gpulab.memory.fixes._card_bytes("cuda") == 140 * gl.GiB
