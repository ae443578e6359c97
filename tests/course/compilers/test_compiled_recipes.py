"""Compiled recipes one after another in one process: each compiles afresh (Dynamo reset per recipe), so more recipes
than Dynamo's recompile limit still run compiled, and a compile lever that ran eager raises instead of being timed.

Dynamo is real here; its code generation is replaced by the "eager" backend (Inductor on a 2-core CPU costs tens of
seconds a graph), which leaves the caching, guards and the recompile limit as they are."""
from __future__ import annotations

import functools

import pytest
import torch

from gpulab import course
from gpulab.compiling import compiled_graphs
from gpulab.course.compilers import guard as compile_guard
from gpulab.course.transformers import train as gpt_train
from gpulab.course.transformers.train import GPTRecipe
from gpulab.transformer import TransformerShape

SHAPE = TransformerShape(layers=2, d_model=32, heads=2, seq_len=16, vocab=256)


@pytest.fixture
def dynamo(monkeypatch):
    """torch.compile with Dynamo's "eager" backend, the recompile limit patched per test, Dynamo reset after."""
    real = torch.compile
    monkeypatch.setattr(torch, "compile", functools.partial(real, backend="eager"))
    name, _ = compile_guard.recompile_limit()

    def limit(n):
        return torch._dynamo.config.patch(**{name: n})

    yield limit
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def digits():
    return course.digits(n_train=128, n_test=32, download=False)


RECIPES = [dict(batch_size=16), dict(batch_size=32, precision="bf16"), dict(batch_size=64),
           dict(batch_size=16, precision="bf16"), dict(batch_size=128)]


def test_more_capstone_recipes_than_the_recompile_limit_each_run_compiled(dynamo, digits):
    with dynamo(2):                      # five recipes, each guarding differently (batch size, autocast)
        for changes in RECIPES:
            step = course.recipe_stepper(course.Recipe(data="host", compile=True, **changes), digits)
            before = compiled_graphs()
            assert step() == changes["batch_size"]
            assert compiled_graphs() > before, f"{changes}: no graph compiled for this recipe: it ran eager"


def test_more_gpt_recipes_than_the_recompile_limit_each_run_compiled(dynamo):
    with dynamo(2):
        for changes in (dict(micro_batch=2), dict(micro_batch=3, precision="bf16"), dict(micro_batch=4),
                        dict(micro_batch=5, precision="bf16")):
            step = gpt_train.gpt_stepper(SHAPE, GPTRecipe(compile=True, **changes), device="cpu")
            before = compiled_graphs()
            assert torch.isfinite(step())
            assert compiled_graphs() > before, f"{changes}: no graph compiled for this recipe: it ran eager"


def test_a_recipe_reusing_a_graph_compiled_since_the_reset_is_compiled(dynamo, digits):
    # two steppers made before either steps (as an interleaved comparison does): the second reuses the first's graph
    with dynamo(2):
        current = course.recipe_stepper(course.Recipe(batch_size=16, data="host", compile=True), digits)
        candidate = course.recipe_stepper(course.Recipe(batch_size=16, data="host", compile=True,
                                                        optimizer="foreach"), digits)
        assert current() == candidate() == 16


def test_a_recipe_that_hit_the_recompile_limit_raises_naming_its_lever(dynamo, digits, monkeypatch):
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)      # as without the reset: earlier entries count
    with dynamo(1):
        course.recipe_stepper(course.Recipe(batch_size=16, data="host", compile=True), digits)()
        with pytest.raises(RuntimeError, match=r"Recipe\(batch 32.*compile lever.*ran eager.*"
                                               r"torch\._dynamo\.config\.(recompile_limit|cache_size_limit) \(1\)"):
            course.train_recipe(course.Recipe(batch_size=32, data="host", compile=True), digits, epochs=1)
        gpt_train.gpt_stepper(SHAPE, GPTRecipe(micro_batch=2, compile=True), device="cpu")()
        with pytest.raises(RuntimeError, match=r"GPTRecipe\(bf16.*compiled-blocks lever.*ran eager"):
            gpt_train.train_gpt(SHAPE, GPTRecipe(micro_batch=2, compile=True, precision="bf16"), steps=2,
                                device="cpu")


def test_a_compile_that_compiled_nothing_raises(dynamo, digits, monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda model, **kw: model)      # torch.compile disabled: eager
    with pytest.raises(RuntimeError, match="compile lever: torch.compile was asked for, but the step ran eager: "
                                           "no graph was compiled since Dynamo was reset"):
        course.recipe_stepper(course.Recipe(batch_size=16, data="host", compile=True), digits)()
    step = gpt_train.gpt_stepper(SHAPE, GPTRecipe(micro_batch=2, compile=True), device="cpu")
    with pytest.raises(RuntimeError, match="compiled-blocks lever"):
        step()


def test_recipes_without_compile_are_not_reset_or_checked(monkeypatch, digits):
    monkeypatch.setattr(torch._dynamo, "reset", lambda: pytest.fail("Dynamo reset for an eager recipe"))
    assert course.recipe_stepper(course.Recipe(batch_size=16, data="host"), digits)() == 16
    assert torch.isfinite(gpt_train.gpt_stepper(SHAPE, GPTRecipe(micro_batch=2), device="cpu")())


def test_the_guard_names_the_recipe():
    with pytest.raises(TypeError, match="what must name the recipe"):
        compile_guard.CompileGuard("")


def test_a_first_step_under_a_memory_watch_is_not_the_one_checked(dynamo):
    """gl.find_max_batch_size sizes its first trial under a TorchDispatchMode, where Dynamo compiles nothing (seen on
    an H200: lesson 13's largest-micro-batch search called the compiled recipe eager). That step runs unchecked; the
    first step outside a watch is checked."""
    from gpulab.memory.search import _LargestTensor

    f = torch.compile(lambda x: x.sin() + 1)
    guard = compile_guard.CompileGuard("sin + 1, compiled")
    with _LargestTensor():
        guard.first_step(f, torch.ones(3))
    assert not guard.checked
    guard.first_step(f, torch.ones(3))
    assert guard.checked
    step = gpt_train.gpt_stepper(SHAPE, GPTRecipe(micro_batch=2, compile=True), device="cpu")
    with _LargestTensor():
        assert torch.isfinite(step())                 # eager under the watch, and no error
    assert torch.isfinite(step())                     # compiled and checked outside it
