"""course.ablate and course.Change given what a learner's own train/apply/compare functions can get wrong, and lesson
12's other entry points given bad arguments: each mistake is a TypeError/ValueError naming it (before any training
where the arguments alone show it), never a raw 'int object is not iterable' from inside the loop, nor a table built
on a broken figure."""
from __future__ import annotations

import math
from types import SimpleNamespace as NS

import pytest

from gpulab import course
from gpulab.course.capstone.ablation import Change, ablate


def fake(recipe, run, **result):
    return NS(**{"samples_per_s": 100.0 * recipe["b"], "spread_pct": 1.0, "test_accuracy": 0.9,
                 "peak_memory_bytes": None, "flops_per_sample": 1e6, **result})


def apply(recipe, fields):
    return {**recipe, **fields}


B2 = [Change("b2", {"b": 2})]


@pytest.mark.parametrize("make,kind,match", [
    (lambda: Change("x", {}), ValueError, "fields of 'x' is empty"),
    (lambda: Change("x", {3: 1}), TypeError, r"fields of 'x' must name recipe fields by text, got keys \[3\]"),
    (lambda: Change("x", lambda: {"b": 2}), TypeError, r"fields of 'x' must be a function of 1 argument"),
    (lambda: Change("x", {}, available=1), TypeError, "available must be True or False")])
def test_a_change_is_checked_when_made(make, kind, match):
    with pytest.raises(kind, match=match):
        make()
    assert Change("on a GPU only", {}, available=False, why_not="no GPU").fields == {}     # listed, never applied


@pytest.mark.parametrize("kw,kind,match", [
    (dict(changes=[Change("x", {"b": 2}), Change("x", {"b": 3})]), ValueError, r"\['x'\] repeated"),
    (dict(changes=[Change("seed loop", {"b": 2})]), ValueError, r"\['seed loop'\] repeated"),
    (dict(changes=[Change("x", {"b": 2}, retry_of="nope")]), ValueError, "retry_of='nope' of change 'x'"),
    (dict(train=lambda r: None), TypeError, r"train must be a function of 2 arguments \(recipe, run\)"),
    (dict(apply=lambda r: r), TypeError, r"apply must be a function of 2 arguments"),
    (dict(compare=lambda a: 1.0), TypeError, "compare must be a function of 2 arguments")])
def test_what_the_arguments_show_is_refused_before_any_training(kw, kind, match):
    trained = []
    args = dict(train=lambda r, run: trained.append(r) or fake(r, run), baseline={"b": 1}, changes=B2, apply=apply)
    with pytest.raises(kind, match=match):
        ablate(**{**args, **kw})
    assert trained == []


@pytest.mark.parametrize("kw,kind,match", [
    (dict(changes=[Change("x", lambda r: 3)]), TypeError, "the fields function of 'x' must return"),
    (dict(changes=[Change("x", lambda r: "b")]), TypeError, "the fields function of 'x' must return"),
    (dict(changes=[Change("x", lambda r: [(3, {"b": 2})])]), TypeError, "the fields function of 'x' must return"),
    (dict(changes=[Change("x", lambda r: [("a", 3)])]), TypeError, "the fields of 'a' from the fields function"),
    (dict(apply=lambda r, f: None), TypeError, r"apply\(recipe, fields\) returned None for 'b2'"),
    (dict(describe=lambda r: 3), TypeError, "describe returned int 3 for 'seed loop': it must return a text"),
    (dict(params=lambda r: 3), TypeError, "params returned int 3"),
    (dict(ceiling=lambda r: 3), TypeError, r"ceiling returned 3 for 'seed loop': it must return \(dtype, FLOP/s\)"),
    (dict(compare=lambda a, b: 3), ValueError, r"compare\(current, candidate\) returned 3 for 'b2'"),
    (dict(compare=lambda a, b: (math.nan, 1.0)), ValueError, r"returned \(nan, 1.0\)"),
    (dict(compare=lambda a, b: (-1.0, 1.0)), ValueError, "a finite gain > 0"),
    (dict(train=lambda r, run: fake(r, run, spread_pct=-1.0)), ValueError, "spread_pct=-1.0"),
    (dict(train=lambda r, run: fake(r, run, peak_memory_bytes="x")), ValueError, "peak_memory_bytes='x'"),
    (dict(train=lambda r, run: fake(r, run, flops_per_sample=math.nan)), ValueError, "flops_per_sample=nan"),
    (dict(train=lambda r, run: fake(r, run, epoch_times_s=[-1.0, 1.0])), ValueError, "epoch_times_s"),
    (dict(train=lambda r, run: fake(r, run, joules_per_sample=-1.0)), ValueError, "joules_per_sample=-1.0")])
def test_what_the_functions_return_is_checked_before_a_decision_rests_on_it(kw, kind, match):
    """Before: 'int' object is not iterable, not subscriptable, a silent row for a negative spread or a gain of NaN
    read as a diverged change."""
    args = dict(train=fake, baseline={"b": 1}, changes=B2, apply=apply)
    with pytest.raises(kind, match=match):
        ablate(**{**args, **kw})


def test_a_branch_with_nothing_to_try_is_listed_not_applied():
    table = ablate(fake, {"b": 1}, [Change("maybe", lambda r: [], branch=True)], apply=apply)
    assert [(s.label, s.decision) for s in table.steps] == [("seed loop", "baseline"), ("maybe", "not tried")]


# ---- lesson 12's other entry points -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    return course.digits(n_train=256, n_test=64, download=False)


def test_digits_beyond_mnists_size_are_refused_before_a_stand_in_is_made():
    """Before: download=False made a stand-in of the size asked, 10**9 images, and the process was killed."""
    with pytest.raises(ValueError, match="n_train=1000000000 is more than the 60,000 images MNIST has"):
        course.digits(n_train=10**9, download=False)
    with pytest.raises(ValueError, match="n_test=10001 is more than the 10,000"):
        course.digits(n_test=10_001, download=False)


def test_the_challenge_checks_its_arguments_even_before_it_is_answered(digits):
    run = course.RecipeRun(course.Recipe(), "cpu", 2, 100, (1.0, 1.0), (), 0.9, None, 1e6)
    for kw, match in [(dict(speedup=math.nan), "speedup"), (dict(accuracy_tolerance=1.0), "accuracy_tolerance"),
                      (dict(compare_s=-1.0), "compare_s"), (dict(data="digits"), "data must be the digits"),
                      (dict(baseline=None), "baseline must be"), (dict(name=""), "name"),
                      (dict(not_from="table"), "not_from"), (dict(epochs=0), "epochs")]:
        with pytest.raises((TypeError, ValueError), match=match):
            course.recipe_challenge(**{"name": "n", "recipe": None, "data": digits, "baseline": run, **kw})


def test_the_ablation_drivers_check_every_argument_before_training(digits):
    for kw, match in [(dict(data=3), "data must be"), (dict(epochs=0), "epochs"), (dict(batch_size=2.5), "batch_size"),
                      (dict(compile_on_cpu="yes"), "compile_on_cpu"), (dict(accuracy_tolerance=5), "accuracy_tolerance"),
                      (dict(budget="1GiB"), "budget"), (dict(disk_images=0), "disk_images"),
                      (dict(compare_s=math.inf), "compare_s"), (dict(accuracy_seeds=-1), "accuracy_seeds"),
                      (dict(track="runs"), "track"), (dict(device="tpu"), "device"), (dict(judge="loss"), "judge"),
                      (dict(max_epochs=2), "max_epochs")]:
        with pytest.raises((TypeError, ValueError), match=match):
            course.torch_ablation(**{"data": digits, **kw})
    for kw, match in [(dict(batch_size=0), "batch_size"), (dict(accuracy_tolerance=1.0), "accuracy_tolerance"),
                      (dict(lr_rule="cubic"), "lr_rule"), (dict(track=3), "track")]:
        with pytest.raises((TypeError, ValueError), match=match):                  # before TensorFlow starts
            course.keras_ablation(**{"data": digits, **kw})


def test_the_results_card_and_the_lesson_helpers_name_what_is_wrong(tmp_path):
    t = course.your_numbers([course.measured("q", 1.0, "x")])
    for call, match in [(lambda: course.results_card("t", 3, folder=tmp_path), "tables must be a list"),
                        (lambda: course.results_card("t", [t], headline=[("a",)], folder=tmp_path), "headline"),
                        (lambda: course.results_card("t", [t], folder=3), "folder"),
                        (lambda: course.results_card("t", [t], folder=tmp_path, name="../x"), "name must be a file"),
                        (lambda: course.check_tracked("n", None, metrics="loss"), "metrics"),
                        (lambda: course.check_tracked("n", None, trace="yes"), "trace"),
                        (lambda: course.describe_price(1.0), "price must be a gl.cost.Price"),
                        (lambda: course.lesson_price(1.0, device="tpu"), "device='tpu'"),
                        (lambda: course.narrate(cpu=None, cuda="x", kind="cpu"), "cpu must be a Markdown text"),
                        (lambda: course.narrate(cpu="x", cuda="y", noisy=1), "noisy must be True or False"),
                        (lambda: course.check("n", 1.0, 1.0, rtol=math.nan), "rtol"),
                        (lambda: course.check("n", 1.0, 1.0, hint=3), "hint"),
                        (lambda: course.predict("k", [1]), "value, the prediction"),
                        (lambda: course.measured("q", 1.0, "x", vs=[3]), "vs for 'q'"),
                        (lambda: course.your_numbers(3), "rows must be a list"),
                        (lambda: course.by_this_course("f", unit=3), "unit"),
                        (lambda: course.by_this_course("f", root=3), "root")]:
        with pytest.raises((TypeError, ValueError), match=match):
            call()
    from gpulab.course.capstone.ablation import ablate as _ablate

    table = _ablate(fake, {"b": 1}, B2, apply=apply)
    with pytest.raises(KeyError, match="label=3 is not a row of the table"):
        course.mfu_report(table, 3, model=100)
