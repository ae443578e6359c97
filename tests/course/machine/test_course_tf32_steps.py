"""course.tf32 (TF32 switches, the fp32 step's ceiling) with a faked Ampere/Turing GPU, and
course.optimizer_step (unscale before clipping, one scheduler step per effective batch, the uneven last window,
the scaler in checkpoints, autocast at evaluation) with the real torch.amp.GradScaler on the CPU."""
from __future__ import annotations

import pytest
import torch

from gpulab import course

from gpulab.course.training.accumulation import compare_gradients


def test_tf32_sets_and_restores_every_switch_even_after_an_error():
    new_api = hasattr(torch.backends.cuda.matmul, "fp32_precision")     # torch 2.7+; torch 2.5 has allow_tf32 only
    before = course.tf32_flags()
    with course.tf32(True) as on:
        assert on["matmul"] and on["cudnn"] and on["matmul_precision"] == ("tf32" if new_api else "high")
        if new_api:
            assert torch.backends.cuda.matmul.fp32_precision == "tf32" == torch.backends.cudnn.conv.fp32_precision
        else:
            assert torch.backends.cuda.matmul.allow_tf32 is True
    assert course.tf32_flags() == before
    with pytest.raises(RuntimeError, match="boom"):
        with course.tf32(False) as off:
            assert not off["matmul"] and not off["cudnn"]
            assert off["matmul_precision"] == ("ieee" if new_api else "highest")
            raise RuntimeError("boom")
    assert course.tf32_flags() == before
    with course.tf32(True, convolutions=False) as mixed:
        assert mixed["matmul"] and not mixed["cudnn"]
    with pytest.raises(TypeError):
        with course.tf32("yes"):
            pass


def _fake_gpu(monkeypatch, cc):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)


def test_tf32_supported_only_on_ampere_and_newer(monkeypatch):
    assert course.tf32_supported("cpu") is False
    _fake_gpu(monkeypatch, (7, 5))                      # T4
    assert course.tf32_supported("cuda") is False
    _fake_gpu(monkeypatch, (8, 0))                      # A100
    assert course.tf32_supported("cuda") is True
    assert course.tf32_supported("cpu") is False


def test_fp32_step_ceiling_uses_the_tf32_peak_where_convolutions_ran_in_tf32(monkeypatch, pretend_gpus):
    measured = {"float32": 18e12, "bfloat16": 250e12}
    assert course.fp32_step_ceiling(measured, device="cpu") == 18e12
    _fake_gpu(monkeypatch, (7, 5))
    assert course.fp32_step_ceiling(measured, device="cuda", gpu="T4") == 18e12
    _fake_gpu(monkeypatch, (8, 0))
    assert course.fp32_step_ceiling(measured, device="cuda", gpu="NVIDIA A100-SXM4-40GB",
                                     convolutions_tf32=True) == 156e12
    assert course.fp32_step_ceiling(measured, device="cuda", gpu="A100 40GB SXM", convolutions_tf32=False) == 18e12
    assert course.fp32_step_ceiling(measured, device="cuda", gpu="Some Future GPU", convolutions_tf32=True) == 250e12
    with pytest.raises(ValueError):
        course.fp32_step_ceiling({"bfloat16": 1.0}, device="cpu")


class _OrderScaler:
    """Records the order of the GradScaler calls; scale 1 so the arithmetic is the fp32 one."""

    def __init__(self):
        self.calls = []

    def scale(self, loss):
        self.calls.append("scale")
        return loss

    def unscale_(self, optimizer):
        self.calls.append("unscale_")

    def get_scale(self):
        return 1.0

    def step(self, optimizer):
        self.calls.append("step")
        optimizer.step()

    def update(self):
        self.calls.append("update")


def test_unscale_before_clipping_and_one_step_per_effective_batch(monkeypatch):
    torch.manual_seed(0)
    model = course.models.mlp(hidden=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaler = _OrderScaler()
    clipped = []
    real_clip = torch.nn.utils.clip_grad_norm_
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_",
                        lambda p, m: (scaler.calls.append("clip"), real_clip(p, m))[1])
    micro = [course.models.example_batch("mlp", 8, seed=i) for i in range(3)]
    r = course.effective_batch_step(model, opt, micro, scaler=scaler, max_grad_norm=0.1, scheduler=sched)
    assert scaler.calls == ["scale"] * 3 + ["unscale_", "clip", "step", "update"]
    assert sched.last_epoch == 1 and r.micro_batches == 3 and r.items == 24 and r.stepped


def test_real_cpu_gradscaler_clips_the_unscaled_gradient():
    torch.manual_seed(0)
    model = course.models.mlp(hidden=32)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
    batch = course.models.example_batch("mlp", 16)
    course.effective_batch_step(model, opt, [batch], precision="fp16", scaler=scaler, max_grad_norm=1e-3)
    norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert float(norm) <= 1e-3 * 1.01                  # clipped in true units, not in units of the scale
    state = course.training_state(model, opt, scaler, step=1)
    assert state["scaler"]["scale"] == scaler.get_scale() and state["step"] == 1


def test_partial_window_scaled_equals_its_items_full_batch_and_drop_leaves_it_out():
    torch.manual_seed(0)
    model = course.models.mlp(hidden=32)
    micro = [course.models.example_batch("mlp", n, seed=i) for i, n in enumerate((8, 8, 8, 8, 8, 3))]
    last = micro[4:]
    opt = torch.optim.SGD(model.parameters(), lr=0.0)   # lr 0: gradients without moving the weights
    course.effective_batch_step(model, opt, last)
    got = [p.grad.clone() for p in model.parameters()]
    x = torch.cat([b[0] for b in last]); y = torch.cat([b[1] for b in last])
    want = course.micro_batch_gradients(model, (x, y), steps=1)
    assert compare_gradients(want, got, rtol=1e-5).ok
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    scaled = course.accumulate_epoch(model, opt, micro, k=4, partial="scale", scheduler=sched)
    assert scaled.window_sizes == (4, 2) and scaled.optimizer_steps == 2 and sched.last_epoch == 2
    dropped = course.accumulate_epoch(model, opt, micro, k=4, partial="drop")
    assert dropped.window_sizes == (4,) and dropped.dropped_micro_batches == 2
    with pytest.raises(ValueError):
        course.accumulate_epoch(model, opt, micro, k=4, partial="pad")


def test_evaluate_autocast_restores_training_mode():
    model = course.models.mlp(hidden=32).train()
    acc = course.evaluate_autocast(model, course.models.example_batch("mlp", 16), "bf16")
    assert 0.0 <= acc <= 1.0 and model.training
