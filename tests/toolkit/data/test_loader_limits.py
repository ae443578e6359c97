"""measure_loader never hangs on an endless loader, and counts only the epochs that really delivered batches.

- limits: ``max_batches`` (timed batches) and ``max_s`` (seconds of the timed part) stop an endless loader; the
  result says so (``stopped_by``, in its text and HTML) and its figures cover the batches that ran; the defaults
  are finite and stop ``itertools.repeat(batch)`` by themselves.
- one-shot loaders (generators, iterators) are refused for more than one pass before any work, and an epoch after
  the first that delivers nothing is an error, never a silently wrong epoch count.
"""
from __future__ import annotations

import importlib.util
import inspect
import itertools
import math
import time

import numpy as np
import pytest

import gpulab as gl
from gpulab.data import measure as measure_mod


def _batch(i=0, n=4):
    return np.full((n, 3), float(i)), np.full(n, i, dtype=np.int64)


def _counter(delay=0.0, consumed=None):
    """An endless generator of small batches (itertools.count-style)."""
    for i in itertools.count():
        if consumed is not None:
            consumed.append(i)
        if delay:
            time.sleep(delay)
        yield _batch(i)


# ---- limits -----------------------------------------------------------------------------------------------------
def test_max_batches_stops_an_endless_generator_and_says_so():
    run = gl.measure_loader(_counter(), lambda b: None, label="endless", max_batches=7)
    assert run.batches == 7 and run.items == 28 and run.epochs == 1
    assert run.stopped_by == "max_batches" and run.truncated
    assert len(run.waits_s) == len(run.computes_s) == len(run.starts_s) == 7
    text, html = repr(run), run._repr_html_()
    assert "stopped" in text and "max_batches" in text and "max_batches" in html
    assert len(text.splitlines()) <= 10
    assert run.to_dict()["stopped_by"] == "max_batches"


def test_max_s_stops_an_endless_loader_after_about_that_long():
    t0 = time.perf_counter()
    run = gl.measure_loader(_counter(delay=0.01), lambda b: None, label="slow endless", max_batches=None, max_s=0.25)
    took = time.perf_counter() - t0
    assert run.stopped_by == "max_s" and 0.25 <= run.wall_s < 0.25 + 0.5
    assert took < 3.0
    # the figures are those of the batches that ran: ~10 ms of data wait each, nothing invented
    assert run.items == 4 * run.batches and 5 <= run.batches <= 30
    assert run.data_wait_s >= 0.009 * run.batches and run.data_wait_s + run.compute_s <= run.wall_s + 1e-6
    assert run.items_per_s == pytest.approx(run.items / run.wall_s)


def test_the_defaults_are_finite_and_stop_an_endless_loader_by_themselves():
    for fn in (gl.measure_loader, gl.data.measure_loaders):
        params = inspect.signature(fn).parameters
        assert params["max_batches"].default == measure_mod.MAX_BATCHES
        assert params["max_s"].default == measure_mod.MAX_S
    assert 1_000 <= measure_mod.MAX_BATCHES <= 1_000_000 and 10 <= measure_mod.MAX_S <= 600
    t0 = time.perf_counter()
    run = gl.measure_loader(itertools.repeat(_batch()), label="repeat")        # no limit given: the defaults
    assert time.perf_counter() - t0 < 30
    assert run.stopped_by == "max_batches" and run.batches == measure_mod.MAX_BATCHES


def test_a_limit_reached_as_the_loader_ends_is_not_a_cut():
    batches = [_batch(i) for i in range(5)]
    whole = gl.measure_loader(batches, warmup_batches=0, max_batches=5)
    assert whole.batches == 5 and whole.stopped_by is None and "stopped" not in repr(whole)
    cut = gl.measure_loader(batches, warmup_batches=0, max_batches=4)
    assert cut.batches == 4 and cut.stopped_by == "max_batches"
    # the last batch of epoch 1 reaches the limit, but epoch 2 was asked for: cut, and one epoch counted
    early = gl.measure_loader(batches, warmup_batches=0, epochs=2, max_batches=5)
    assert early.stopped_by == "max_batches" and early.epochs == 1 and early.batches == 5
    # the limit counts timed batches: the warm-up batch is not one of them
    warm = gl.measure_loader(batches, warmup_batches=1, epochs=2, max_batches=6)
    assert warm.batches == 6 and warm.epochs == 2 and warm.stopped_by == "max_batches"


def test_no_limit_is_refused_for_a_loader_known_to_be_endless():
    for loader in (itertools.count(), itertools.repeat(_batch()), itertools.cycle([_batch()])):
        with pytest.raises(ValueError, match="max_batches=None and max_s=None"):
            gl.measure_loader(loader, max_batches=None, max_s=None)
    run = gl.measure_loader([_batch()] * 3, warmup_batches=0, max_batches=None, max_s=None)   # finite: fine
    assert run.batches == 3 and run.stopped_by is None
    assert gl.measure_loader(itertools.repeat(_batch(), 3), warmup_batches=0, max_batches=None, max_s=None).batches == 3


@pytest.mark.parametrize("name, value, error", [
    ("max_batches", 0, ValueError), ("max_batches", -1, ValueError), ("max_batches", 2.5, TypeError),
    ("max_batches", "10", TypeError), ("max_batches", True, TypeError), ("max_batches", math.nan, TypeError),
    ("max_s", 0, ValueError), ("max_s", -1, ValueError), ("max_s", math.nan, ValueError),
    ("max_s", math.inf, ValueError), ("max_s", "10", TypeError), ("max_s", True, TypeError)])
def test_bad_limits_name_the_argument(name, value, error):
    consumed: list[int] = []
    with pytest.raises(error, match=name):
        gl.measure_loader(_counter(consumed=consumed), **{name: value})
    assert consumed == []                                                       # refused before any work
    with pytest.raises(error, match=name):
        gl.data.measure_loaders({"a": [_batch()] * 2}, **{name: value})


# ---- one-shot loaders and epoch counts -----------------------------------------------------------------------------
def test_a_generator_with_several_epochs_is_refused_before_any_work():
    consumed: list[int] = []
    with pytest.raises(ValueError, match="epochs=2") as e:
        gl.measure_loader(_counter(consumed=consumed), epochs=2)
    assert consumed == [] and "DataLoader" in str(e.value) and "epochs=1" in str(e.value)
    with pytest.raises(ValueError, match="epochs=3"):
        gl.measure_loader(iter([_batch()] * 4), epochs=3)                       # any iterator, not only generators
    run = gl.measure_loader((_batch(i) for i in range(4)), epochs=1)           # one pass is fine
    assert run.epochs == 1 and run.batches == 3


def test_a_list_counts_its_epochs():
    run = gl.measure_loader([_batch(i) for i in range(4)], lambda b: None, epochs=2)
    assert run.epochs == 2 and run.batches == 2 * 4 - 1 and run.items == 4 * run.batches and run.stopped_by is None
    assert "2 epochs" in repr(run)
    three = gl.measure_loader([_batch(i) for i in range(4)], epochs=3, warmup_batches=0)
    assert three.epochs == 3 and three.batches == 12


class _UsedUp:
    """Looks re-iterable (iter() gives a new object) but every pass shares one underlying iterator."""

    def __init__(self, n):
        self._it = iter([_batch(i) for i in range(n)])

    def __iter__(self):
        return (b for b in self._it)


def test_an_epoch_that_delivers_nothing_is_an_error_not_a_wrong_count():
    with pytest.raises(ValueError, match="epoch 2 of 3 delivered no batch"):
        gl.measure_loader(_UsedUp(4), epochs=3)


def test_measure_loaders_refuses_one_shot_loaders_it_would_iterate_twice():
    with pytest.raises(ValueError, match="'gen'.*rounds=2"):
        gl.data.measure_loaders({"list": [_batch()] * 3, "gen": _counter()}, rounds=2)
    with pytest.raises(ValueError, match="epochs=2"):
        gl.data.measure_loaders({"gen": _counter()}, rounds=1, epochs=2)
    run, = gl.data.measure_loaders({"gen": (_batch(i) for i in range(3))}, rounds=1)
    assert run.batches == 2 and run.epochs == 1


def test_measure_loaders_passes_the_limits_and_compare_loaders_shows_the_cut():
    a, b = gl.data.measure_loaders({"a": [_batch()] * 6, "b": [_batch()] * 3}, rounds=2, max_batches=4)
    assert a.stopped_by == "max_batches" and a.batches == 4 + 4 and a.epochs == 2      # merged rounds
    assert b.stopped_by is None and b.batches == 2 + 3 and b.epochs == 2
    endless, = gl.data.measure_loaders({"endless": itertools.repeat(_batch())}, rounds=1, max_s=0.05)
    assert endless.stopped_by == "max_s"
    table = gl.compare_loaders([a, b])
    assert "stopped by a limit" in repr(table) and "a (by max_batches)" in repr(table)
    assert "stopped by a limit" in table._repr_html_()
    assert "stopped by a limit" not in repr(gl.compare_loaders([b]))


def test_loader_run_refuses_an_unknown_stop_reason():
    run = gl.measure_loader([_batch()] * 2, warmup_batches=0)
    from dataclasses import replace

    with pytest.raises(ValueError, match="stopped_by"):
        replace(run, stopped_by="tired")
    with pytest.raises((TypeError, ValueError), match="epochs"):
        replace(run, epochs=0)


def test_dali_iterator_with_auto_reset_runs_several_epochs(tmp_path):
    """DALI's own iterator is its own iterator, yet restarts each epoch with auto_reset: not refused."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from gpulab import course
    from gpulab.course.data import dali as dali_mod

    images = course.synthetic_images(tmp_path / "s", n=8, classes=2, size=16)
    pipe = dali_mod._dali_pipeline(images, 4, 16, False, course.dali_plan("cpu"), 1, False, 0, 2)
    it = DALIGenericIterator(pipe, ["images", "labels"], reader_name="Reader",
                             last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)
    run = gl.measure_loader(it, epochs=3, warmup_batches=0)
    assert run.epochs == 3 and run.batches == 6 and run.items == 24
    once = DALIGenericIterator(dali_mod._dali_pipeline(images, 4, 16, False, course.dali_plan("cpu"), 1, False, 0, 2),
                               ["images", "labels"], reader_name="Reader", auto_reset=False)
    with pytest.raises(ValueError, match="epochs=2"):
        gl.measure_loader(once, epochs=2)


def test_an_endless_tf_dataset_is_stopped_or_refused():
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow not installed")
    from gpulab._tf import import_tensorflow

    tf = import_tensorflow()
    ds = tf.data.Dataset.from_tensors((np.zeros((4, 3), np.float32), np.zeros(4, np.int64))).repeat()
    run = gl.measure_loader(ds, label="tf repeat", max_batches=5)
    assert run.stopped_by == "max_batches" and run.batches == 5 and run.items == 20
    with pytest.raises(ValueError, match="repeat"):
        gl.measure_loader(ds, max_batches=None, max_s=None)
    finite = tf.data.Dataset.from_tensors((np.zeros((4, 3), np.float32), np.zeros(4, np.int64))).repeat(3)
    assert gl.measure_loader(finite, epochs=2, warmup_batches=0).epochs == 2      # tf.data restarts each pass


@pytest.mark.parametrize("loader", [3, None, "batches"])
def test_a_loader_that_is_not_an_iterable_of_batches_is_named(loader):
    with pytest.raises(TypeError, match="loader must be an iterable of batches"):
        gl.measure_loader(loader)
    with pytest.raises(TypeError, match="label"):
        gl.measure_loader([_batch()] * 2, label=3)
