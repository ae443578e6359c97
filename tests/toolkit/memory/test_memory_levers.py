"""The levers lessons 04 and 05 add: the three TF32 states, the convolution levers one at a time, measured
ceilings against the datasheet, selective checkpointing (use_reentrant=False) and the optimizer-state lever."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import gpulab as gl
from gpulab import course


def test_under_tf32_runs_each_state_and_restores_the_switches():
    before = course.tf32_flags()
    seen = {s: course.under_tf32(s, lambda: (course.tf32_flags()["matmul"], course.tf32_flags()["cudnn"]))()
            for s in course.TF32_STATES}
    assert seen == course.TF32_STATES == {"all off": (False, False), "default (matmul off, cuDNN on)": (False, True),
                                          "all on": (True, True)}
    assert course.tf32_flags() == before
    with pytest.raises(ValueError, match="state must be one of"):
        course.under_tf32("half on", lambda: None)
    with pytest.raises(TypeError):
        course.under_tf32("all on", 3)


def test_fp32_step_ceiling_prefers_the_measured_tf32_ceiling(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    measured = {"float32": 18e12, "bfloat16": 250e12, "tf32": 120e12}
    assert course.fp32_step_ceiling(measured, device="cuda", gpu="A100 40GB SXM", convolutions_tf32=True) == 120e12
    assert course.fp32_step_ceiling(measured, device="cuda", convolutions_tf32=False) == 18e12
    assert course.fp32_step_ceiling(measured, device="cpu") == 18e12          # no TF32 on a CPU: the tf32 key is ignored


class _Recorder(torch.nn.Module):
    """A small CNN that records, per forward, its input's layout and the cudnn.benchmark switch."""

    def __init__(self, log):
        super().__init__()
        self.net, self.log = course.models.small_cnn(width=4), log

    def forward(self, x):
        self.log.append((x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous(),
                         torch.backends.cudnn.benchmark))
        return self.net(x)


def test_conv_lever_steps_one_lever_at_a_time_and_the_switch_restored():
    before = torch.backends.cudnn.benchmark
    log = []
    steps = course.conv_lever_steps(lambda: _Recorder(log), course.pattern_batch(4), precision="bf16")
    assert list(steps) == list(course.CONV_LEVERS)
    losses = {}
    for label, step in steps.items():
        log.clear()
        losses[label] = float(step())
        assert log == [course.CONV_LEVERS[label]], label      # (channels_last input, benchmark) as the variant says
    assert torch.backends.cudnn.benchmark == before
    assert max(losses.values()) == pytest.approx(min(losses.values()), rel=1e-2)   # same weights; bf16 rounding per layout
    with pytest.raises(ValueError):
        course.conv_lever_steps(lambda: _Recorder(log), course.pattern_batch(4), precision="fp8")
    with pytest.raises(TypeError):
        with course.cudnn_benchmark("on"):
            pass


def test_selective_checkpointing_same_gradients_between_none_and_full():
    torch.manual_seed(0)
    plain = course.models.resnet_small(width=8, blocks_per_stage=2)
    full, selective = copy.deepcopy(plain), copy.deepcopy(plain)
    batch = course.pattern_batch(16)
    kept = {}
    for name, m in (("none", plain), ("full", course.checkpointed(full, 3)),
                    ("selective", course.checkpointed(selective, 3, save="matmuls"))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")                     # no use_reentrant warning: it is passed
            forward = gl.peak_memory(m, batch[0])
        kept[name] = forward.retained_bytes
        del forward
    assert kept["full"] < kept["selective"] < kept["none"]
    grads = {}
    for name, m in (("none", plain), ("selective", course.checkpointed(selective, 3, save="matmuls"))):
        m.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(m(batch[0]), batch[1]).backward()
        grads[name] = [p.grad.clone() for p in m.parameters()]
    assert course.compare_gradients(grads["none"], grads["selective"], rtol=1e-5).ok
    for (name, a), b in zip(plain.state_dict().items(), selective.state_dict().values()):
        assert torch.allclose(a.float(), b.float()), name       # BatchNorm statistics updated once per forward
    with pytest.raises(ValueError, match="save must be"):
        course.checkpointed(course.models.mlp(), 2, save="everything")


def test_selective_checkpointing_recomputes_no_matmul():
    torch.manual_seed(0)
    model = course.models.small_cnn(width=8)
    batch = course.pattern_batch(8)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    flops = {save: gl.count_flops(course.train_step, course.checkpointed(copy.deepcopy(model), 3, save=save), opt, batch)
             for save in (None, "matmuls")}
    plain = gl.count_flops(course.train_step, model, opt, batch)
    assert flops["matmuls"] == plain < flops[None]


def test_optimizer_state_bytes_and_the_adafactor_saving():
    model = torch.nn.Linear(100, 10)
    adam = torch.optim.Adam(model.parameters())
    assert course.optimizer_state_bytes(adam) == 0
    model(torch.randn(4, 100)).sum().backward()
    adam.step()
    assert course.optimizer_state_bytes(adam) == 2 * 4 * 1010 + 2 * 4    # two fp32 moments, two step counters
    with pytest.raises(TypeError):
        course.optimizer_state_bytes(model)
    assert course.adafactor_available() == hasattr(torch.optim, "Adafactor")
    table = course.compare_optimizers(lambda: course.models.mlp(hidden=64), course.models.example_batch("mlp", 8),
                                      optimizers=("Adam", "Adafactor", "SGD"), min_run_time=0.05)
    if course.adafactor_available():
        assert 0 < table.state_ratio("Adafactor") < 0.1          # row and column sums instead of two full moments
    else:
        assert table.missing == ("Adafactor",)
    assert table.state_ratio("SGD") == 0 and table.row("Adam").state_per_param_bytes == pytest.approx(8, rel=0.01)
    assert "Adam" in repr(table) and "<table" in table._repr_html_()
    with pytest.raises(ValueError, match="unknown optimizer"):
        course.compare_optimizers(lambda: course.models.mlp(), course.models.example_batch("mlp", 8), optimizers=("Lion",))
    with pytest.raises(ValueError, match="baseline"):
        course.compare_optimizers(lambda: course.models.mlp(), course.models.example_batch("mlp", 8), optimizers=("SGD",))


def test_the_published_records_these_lessons_cite():
    a100, v100 = gl.published("amp-dle-resnet50-a100"), gl.published("amp-dle-resnet50-v100")
    assert a100.low == pytest.approx(2470 / 938, abs=0.01) and v100.low == pytest.approx(1200 / 367, abs=0.01)
    assert "DeepLearningExamples" in a100.url and gl.published("amp-dle-resnet50-t4-inference").low == pytest.approx(
        1198 / 415, abs=0.01)
    assert gl.published("optimizer-8bit-adam-memory").low == 0.25
