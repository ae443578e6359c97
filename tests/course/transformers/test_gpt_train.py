"""Lesson 13's GPT levers: recipes refuse bad values, accumulation and checkpointing keep the step's math, every
recipe is judged on the same held-out windows after the same tokens, and the ablation keeps, drops and branches as
the capstone's rule says."""
from __future__ import annotations

import doctest
import math

import pytest
import torch

from gpulab.course.transformers import lever_ablation
from gpulab.course.transformers import train as gpt_train
from gpulab.course.transformers.gpt import gpt, text_tokens, token_batch
from gpulab.course.transformers.lever_ablation import gpt_ablation, gpt_changes
from gpulab.course.transformers.train import GPTRecipe, train_gpt
from gpulab.transformer import TransformerShape

SHAPE = TransformerShape(layers=1, d_model=32, heads=2, seq_len=32, vocab=256)


def test_doctests():
    assert doctest.testmod(gpt_train, optionflags=doctest.ELLIPSIS).failed == 0
    assert doctest.testmod(lever_ablation, optionflags=doctest.ELLIPSIS).failed == 0


@pytest.mark.parametrize("bad", [dict(precision="fp8"), dict(micro_batch=0), dict(accumulation=1.5), dict(lr=0),
                                 dict(lr=True)])
def test_a_recipe_refuses_bad_values_by_name(bad):
    with pytest.raises((ValueError, TypeError), match=next(iter(bad))):
        GPTRecipe(**bad)


def test_describe_names_what_differs():
    assert GPTRecipe().describe() == "fp32, micro-batch 8, lr 0.003"
    assert GPTRecipe(compile=True, checkpoint=True).describe() == "fp32, micro-batch 8, compiled blocks, checkpointed blocks, lr 0.003"


def _grads(recipe, batches):
    torch.manual_seed(0)
    model = gpt(SHAPE)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    if recipe.checkpoint:
        model, opt, _, _ = gpt_train._blocks(SHAPE, recipe, "cpu", 0)
    loss = gpt_train._step(model, opt, None, recipe, batches, "cpu")
    return float(loss), [p.grad.clone() for p in model.parameters()]


def test_accumulation_and_checkpointing_keep_the_steps_math():
    x, y = token_batch(text_tokens(), 8, SHAPE.seq_len, torch.Generator().manual_seed(0))
    loss, full = _grads(GPTRecipe(micro_batch=8), [(x, y)])
    acc_loss, acc = _grads(GPTRecipe(micro_batch=2, accumulation=4), list(zip(x.split(2), y.split(2))))
    ck_loss, ck = _grads(GPTRecipe(micro_batch=8, checkpoint=True), [(x, y)])
    assert acc_loss == pytest.approx(loss, rel=1e-5) and ck_loss == pytest.approx(loss, rel=1e-6)
    for a, b, c in zip(full, acc, ck):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6) and torch.allclose(a, c, rtol=1e-5, atol=1e-7)


def test_training_learns_and_is_judged_on_the_same_held_out_windows():
    a = train_gpt(SHAPE, GPTRecipe(micro_batch=8), steps=24, device="cpu")
    b = train_gpt(SHAPE, GPTRecipe(micro_batch=8), steps=24, device="cpu")
    assert a.tokens_per_step == 8 * 32 and len(a.step_times_s) == 24 and len(a.epoch_times_s) == 4
    assert a.losses[-1] < a.losses[0] and a.test_loss < 5.5 and a.test_accuracy > 0.05   # ln 256 = 5.5 untrained
    assert a.test_loss == pytest.approx(b.test_loss, rel=1e-4)          # same seed, same windows: the same result
    assert a.flops_per_sample == SHAPE.flops_per_token() and a.samples_per_s > 0
    with pytest.raises(TypeError, match="TransformerShape"):
        train_gpt("gpt2", GPTRecipe())


def test_a_diverging_recipe_says_what_to_change(monkeypatch):
    monkeypatch.setattr(gpt_train, "_step", lambda *a: torch.tensor(float("nan")))
    with pytest.raises(FloatingPointError, match="lower lr"):
        train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=3, device="cpu")


def test_memory_levers_show_in_the_measured_peak():
    plain = train_gpt(SHAPE.__class__(layers=2, d_model=64, heads=2, seq_len=64, vocab=256), GPTRecipe(micro_batch=16),
                      steps=2, device="cpu")
    acc = train_gpt(plain_shape := TransformerShape(layers=2, d_model=64, heads=2, seq_len=64, vocab=256),
                    GPTRecipe(micro_batch=4, accumulation=4), steps=2, device="cpu")
    ckpt = train_gpt(plain_shape, GPTRecipe(micro_batch=16, checkpoint=True), steps=2, device="cpu")
    assert acc.peak_memory_bytes < plain.peak_memory_bytes and ckpt.peak_memory_bytes < plain.peak_memory_bytes


def test_the_peak_holds_weights_gradients_and_adam_state():
    """The measured step's peak counts its own gradients (the last step's are set to None before the base is read),
    so an fp32 AdamW step peaks at 16 bytes per parameter or more: weights, gradients and two moments."""
    shape = TransformerShape(layers=2, d_model=128, heads=2, seq_len=16, vocab=256)     # parameters >> activations
    run = train_gpt(shape, GPTRecipe(micro_batch=1), steps=2, eval_windows=2)
    assert run.peak_memory_bytes >= 16 * shape.params, (run.peak_memory_bytes, shape.params)


def test_the_levers_follow_the_device():
    changes = {c.label: c for c in gpt_changes(SHAPE, device="cpu")}
    assert not changes["torch.compile each block"].available and "compile_on_cpu" in changes["torch.compile each block"].why_not
    assert gpt_changes(SHAPE, device="cpu", compile_on_cpu=True)[2].available
    assert changes["accumulation x4 (memory)"].branch and changes["activation checkpointing (memory)"].branch
    fits = {8: 100.0, 16: 150.0, 32: 200.0}
    gpt_train_fits = lever_ablation.micro_batches_that_fit
    try:
        lever_ablation.micro_batches_that_fit = lambda shape, r, device=None: fits
        options = changes["largest micro-batch"].fields(GPTRecipe(micro_batch=8))
        assert [o[1]["micro_batch"] for o in options] == [32, 16]              # the fastest first
        assert options[0][1]["lr"] == pytest.approx(GPTRecipe(micro_batch=8).lr * 2)   # the square-root rule: x sqrt(4)
        assert "square-root rule" in options[0][0]
        fits.update({16: 103.0, 32: 90.0})                                      # none faster by 5%: nothing to try
        assert changes["largest micro-batch"].fields(GPTRecipe(micro_batch=8)) == []
    finally:
        lever_ablation.micro_batches_that_fit = gpt_train_fits
    assert changes["accumulation x4 (memory)"].fields(GPTRecipe(micro_batch=8)) == {"micro_batch": 2, "accumulation": 4}


def test_the_cuda_graphs_lever_comes_after_the_micro_batch_and_runs_on_a_gpu_only():
    """The micro-batch search runs without graphs (each shape it tries would be captured and kept), so the CUDA-graphs
    lever follows it; off a CUDA GPU it is listed, not run, and says why."""
    labels = [c.label for c in gpt_changes(SHAPE, device="cpu", compile_on_cpu=True)]
    assert labels.index("whole model compiled + CUDA graphs") == labels.index("largest micro-batch") + 1
    lever = next(c for c in gpt_changes(SHAPE, device="cpu") if c.label == "whole model compiled + CUDA graphs")
    assert not lever.available and "CUDA GPU" in lever.why_not and lever.one_off
    assert lever.fields == {"graphs": True}
    assert GPTRecipe(compile=True, graphs=True).describe() == "fp32, micro-batch 8, whole model compiled, CUDA graphs, lr 0.003"


def test_a_graphs_recipe_compiles_the_whole_model_and_marks_each_iteration(monkeypatch):
    """mode="reduce-overhead" on the whole model (on a CPU Inductor compiles it without graphs), the compile guard
    checking its first step, and CUDA graph trees told before each forward that a new iteration begins (the last
    replay's loss has been read)."""
    marks = []
    monkeypatch.setattr(torch.compiler, "cudagraph_mark_step_begin", lambda: marks.append(1))
    modes = []
    real = torch.compile
    monkeypatch.setattr(torch, "compile", lambda m, **kw: modes.append(kw.get("mode")) or real(m, **kw))
    run = train_gpt(SHAPE, GPTRecipe(micro_batch=2, accumulation=2, graphs=True), steps=2, eval_windows=2,
                    device="cpu")
    assert modes == ["reduce-overhead"]                      # one compile: the whole model, not each block
    assert len(marks) == 2 * 2 + 2                           # each micro-batch of the 2 steps, and the memory step
    assert all(map(math.isfinite, run.losses)) and 0 <= run.test_accuracy <= 1
    import sys
    assert sys.float_info.min / 2 > 0          # torch 2.5's Inductor libraries flush subnormals when loaded: kept


def test_the_ablation_keeps_drops_and_branches_after_the_same_tokens():
    table = gpt_ablation(SHAPE, tokens=4096, device="cpu", accuracy_seeds=0, compare_s=0.1)
    decisions = {s.label: s.decision for s in table.steps}
    assert decisions["baseline"] == "baseline"
    assert decisions["torch.compile each block"] == "not available"                 # a CPU, compile_on_cpu=False
    assert decisions["accumulation x4 (memory)"] == decisions["activation checkpointing (memory)"] == "branch"
    assert decisions["fused AdamW"] in ("kept", "dropped")
    assert [d for k, d in decisions.items() if k.startswith("largest micro-batch")][0] in ("kept", "dropped")
    kept = [s for s in table.steps if s.decision == "kept"]
    assert all(s.test_accuracy >= table.accuracy_floor - 1e-9 for s in kept), table          # the keep rule
    assert "tokens" in " ".join(table.notes) and "held-out" in " ".join(table.notes)


def _unigram(beaten: bool):
    from types import SimpleNamespace as NS

    return lambda: NS(accuracy=0.15, beaten_by=lambda a, margin=0.02: beaten)


def test_the_ablation_judges_by_time_to_the_baselines_accuracy_once_the_baseline_learned(monkeypatch):
    trained = []
    real = lever_ablation.train_gpt
    monkeypatch.setattr(lever_ablation, "train_gpt", lambda shape, r, **kw: trained.append((r, kw["steps"])) or real(
        shape, r, **kw))
    monkeypatch.setattr(lever_ablation, "unigram_baseline", _unigram(True))
    base = GPTRecipe(micro_batch=2)
    table = gpt_ablation(SHAPE, tokens=4096, baseline=base, device="cpu", accuracy_seeds=0, compare_s=0.1)
    assert table.by_time and table.target_accuracy == table.baseline.test_accuracy    # one seed: its own
    assert [r for r, _ in trained].count(base) == 1           # the baseline's run that chose the judging is reused
    assert len(table.baseline.epoch_accuracies) == 4 and table.baseline.epoch_accuracies[-1] == table.baseline.test_accuracy
    for s in table.steps:
        assert s.decision != "kept" or table.epochs_to_target(s.label) is not None
    assert "time to" in repr(table) and "4 epochs of a quarter each" in " ".join(table.notes)


def test_the_ablation_judges_by_throughput_when_the_baseline_learned_nothing(monkeypatch):
    monkeypatch.setattr(lever_ablation, "unigram_baseline", _unigram(False))
    table = gpt_ablation(SHAPE, tokens=4096, device="cpu", accuracy_seeds=0, compare_s=0.1)
    assert not table.by_time and "judged by throughput at the floor instead" in " ".join(table.notes)
    with pytest.raises(ValueError, match="max_epochs"):
        gpt_ablation(SHAPE, tokens=4096, device="cpu", judge="throughput", max_epochs=8)
    with pytest.raises(ValueError, match="judge"):
        gpt_ablation(SHAPE, tokens=4096, device="cpu", judge="loss")


def test_train_gpt_reads_the_held_out_accuracy_after_each_part():
    run = train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=6, parts=3, eval_windows=2, device="cpu")
    assert len(run.epoch_accuracies) == len(run.epoch_times_s) == 3 and run.epoch_accuracies[-1] == run.test_accuracy
    assert len(train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=2, eval_windows=2, device="cpu").epoch_accuracies) == 2
    with pytest.raises(ValueError, match="parts=5 is more than steps=4"):
        train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=4, parts=5, device="cpu")


def test_a_budget_in_seconds_is_whole_steps_in_each_part_at_the_runs_speed():
    from gpulab.course.transformers.train import GPTRun

    # 100 tokens a step, a median step of 0.1 s: 1,000 tokens/s (the first step, with its one-off costs, left out)
    run = GPTRun(GPTRecipe(), "cpu", 100, (5.0, 0.1, 0.1, 0.1), (), 1.0, 0.5, None, 1.0)
    assert run.tokens_in(10) == 10_000 and run.tokens_in(10, parts=3) == 9_900
    assert run.tokens_in(0.1) == 400                          # at least one step in each part
    slower = GPTRun(GPTRecipe(), "cpu", 100, (5.0, 0.5, 0.5, 0.5), (), 1.0, 0.5, None, 1.0)
    assert slower.tokens_in(10) == run.tokens_in(10) // 5     # the same seconds on a 5x slower device
    for bad, match in ((0, "seconds must be a positive"), (float("nan"), "seconds must be a positive")):
        with pytest.raises(ValueError, match=match):
            run.tokens_in(bad)
    with pytest.raises(ValueError, match="parts must be a whole number >= 1, got 0"):
        run.tokens_in(1, parts=0)


def test_a_comparison_that_runs_out_of_memory_leaves_the_decision_to_the_runs(monkeypatch):
    """Two models and their optimizer state side by side may not fit where each alone did: the out-of-memory error of
    the interleaved comparison is caught, and the candidate is judged on the two runs' own throughputs."""
    import gpulab.interleaved

    calls = []

    def oom(*a, **k):
        calls.append(1)
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    monkeypatch.setattr(gpulab.interleaved, "benchmark_interleaved", oom)
    table = gpt_ablation(SHAPE, tokens=4096, device="cpu", accuracy_seeds=0, compare_s=0.1)
    tried = [s for s in table.steps if s.decision in ("kept", "dropped")]
    assert calls and tried and all(s.gain is not None and s.gain > 0 for s in tried), table

    def broken(*a, **k):
        raise RuntimeError("not a memory error")
    monkeypatch.setattr(gpulab.interleaved, "benchmark_interleaved", broken)
    with pytest.raises(RuntimeError, match="not a memory error"):                    # anything else is a bug: raised
        gpt_ablation(SHAPE, tokens=4096, device="cpu", accuracy_seeds=0, compare_s=0.1)


def test_the_challenge_counts_tokens_and_holds_accuracy(monkeypatch):
    from gpulab import course
    from gpulab.course.lesson.checks import NotAnswered

    assert isinstance(course.gpt_challenge("faster", SHAPE, None), NotAnswered)
    with pytest.raises(TypeError, match="GPTRecipe"):
        course.gpt_challenge("faster", SHAPE, {"precision": "bf16"})
    big = course.gpt_challenge("more tokens per step", SHAPE, GPTRecipe(micro_batch=32), baseline=GPTRecipe(micro_batch=1),
                               speedup=1.2, tokens=2048, accuracy_tolerance=0.99, min_run_time=0.3, device="cpu")
    assert big.passed and big.speedup > 1.2 and "tokens" in repr(big)
    with pytest.raises(AssertionError, match="missed by"):                     # tokens/s, not calls/s, are compared
        course.gpt_challenge("fewer tokens per step", SHAPE, GPTRecipe(micro_batch=1), baseline=GPTRecipe(micro_batch=32),
                             speedup=1.0, tokens=2048, accuracy_tolerance=0.99, min_run_time=0.3, device="cpu")
    from gpulab.course.transformers import challenge

    real = gpt_train.train_gpt
    monkeypatch.setattr(challenge, "train_gpt", lambda shape, r, **kw: __import__("dataclasses").replace(
        real(shape, r, **kw), test_accuracy=0.1 if r.micro_batch == 32 else 0.5))
    with pytest.raises(AssertionError, match="does not compute the same"):
        course.gpt_challenge("less accurate", SHAPE, GPTRecipe(micro_batch=32), baseline=GPTRecipe(micro_batch=1),
                             speedup=1.2, tokens=2048, min_run_time=0.3, device="cpu")


def test_the_micro_batches_that_fit_are_timed():
    fits = lever_ablation.micro_batches_that_fit(SHAPE, GPTRecipe(micro_batch=2), device="cpu")
    assert sorted(fits) == [2, 4, 8] and all(v > 0 for v in fits.values())      # up to 4x, all within a T4's memory


def test_a_micro_batch_fits_only_with_room_for_the_recipe_it_is_timed_beside(monkeypatch):
    """The ablation times a kept micro-batch beside the current recipe, whose model and optimizer state are resident
    too: a micro-batch whose peak leaves no room for them does not count as fitting (on a T4 the search ran to the
    out-of-memory edge with one model resident, then the comparison ran out of memory)."""
    from gpulab.course.lesson import runs
    from gpulab.reference import gpu_spec

    t4 = gpu_spec("T4").memory_bytes
    beside = lever_ablation._copies_beside
    assert beside(torch.device("cpu")) == 2 and beside(torch.device("cuda")) == 1
    monkeypatch.setattr(runs, "_resident_bytes", lambda *a: int(0.45 * t4))    # two such copies fill 90% of the card
    assert lever_ablation.micro_batches_that_fit(SHAPE, GPTRecipe(micro_batch=2), device="cpu") == {}
    monkeypatch.setattr(runs, "_resident_bytes", lambda *a: int(0.40 * t4))    # room left: 10% of the card
    assert sorted(lever_ablation.micro_batches_that_fit(SHAPE, GPTRecipe(micro_batch=2), device="cpu")) == [2, 4, 8]


# ---- bad input: refused before any work, naming the argument -------------------------------------------------------
@pytest.mark.parametrize("field,value", [("checkpoint", "no"), ("compile", "False"), ("fused", 1), ("fused", None),
                                         ("checkpoint", 0.0), ("graphs", "yes")])
def test_a_lever_is_switched_by_a_real_bool_only(field, value):
    """"no" and "False" are truthy: accepted, they switched the lever on and describe() said "compiled blocks"."""
    with pytest.raises(TypeError, match=f"{field} must be True or False, got {value!r}"):
        GPTRecipe(**{field: value})


def _no_work(monkeypatch):
    """Any training or timing from here on fails the test: a bad argument must be refused before it."""
    def work(*a, **k):
        raise AssertionError("trained or timed before the arguments were checked")
    from gpulab.course.capstone import torch_ablation as capstone_torch

    monkeypatch.setattr(gpt_train, "_blocks", work)                    # every model a recipe trains or times
    monkeypatch.setattr(capstone_torch, "_ceiling", work)              # the ablation's measured ceilings


@pytest.mark.parametrize("bad,match", [(dict(accuracy_tolerance=5), "accuracy_tolerance must be a fraction in"),
                                       (dict(accuracy_tolerance=1.0), "accuracy_tolerance"),
                                       (dict(accuracy_tolerance=-0.1), "accuracy_tolerance"),
                                       (dict(speedup=float("nan")), "speedup must be a target ratio"),
                                       (dict(speedup=float("inf")), "speedup"), (dict(speedup=0), "speedup"),
                                       (dict(speedup=-2.0), "speedup"), (dict(speedup="2"), "speedup"),
                                       (dict(speedup=True), "speedup"), (dict(baseline=3), "baseline must be"),
                                       (dict(min_run_time=0), "min_run_time"), (dict(name=""), "name")])
def test_the_challenge_refuses_what_would_pass_or_fail_anything_before_any_timing(monkeypatch, bad, match):
    from gpulab import course

    _no_work(monkeypatch)
    args = dict(name="faster", shape=SHAPE, yours=GPTRecipe(micro_batch=2), device="cpu")
    with pytest.raises((TypeError, ValueError), match=match):
        course.gpt_challenge(**{**args, **bad})
    with pytest.raises((TypeError, ValueError), match=match):           # not answered yet: still checked
        course.gpt_challenge(**{**args, "yours": None, **bad})


def test_training_leaves_the_callers_random_generators_as_they_were():
    import random

    import numpy as np

    torch.manual_seed(1234)
    random.seed(5)
    np.random.seed(6)
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy()
    train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=2, device="cpu", eval_windows=2)
    gpt_train.gpt_stepper(SHAPE, GPTRecipe(micro_batch=2), device="cpu", seed=3)()
    assert torch.equal(torch.get_rng_state(), before[0])               # re-seeded to 0 before: weights, then batches
    assert random.getstate() == before[1] and np.array_equal(np.random.get_state()[1], before[2])
    again = train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=2, device="cpu", eval_windows=2)
    torch.manual_seed(99)                                               # the caller's seed does not change the run
    assert train_gpt(SHAPE, GPTRecipe(micro_batch=2), steps=2, device="cpu", eval_windows=2).losses == again.losses


def test_a_context_longer_than_the_text_is_refused_before_training(monkeypatch):
    _, held = gpt_train.split_text(text_tokens())
    _no_work(monkeypatch)
    too_long = TransformerShape(layers=1, d_model=32, heads=2, seq_len=len(held) - 1, vocab=256)
    with pytest.raises(ValueError, match=rf"shape.seq_len={len(held) - 1} is longer than the course's held-out text .*"
                                         rf"allows: it has {len(held):,} tokens.*at most {len(held) - 2:,}"):
        train_gpt(too_long, GPTRecipe(micro_batch=1), steps=2, device="cpu")
    longest = TransformerShape(layers=1, d_model=32, heads=2, seq_len=len(held) - 2, vocab=256)
    gpt_train._args(longest, GPTRecipe(), "cpu", held_out=True)       # the longest it allows passes the check
    with pytest.raises(ValueError, match="training text"):
        gpt_train.gpt_stepper(TransformerShape(layers=1, d_model=32, heads=2, seq_len=10**7, vocab=256), GPTRecipe())


@pytest.mark.parametrize("call,match", [
    (lambda: train_gpt(TransformerShape(1, 32, 2, 32, 100), GPTRecipe(), device="cpu"), "vocab=100 is smaller"),
    (lambda: train_gpt(SHAPE, {"precision": "bf16"}, device="cpu"), "recipe must be a course.GPTRecipe"),
    (lambda: train_gpt(SHAPE, GPTRecipe(), seed=-1, device="cpu"), "seed must be a whole number >= 0"),
    (lambda: train_gpt(SHAPE, GPTRecipe(), seed=2.5, device="cpu"), "seed"),
    (lambda: train_gpt(SHAPE, GPTRecipe(), run=3, device="cpu"), "run must be an open"),
    (lambda: train_gpt(SHAPE, GPTRecipe(), device="tpu"), "device='tpu'"),
    (lambda: gpt_train.gpt_stepper(SHAPE, 3), "recipe must be"),
    (lambda: gpt_changes(SHAPE, device="cpu", compile_on_cpu="yes"), "compile_on_cpu"),
    (lambda: gpt_ablation(SHAPE, baseline=3, device="cpu"), "baseline must be"),
    (lambda: gpt_ablation(SHAPE, compare_s=-1, device="cpu"), "compare_s"),
    (lambda: gpt_ablation(SHAPE, accuracy_tolerance=1.0, device="cpu"), "accuracy_tolerance"),
    (lambda: gpt_ablation(SHAPE, price_per_hour="no-such-price", device="cpu"), "price_per_hour"),
    (lambda: gpt_ablation(SHAPE, track=["x"], device="cpu"), "track"),
    (lambda: lever_ablation.micro_batches_that_fit(SHAPE, GPTRecipe(), device="cpu", up_to=0), "up_to")])
def test_bad_arguments_are_refused_by_name_before_any_work(monkeypatch, call, match):
    _no_work(monkeypatch)
    with pytest.raises((TypeError, ValueError), match=match):
        call()
