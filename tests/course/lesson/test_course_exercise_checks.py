"""The exercise checks of lessons 06, 08 and 09 fail on wrong answers and wait on None; the memory challenge of
lesson 09 measures what was trained, so a step on part of the batch fails."""
from __future__ import annotations

from types import SimpleNamespace as NS

import pytest
import torch
import torch.nn.functional as F

import gpulab as gl
from gpulab import course


def _fails(fn, *args, **kwargs):
    with pytest.raises(AssertionError):
        fn(*args, **kwargs)


def test_faster_loading():
    run = NS(items=1000, wall_s=10.0, data_wait_s=6.0)
    assert isinstance(course.check_faster_loading(1000 / 7, run), course.Check)
    _fails(course.check_faster_loading, 1000 / 5, run)            # all the wait halved the whole wall time
    _fails(course.check_faster_loading, 2 * 100.0, run)           # twice the images/s
    assert isinstance(course.check_faster_loading(None, run), course.NotAnswered)


def test_loaders_that_keep_up():
    runs = [NS(label="slow", items_per_s=80.0), NS(label="fast", items_per_s=900.0), NS(label="edge", items_per_s=300.0)]
    assert isinstance(course.check_loaders_that_keep_up(["edge", "fast"], runs, 300.0), course.Check)
    _fails(course.check_loaders_that_keep_up, ["fast"], runs, 300.0)
    _fails(course.check_loaders_that_keep_up, [], runs, 300.0)
    assert isinstance(course.check_loaders_that_keep_up([], runs, 1e6), course.Check)
    with pytest.raises(TypeError):
        course.check_loaders_that_keep_up("fast", runs, 300.0)


def test_workers_needed():
    alone = NS(label="0 workers", items_per_s=250.0)
    assert isinstance(course.check_workers_needed(4, alone, 1000.0), course.Check)
    assert isinstance(course.check_workers_needed(5, alone, 1001.0), course.Check)
    _fails(course.check_workers_needed, 3, alone, 1001.0)
    assert isinstance(course.check_workers_needed(1, alone, 10.0), course.Check)
    with pytest.raises(TypeError):
        course.check_workers_needed(4.0, alone, 1000.0)


def test_phase_bound():
    prof = NS(share=lambda phase: {"data": 0.6}[phase])
    assert isinstance(course.check_phase_bound(2.5, prof), course.Check)
    _fails(course.check_phase_bound, 0.4, prof)                    # the share left, not a speedup
    _fails(course.check_phase_bound, 1 / 0.6, prof)                # the phase's share inverted


def test_calls_per_item():
    before, after = NS(op_calls_per_step=600.0), NS(op_calls_per_step=88.0)
    assert isinstance(course.check_calls_per_item(4, before, after, 128), course.Check)
    _fails(course.check_calls_per_item, 512, before, after, 128)   # per step, not per item
    _fails(course.check_calls_per_item, 2, before, after, 128)


def test_bytes_per_parameter_is_measured_per_optimizer():
    sgd = lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)
    plain = lambda p: torch.optim.SGD(p, lr=0.1)
    adam = lambda p: torch.optim.Adam(p, lr=1e-3)
    assert isinstance(course.check_bytes_per_parameter(12, sgd), course.Check)
    assert isinstance(course.check_bytes_per_parameter(8, plain), course.Check)
    assert isinstance(course.check_bytes_per_parameter(16, adam), course.Check)
    _fails(course.check_bytes_per_parameter, 16, sgd)              # Adam's count for SGD
    _fails(course.check_bytes_per_parameter, 8, sgd)


@pytest.fixture(scope="module")
def evaluation():
    torch.manual_seed(0)
    return course.models.mlp(hidden=32), course.models.example_batch("mlp", 16)


def test_running_total_passes_without_leak_or_sync(evaluation):
    model, (x, y) = evaluation

    def fixed(total):
        with torch.no_grad():
            return total + F.cross_entropy(model(x), y)
    assert isinstance(course.check_running_total(fixed, model, (x, y)), course.Check)


@pytest.mark.parametrize("wrong", ["leaks", "syncs", "wrong total", "detach only"])
def test_running_total_fails_each_wrong_answer(evaluation, wrong):
    model, (x, y) = evaluation

    def leaks(total):
        return total + F.cross_entropy(model(x), y)                # keeps every step's graph

    def syncs(total):
        with torch.no_grad():
            return total + F.cross_entropy(model(x), y).item()     # a host sync per step

    def wrong_total(total):
        with torch.no_grad():
            return F.cross_entropy(model(x), y)                    # forgets the total

    def detach_only(total):                                        # right: no graph kept, no sync
        return total + F.cross_entropy(model(x), y).detach()

    fn = {"leaks": leaks, "syncs": syncs, "wrong total": wrong_total, "detach only": detach_only}[wrong]
    if wrong == "detach only":
        assert isinstance(course.check_running_total(fn, model, (x, y)), course.Check)
    else:
        _fails(course.check_running_total, fn, model, (x, y))
    assert isinstance(course.check_running_total(None, model, (x, y)), course.NotAnswered)


# ---- the memory challenge measures what was trained ---------------------------------------------------
BATCH = 64


def _build():
    torch.manual_seed(0)
    model = course.models.small_cnn(width=8)
    return model, torch.optim.SGD(model.parameters(), lr=0.0)


@pytest.fixture(scope="module")
def reference():
    model, _ = _build()
    x, y = course.models.example_batch("small_cnn", BATCH)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return float(loss.detach()), [p.grad.detach().clone() for p in model.parameters()]


def _step(part=1.0, accumulation=1):
    def step():
        model, opt = _build()
        x, y = course.models.example_batch("small_cnn", BATCH)
        n = int(BATCH * part)
        config = course.TrainConfig(accumulation_steps=accumulation, progress=False)
        return course.train_step(model, opt, (x[:n], y[:n]), config), model
    return step


def _challenge(step, reference, **kw):
    loss, grads = reference
    return course.fit_challenge("fit", step, budget_bytes=1 * gl.GiB, reference=loss, rtol=0.05, device="cpu",
                                items=BATCH, reference_gradients=grads, **kw)


def test_the_whole_batch_passes_also_in_micro_batches(reference):
    assert _challenge(_step(), reference).passed
    result = _challenge(_step(accumulation=4), reference)
    assert result.passed and result.items == BATCH and "trained on 64 of the 64 items" in repr(result)


def test_a_quarter_of_the_batch_fails_even_with_a_loss_close_enough(reference):
    with pytest.raises(AssertionError, match="trained on 16 of the 64 items"):
        _challenge(_step(part=0.25), reference)


def test_the_same_quarter_four_times_fails_on_its_gradients(reference):
    def repeated():
        model, opt = _build()
        x, y = course.models.example_batch("small_cnn", BATCH)
        quarter = torch.cat([x[:BATCH // 4]] * 4), torch.cat([y[:BATCH // 4]] * 4)
        return course.train_step(model, opt, quarter, course.TrainConfig(progress=False)), model
    with pytest.raises(AssertionError, match="gradients"):
        _challenge(repeated, reference, gradient_rtol=0.3)


def test_a_step_that_returns_no_model_is_told_what_to_return(reference):
    with pytest.raises(AssertionError, match=r"return \(loss, model\)"):
        _challenge(lambda: _step()()[0], reference)
