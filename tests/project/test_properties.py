"""Properties of the pure functions, checked on many generated inputs (hypothesis): the formatters read back to
the number they print, the Amdahl fit recovers the law it is given, shards cover the dataset the way
DistributedSampler does, learning-rate rules are monotone, out-of-memory messages parse back to their sizes, and
the argument checks accept exactly what they promise."""
from __future__ import annotations

import math
import re

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpulab import _check
from gpulab._format import NA, fmt_bytes, fmt_number, fmt_rate, fmt_seconds
from gpulab.memory.oom_message import parse_oom_message
from gpulab.roofline import amdahl_speedup, attainable_flops, fit_amdahl

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SOME = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_BINARY = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50}
_DECIMAL = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _read(text: str, units: dict[str, float], suffix: str = "") -> float:
    number, unit = text.split(" ")
    assert unit.endswith(suffix), text
    return float(number) * units[unit[: len(unit) - len(suffix)] if suffix else unit]


# ---- formatters -------------------------------------------------------------------------------------------------
@FAST
@given(st.integers(min_value=0, max_value=2**60))
def test_fmt_bytes_reads_back_within_its_three_digits(n):
    text = fmt_bytes(n)
    assert re.fullmatch(r"\d+(\.\d+)? (B|KiB|MiB|GiB|TiB|PiB)", text), text
    assert _read(text, _BINARY) == pytest.approx(n, rel=5e-3, abs=0.5)


@FAST
@given(st.floats(min_value=0, max_value=1e20, allow_nan=False))
def test_fmt_rate_reads_back_within_its_three_digits(x):
    text = fmt_rate(x, "B/s")
    assert _read(text, _DECIMAL, "B/s") == pytest.approx(x, rel=5e-3, abs=5e-3)


@FAST
@given(st.floats(min_value=1e-12, max_value=1e6, allow_nan=False))
def test_fmt_seconds_reads_back_within_its_three_digits(s):
    text = fmt_seconds(s)
    number, unit = text.split(" ")
    assert float(number) * _TIME[unit] == pytest.approx(s, rel=5e-3)


@FAST
@given(st.one_of(st.none(), st.just(math.nan)), st.sampled_from([fmt_bytes, fmt_rate, fmt_seconds, fmt_number]))
def test_every_formatter_says_NA_for_a_missing_value(x, fmt):
    assert fmt(x) == NA


@FAST
@given(st.integers(min_value=-9_999_999, max_value=9_999_999))
def test_fmt_number_prints_whole_numbers_exactly(n):
    assert int(fmt_number(n).replace(",", "")) == n


# ---- roofline and Amdahl ---------------------------------------------------------------------------------------
@FAST
@given(st.floats(min_value=0.0, max_value=1.0), st.floats(min_value=1e-3, max_value=1e3),
       st.lists(st.integers(min_value=2, max_value=256), min_size=1, max_size=6, unique=True))
def test_fit_amdahl_recovers_the_law_it_was_given(p, t1, more):
    workers = [1, *more]
    times = [t1 * ((1 - p) + p / n) for n in workers]
    fit = fit_amdahl(workers, times)
    assert fit.parallel_fraction == pytest.approx(p, abs=1e-6)
    assert fit.t1_s == pytest.approx(t1, rel=1e-6)
    assert 1.0 <= fit.max_speedup


@FAST
@given(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=1, max_value=10_000),
       st.integers(min_value=1, max_value=10_000))
def test_amdahl_speedup_grows_with_workers_and_stays_under_its_limit(p, a, b):
    lo, hi = sorted((a, b))
    s_lo, s_hi = amdahl_speedup(p, lo), amdahl_speedup(p, hi)
    assert 1.0 - 1e-12 <= s_lo <= s_hi + 1e-12
    assert s_hi <= (math.inf if p == 1 else 1 / (1 - p)) * (1 + 1e-12)


@FAST
@given(st.floats(min_value=0, max_value=1e6), st.floats(min_value=0, max_value=1e6),
       st.floats(min_value=1e6, max_value=1e18), st.floats(min_value=1e6, max_value=1e15))
def test_attainable_flops_is_the_lower_roof_and_monotone(i1, i2, peak, bw):
    lo, hi = sorted((i1, i2))
    assert attainable_flops(lo, peak, bw) == pytest.approx(min(peak, lo * bw))
    assert attainable_flops(lo, peak, bw) <= attainable_flops(hi, peak, bw) <= peak


# ---- shards and learning-rate rules ----------------------------------------------------------------------------
@SOME
@given(st.integers(min_value=1, max_value=300), st.integers(min_value=1, max_value=8), st.integers(0, 2**31 - 1),
       st.integers(0, 50), st.booleans(), st.booleans())
def test_shards_cover_the_dataset_like_distributed_sampler(n, world, seed, epoch, shuffle, drop_last):
    pytest.importorskip("torch")
    from gpulab.distributed import shard_indices

    assume(not drop_last or n >= world)
    shards = shard_indices(n, world, seed=seed, epoch=epoch, shuffle=shuffle, drop_last=drop_last)
    sizes = {len(s) for s in shards}
    flat = [i for s in shards for i in s]
    assert len(shards) == world and len(sizes) == 1           # every rank takes the same number of steps
    assert all(0 <= i < n for i in flat)
    if drop_last:
        assert len(flat) == len(set(flat)) == (n // world) * world     # disjoint, the remainder dropped
    else:
        assert set(flat) == set(range(n)) and len(flat) == math.ceil(n / world) * world   # padded by repeats
    assert shards == shard_indices(n, world, seed=seed, epoch=epoch, shuffle=shuffle, drop_last=drop_last)


@FAST
@given(st.floats(min_value=1e-6, max_value=10.0), st.integers(1, 4096), st.integers(1, 4096), st.integers(1, 4096))
def test_scale_lr_is_monotone_and_sqrt_is_gentler(base_lr, base, b1, b2):
    from gpulab.course.training.batching import scale_lr

    lo, hi = sorted((b1, b2))
    assert scale_lr(base_lr, base, lo) <= scale_lr(base_lr, base, hi) * (1 + 1e-12)
    assert scale_lr(base_lr, base, base) == pytest.approx(base_lr)
    lin, sq = scale_lr(base_lr, base, hi), scale_lr(base_lr, base, hi, rule="sqrt")
    assert (sq <= lin * (1 + 1e-12)) if hi >= base else (sq >= lin * (1 - 1e-12))


@FAST
@given(st.integers(0, 10_000), st.integers(0, 10_000), st.integers(0, 2_000), st.floats(0.0, 1.0))
def test_warmup_factor_rises_from_start_to_one_and_stays(s1, s2, warmup, start):
    from gpulab.course.training.batching import warmup_factor

    lo, hi = sorted((s1, s2))
    f_lo, f_hi = warmup_factor(lo, warmup, start), warmup_factor(hi, warmup, start)
    assert start - 1e-12 <= f_lo <= f_hi + 1e-12 <= 1.0 + 1e-12
    if hi >= warmup - 1:
        assert f_hi == pytest.approx(1.0)


# ---- out-of-memory messages -------------------------------------------------------------------------------------
_SIZES = st.tuples(st.integers(0, 99_999), st.sampled_from(["MiB", "GiB"]))


def _size(v):
    hundredths, unit = v
    return f"{hundredths / 100:.2f} {unit}", round(hundredths / 100 * {"MiB": 2**20, "GiB": 2**30}[unit])


@FAST
@given(_SIZES, _SIZES, _SIZES, st.integers(0, 7), st.lists(st.tuples(st.integers(1, 10**6), _SIZES), max_size=3))
def test_oom_messages_parse_back_to_their_sizes(req, cap, free, gpu, others):
    (r_txt, r), (c_txt, c), (f_txt, f) = _size(req), _size(cap), _size(free)
    procs = [(pid, *_size(s)) for pid, s in others]
    text = (f"CUDA out of memory. Tried to allocate {r_txt}. GPU {gpu} has a total capacity of {c_txt} of which "
            f"{f_txt} is free. " + "".join(f"Process {pid} has {t} memory in use. " for pid, t, _ in procs))
    m = parse_oom_message(text)
    assert (m.requested_bytes, m.capacity_bytes, m.free_bytes, m.gpu_index) == (r, c, f, gpu)
    assert m.other_processes == tuple((pid, b) for pid, _, b in procs)


@FAST
@given(st.text(max_size=300))
def test_parse_oom_message_never_raises_on_any_text(text):
    m = parse_oom_message(text)
    assert m is None or "out of memory" in text.lower()


# ---- the argument checks ---------------------------------------------------------------------------------------
@FAST
@given(st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.none(),
                 st.booleans()))
def test_positive_accepts_exactly_the_finite_positive_numbers(x):
    ok = not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) and x > 0
    try:
        assert _check.positive("x", x) == float(x) and ok
    except (TypeError, ValueError) as e:
        assert not ok and str(e).startswith("x must be")


@FAST
@given(st.one_of(st.integers(), st.floats(allow_nan=True), st.text(max_size=5), st.booleans()),
       st.integers(-3, 3))
def test_whole_accepts_exactly_the_whole_numbers_from_low(x, low):
    ok = isinstance(x, int) and not isinstance(x, bool) and x >= low
    try:
        assert _check.whole("n", x, low=low) == x and ok
    except (TypeError, ValueError) as e:
        assert not ok and str(e).startswith("n must be")


@FAST
@given(st.one_of(st.sampled_from(["cpu", "cuda", "cuda:0", "cuda:7", "mps", "tpu", "cpu:0", "cuda:x", "", "meta"]),
                 st.text(max_size=8), st.integers(-2, 9), st.floats(), st.none()))
def test_device_spelling_is_checked_before_anything_is_asked_of_torch(value):
    kinds_ok = value is None or (isinstance(value, str) and re.fullmatch(r"(cpu|cuda|mps)(:\d+)?", value.strip())) \
        or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)
    try:
        _check.device_arg("device", value, here=False)
        assert kinds_ok
    except (TypeError, ValueError) as e:
        assert not kinds_ok and "device" in str(e)


# ---- ceilings, kernel work, comparisons of results ---------------------------------------------------------------
_RATE = st.floats(min_value=1e3, max_value=1e16, allow_nan=False, allow_infinity=False)


@FAST
@given(_RATE, st.lists(st.tuples(st.text(min_size=1, max_size=5),
                                 st.one_of(_RATE, st.none(), st.just(math.nan), st.just(math.inf))), max_size=6))
def test_ceiling_for_never_lets_a_share_pass_100_percent_and_ignores_non_finite_rates(ceiling, rates):
    from gpulab.limits import ceiling_for

    cap, note = ceiling_for(ceiling, rates)
    finite = [r for _, r in rates if r is not None and math.isfinite(r)]
    assert math.isfinite(cap) and cap >= ceiling
    assert all(r / cap <= 1.0 for r in finite)
    assert (note is None) == (cap == ceiling)
    assert cap == max([ceiling, *finite])


@FAST
@given(st.one_of(st.just(0.0), st.just(-1.0), st.just(math.nan), st.just(math.inf), st.just(-math.inf)))
def test_ceiling_for_refuses_a_ceiling_that_is_not_a_positive_finite_rate(ceiling):
    from gpulab.limits import ceiling_for

    with pytest.raises(ValueError, match="ceiling"):
        ceiling_for(ceiling, [("a", 1.0)])


@FAST
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=8),
       st.floats(min_value=0.0, max_value=0.5, exclude_max=True))
def test_accuracy_floor_is_the_worst_seed_less_the_tolerance(accuracies, tolerance):
    from gpulab.course.capstone.ablation import accuracy_floor

    floor = accuracy_floor(accuracies, tolerance)
    assert floor == pytest.approx(min(accuracies) - tolerance)
    assert all(a >= floor for a in accuracies)


@SOME
@given(st.floats(min_value=0.0, max_value=1e15), st.floats(min_value=1.0, max_value=1e12),
       st.sampled_from(["T4", "A100 40GB SXM", "H100 SXM"]))
def test_a_kernel_is_memory_bound_exactly_below_the_gpus_ridge_point(flops, nbytes, gpu):
    import gpulab as gl
    from gpulab.kernels import KernelWork, kernel_roofline

    spec = gl.gpu_spec(gpu)
    row = kernel_roofline([KernelWork("k", flops, nbytes)], gpu=gpu).rows[0]
    ridge = spec.fp32_flops / spec.bandwidth_bytes_per_s
    assert row.intensity == pytest.approx(flops / nbytes)
    assume(abs(row.intensity - ridge) > 1e-9 * ridge)
    assert row.bound == ("memory" if row.intensity < ridge else "compute")
    assert row.predicted_s == pytest.approx(max(flops / spec.fp32_flops, nbytes / spec.bandwidth_bytes_per_s))


@SOME
@given(st.lists(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), min_size=1, max_size=20),
       st.floats(min_value=0.0, max_value=1e-3))
def test_check_kernel_matches_itself_and_catches_one_changed_element(values, shift):
    import torch
    from gpulab.kernels import check_kernel

    x = torch.tensor(values, dtype=torch.float64)
    assert check_kernel(x, x.clone()).ok
    y = x.clone()
    y[len(values) // 2] += 1.0 + abs(float(y[len(values) // 2])) * 1e-3
    assert not check_kernel(y, x).ok
