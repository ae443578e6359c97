"""What the capstone loop, profile, the compile reports and Monitor must refuse, report or leave as they found it:
a loss that diverges, float pixels, steps that run no work, the environment, the caller's random generators,
DataLoader workers after an interrupt, a Monitor whose sampler is slow to stop, and NumPy whole numbers."""
from __future__ import annotations

import gc
import importlib.util
import math
import os
import random
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if importlib.util.find_spec("torchvision") is None:    # not importorskip: importing torchvision imports Triton,
    pytest.skip("torchvision is not installed", allow_module_level=True)   # before test_kernels picks its mode

import gpulab as gl  # noqa: E402
from gpulab import course  # noqa: E402
from gpulab.course.capstone import recipe as capstone  # noqa: E402


@pytest.fixture(scope="module")
def small():
    return course.digits(n_train=640, n_test=200, download=False)


def _diverge_at(monkeypatch, step_no, when=lambda recipe: True):
    """Make training diverge at ``step_no``: the weights become NaN, as a too-large step would make them."""
    orig = capstone._Trainer.step

    def step(self, x, y):
        loss = orig(self, x, y)
        if when(self.recipe) and self.steps_done >= step_no:
            with torch.no_grad():
                for p in self.model.parameters():
                    p.fill_(float("nan"))
            return loss * float("nan")
        return loss
    monkeypatch.setattr(capstone._Trainer, "step", step)


# ---- a loss that becomes NaN -------------------------------------------------------------------------
def test_a_diverged_recipe_stops_and_says_so_and_its_tracked_run_ends_cleanly(small, monkeypatch, tmp_path):
    pytest.importorskip("mlflow")
    _diverge_at(monkeypatch, 3)
    with gl.tracking.track("too fast", root=tmp_path, experiment="nan", tensorboard=False) as run:
        r = course.train_recipe(course.Recipe(batch_size=64, data="host", log_every=2), small, epochs=3, run=run)
    assert r.diverged and r.diverged_at_step == 4 and math.isnan(r.test_accuracy)
    assert math.isnan(r.losses[-1][1]) and r.losses[-1][0] == 4 and r.epoch_times_s == ()
    assert "diverged at step 4: loss is nan" in r.notes[0] and "lower the learning rate" in r.notes[0]
    assert "diverged at step 4" in repr(r) and math.isnan(r.samples_per_s)
    stored = gl.tracking.runs("nan", root=tmp_path).rows[0]
    assert stored.status == "FINISHED" and stored.params["diverged_at_step"] == "4"
    assert math.isfinite(stored.metrics["loss"])                      # the finite point, step 2
    assert "test_accuracy" not in stored.metrics


def test_a_recipe_diverging_at_an_epochs_end_keeps_the_epochs_it_finished(small, monkeypatch):
    _diverge_at(monkeypatch, 10)                                     # 640 / 64: the last step of epoch 1
    r = course.train_recipe(course.Recipe(batch_size=64, data="host"), small, epochs=3)
    assert r.diverged_at_step == 10 and len(r.epoch_times_s) == 1 and math.isnan(r.test_accuracy)


def test_ablate_drops_a_change_whose_training_diverged(small, monkeypatch):
    _diverge_at(monkeypatch, 2, when=lambda recipe: recipe.lr == 0.5)
    t = course.ablate(lambda recipe, run: course.train_recipe(recipe, small, epochs=2, run=run),
                      course.Recipe(batch_size=64, data="host"), [course.Change("lr 0.5", {"lr": 0.5})],
                      apply=lambda r, f: replace(r, **f))
    assert [s.decision for s in t.steps] == ["baseline", "dropped"]
    assert t.steps[1].reason.startswith("diverged") and t.final.label == "seed loop"


# ---- pixels ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("data", ["host", "per-sample"])
def test_float_pixels_in_0_1_train_like_uint8_and_are_not_scaled_twice(small, data):
    floats = replace(small, train_x=small.train_x.float() / 255, test_x=small.test_x.float() / 255)
    kept = floats.train_x.clone()
    a = course.train_recipe(course.Recipe(batch_size=64, data=data), small, epochs=2)
    b = course.train_recipe(course.Recipe(batch_size=64, data=data), floats, epochs=2)
    assert b.test_accuracy > 0.3                    # divided by 255 twice, the inputs vanish: chance is 10%
    assert b.test_accuracy == pytest.approx(a.test_accuracy, abs=0.02)
    assert b.losses[0][1] == pytest.approx(a.losses[0][1], rel=1e-3)
    assert torch.equal(floats.train_x, kept)        # the caller's images are not divided in place


def test_float_pixels_outside_0_1_and_other_dtypes_are_refused_with_the_fix(small):
    wide = replace(small, train_x=small.train_x.float())
    with pytest.raises(ValueError, match=r"data.train_x holds floats from 0 to 255.*/ 255"):
        course.train_recipe(course.Recipe(data="host"), wide, epochs=1)
    with pytest.raises(ValueError, match="data.test_x"):
        course.train_recipe(course.Recipe(data="host"), replace(small, test_x=small.test_x.float()), epochs=1)
    with pytest.raises(TypeError, match="uint8 pixels"):
        course.train_recipe(course.Recipe(data="host"), replace(small, train_x=small.train_x.long()), epochs=1)


def test_float_digits_are_written_to_disk_as_the_same_images(small, tmp_path):
    from gpulab.course.capstone.data import _grey

    few = small.take(20)
    floats = replace(few, train_x=few.train_x.float() / 255)
    root = course.digits_on_disk(floats, tmp_path / "f")
    img = np.array(_grey(str(root / f"{int(few.train_y[0])}" / "000000.png")))
    assert np.array_equal(img, few.train_x[0].numpy())


# ---- the caller's random generators ------------------------------------------------------------------
def test_train_recipe_leaves_the_callers_random_generators_alone_and_is_reproducible(small):
    torch.manual_seed(123)
    random.seed(5)
    np.random.seed(7)
    before = torch.get_rng_state(), random.getstate(), np.random.get_state()
    a = course.train_recipe(course.Recipe(batch_size=64, data="host", log_every=3), small, epochs=2, seed=4)
    assert torch.equal(torch.get_rng_state(), before[0]) and random.getstate() == before[1]
    after = np.random.get_state()
    assert np.array_equal(after[1], before[2][1]) and after[2:] == before[2][2:]
    torch.manual_seed(999)                          # another global state: the same seed, the same run
    b = course.train_recipe(course.Recipe(batch_size=64, data="host", log_every=3), small, epochs=2, seed=4)
    assert a.losses == b.losses and a.test_accuracy == b.test_accuracy
    c = course.train_recipe(course.Recipe(batch_size=64, data="host", log_every=3), small, epochs=2, seed=5)
    assert c.losses != a.losses


def test_the_recipe_stepper_and_step_ceiling_leave_the_global_generator_alone(small):
    before = torch.get_rng_state()
    step = course.recipe_stepper(course.Recipe(batch_size=64, data="host"), small)
    step()
    course.recipe_ceiling(course.Recipe(batch_size=16), min_run_time=0.02)
    assert torch.equal(torch.get_rng_state(), before)


# ---- DataLoader workers after an interrupt ---------------------------------------------------------
def _workers(before):
    psutil = pytest.importorskip("psutil")
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in before and "forkserver" not in " ".join(p.cmdline()) and p.status() != "zombie":
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


def test_an_interrupted_recipe_leaves_no_dataloader_worker(small, monkeypatch):
    psutil = pytest.importorskip("psutil")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    orig = capstone._Trainer.step

    def step(self, x, y):
        if self.steps_done >= 2:
            raise KeyboardInterrupt
        return orig(self, x, y)
    monkeypatch.setattr(capstone._Trainer, "step", step)
    with pytest.raises(KeyboardInterrupt) as info:      # the traceback stays alive, as in a notebook
        course.train_recipe(course.Recipe(batch_size=32, workers=2), small, epochs=2)
    deadline = time.monotonic() + 5
    while _workers(before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _workers(before) == [] and info.value is not None


# ---- profile and the compile reports refuse steps that run no work ----------------------------------
def _gen():
    yield torch.ones(2) * 2


async def _coro():
    return torch.ones(2) * 2


async def _agen():
    yield torch.ones(2)


class _AsyncCall:
    async def __call__(self):
        return 1


_META = torch.nn.Linear(4, 4, device="meta")


def _meta_global_step():
    _META(torch.empty(2, 4, device="meta")).sum().backward()


def _meta_closure():
    m = torch.nn.Linear(4, 4, device="meta")
    return lambda: m(torch.empty(2, 4, device="meta"))


@pytest.mark.parametrize("fn, error, match", [
    (_gen, TypeError, "fn is a generator function"),
    (_coro, TypeError, "fn is an async function"),
    (_agen, TypeError, "fn is an async generator function"),
    (_AsyncCall(), TypeError, "fn is an async function"),
    (lambda: _gen(), TypeError, r"fn\(\) returned a generator"),
    (lambda: _coro(), TypeError, r"fn\(\) returned a coroutine"),
    (_META, ValueError, "fn is on the meta device"),
    (_meta_global_step, ValueError, "fn's global _META is on the meta device"),
    (_meta_closure(), ValueError, "fn's m is on the meta device"),
    (lambda: torch.ones(3, device="meta") * 2, ValueError, "operators ran on the meta device"),
])
def test_profile_refuses_a_step_that_runs_no_work(fn, error, match):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(error, match=match):
            gl.profile(fn, steps=2, trace=False, limits=False)
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_profile_without_counting_still_refuses_a_meta_result():
    with pytest.raises(ValueError, match="its result is a meta tensor"):
        gl.profile(lambda: torch.ones(3, device="meta") * 2, steps=1, trace=False, limits=False, count_work=False)


def test_compile_reports_refuse_generators_and_coroutines_and_never_count_negative_breaks():
    x = torch.ones(3)

    def gen(t):
        yield t * 2

    async def coro(t):
        return t * 2
    for f in (gen, coro):
        with pytest.raises(TypeError, match="fn is a"):
            gl.compiling.graph_breaks(f, x)
        with pytest.raises(TypeError, match="fn is a"):
            gl.compiling.compile_report(f, x, backend="eager", min_run_time=0.01)
        with pytest.raises(TypeError, match="fn is a"):
            gl.compiling.cuda_graph(f, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match=r"fn\(\) returned a coroutine"):
            gl.compiling.compile_report(lambda t: coro(t), x, backend="eager", min_run_time=0.01)
        with pytest.raises(TypeError, match=r"fn\(\) returned a generator"):
            gl.compiling.compile_report(lambda t: gen(t), x, backend="eager", min_run_time=0.01)
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]
    none = gl.compiling.graph_breaks(lambda: 3)             # nothing for TorchDynamo to trace
    assert none.breaks == 0 and "-1" not in repr(none)


# ---- profile's environment ---------------------------------------------------------------------------
@pytest.mark.parametrize("preset", [None, "2"])
def test_profile_sets_kineto_log_level_only_while_it_runs(monkeypatch, preset):
    if preset is None:
        monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("KINETO_LOG_LEVEL", preset)
    seen = []
    gl.profile(lambda: seen.append(os.environ.get("KINETO_LOG_LEVEL")) or torch.ones(2) * 2, steps=1, warmup=1,
               trace=False, limits=False)
    assert set(seen) == {preset or "6"} and os.environ.get("KINETO_LOG_LEVEL") == preset

    def fails():
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError, match="boom"):
        gl.profile(fails, steps=1, trace=False, limits=False)
    assert os.environ.get("KINETO_LOG_LEVEL") == preset


# ---- Monitor ----------------------------------------------------------------------------------------
@pytest.fixture
def slow_host(monkeypatch):
    """The host reading sleeps ``delay["s"]`` seconds: a sampler slow to stop."""
    from gpulab.telemetry import host

    delay = {"s": 0.0}
    orig = host.HostSampler.sample

    def sample(self):
        if delay["s"]:
            time.sleep(delay["s"])
        return orig(self)
    monkeypatch.setattr(host.HostSampler, "sample", sample)
    return delay


def _stuck(mon, delay):
    mon.start()
    time.sleep(0.05)
    delay["s"] = 1.5
    time.sleep(0.1)                                  # the thread is now inside a slow sample
    with pytest.warns(RuntimeWarning, match="still finishing"):
        trace = mon.stop(timeout=0.05)
    assert mon.finishing and not mon.running and any("still finishing" in n for n in trace.notes)


def test_a_stop_that_timed_out_says_so_and_a_second_stop_finishes_the_job(slow_host):
    mon = gl.Monitor(interval=0.01, gpus=False)
    _stuck(mon, slow_host)
    slow_host["s"] = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace = mon.stop(timeout=5)
    assert not mon.finishing and not any("still finishing" in n for n in trace.notes)
    mon.start()                                       # and it starts again
    assert mon.running
    mon.stop()


def test_start_waits_for_a_finishing_sampler_or_refuses_clearly(slow_host, monkeypatch):
    mon = gl.Monitor(interval=0.01, gpus=False)
    _stuck(mon, slow_host)
    monkeypatch.setattr(gl.Monitor, "START_WAIT_S", 0.05)
    with pytest.raises(RuntimeError, match="previous sampler is still finishing.*stop\\(\\) again"):
        mon.start()
    slow_host["s"] = 0.0
    monkeypatch.setattr(gl.Monitor, "START_WAIT_S", 5.0)
    mon.start()                                       # waits for the old thread, then starts
    assert mon.running
    mon.stop()
    assert not mon.finishing


def test_marks_before_start_are_refused():
    mon = gl.Monitor(interval=0.05, gpus=False)
    with pytest.raises(RuntimeError, match=r"mon.mark\(\) before the Monitor started.*with gl.Monitor"):
        mon.mark("eval")
    with pytest.raises(RuntimeError, match=r"mon.phase\(\) before the Monitor started"):
        with mon.phase("data"):
            pass
    with mon:
        mon.mark("eval")
        with mon.phase("data"):
            time.sleep(0.01)
    assert [m.name for m in mon.trace.marks] == ["eval", "data"] and mon.trace.marks[0].start_s > 0


# ---- NumPy whole numbers ----------------------------------------------------------------------------
def test_numpy_integers_are_whole_numbers_everywhere(small, tmp_path):
    pytest.importorskip("mlflow")
    i = np.int64
    recipe = course.Recipe(batch_size=i(64), workers=i(0), log_every=i(5), data="host")
    assert type(recipe.batch_size) is int and type(recipe.log_every) is int
    with gl.tracking.track("np", params=recipe.params(), root=tmp_path, tensorboard=False) as run:
        r = course.train_recipe(recipe, small, epochs=i(1), seed=i(2), run=run)
    assert r.epochs == 1 and type(r.epochs) is int
    s = gl.profile(lambda: torch.ones(4) * 2, steps=i(2), warmup=i(1), trace=False, limits=False)
    assert s.steps == 2 and s.warmup == 1
    fake = lambda rec, run: type("R", (), dict(samples_per_s=100.0, spread_pct=1.0, test_accuracy=0.9,  # noqa: E731
                                               peak_memory_bytes=None, flops_per_sample=1.0))()
    t = course.ablate(fake, {"b": 1}, [], apply=lambda r, f: {**r, **f}, rerun=lambda r, seed: 0.9,
                      accuracy_seeds=i(2))
    assert len(t.baseline.accuracies) == 3
