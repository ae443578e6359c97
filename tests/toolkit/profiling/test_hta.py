"""``gl.profiling.trace_breakdown``: Holistic Trace Analysis (the real package) on kineto-shaped GPU traces
(``tests/support/fake_trace.py``) whose split is counted by hand, and the refusals: a trace from a CPU, two traces of one
rank, files that are not traces, HTA missing. HTA leaves no process, log level or warning filter behind."""
from __future__ import annotations

import json
import logging
import sys
import warnings

import psutil
import pytest

from support import fake_trace
from gpulab import profiling

hta = pytest.importorskip("hta", reason="Holistic Trace Analysis (requirements/addons.txt) is not installed")


def test_two_ranks_split_as_counted_by_hand(tmp_path):
    fake_trace.host_bound(rank=0, world_size=2).write(tmp_path / "rank0.pt.trace.json")
    fake_trace.busy_with_overlapped_comm(rank=1, world_size=2).write(tmp_path / "rank1.pt.trace.json.gz")
    b = profiling.trace_breakdown(tmp_path)
    r0, r1 = b.rank(0), b.rank(1)
    # rank 0: span 2,705 us; 600 us of GEMMs, 60 us of copies, 2,045 us idle, every gap waiting for a launch
    assert (r0.span_s, r0.compute_s, r0.non_compute_s, r0.idle_s) == pytest.approx((2705e-6, 600e-6, 60e-6, 2045e-6))
    assert r0.share("host_wait") == pytest.approx(1.0) and r0.comm_overlap is None
    # rank 1: span 2,910 us; 2,700 us of GEMMs, 15 us of all-reduce alone, 195 us idle; 195 of the all-reduce's
    # 200 us overlap a GEMM; the 5 us gaps between its queued GEMMs are launch gaps
    assert (r1.span_s, r1.compute_s, r1.non_compute_s, r1.idle_s) == pytest.approx((2910e-6, 2700e-6, 15e-6, 195e-6))
    assert r1.comm_overlap == pytest.approx(195 / 200, abs=0.005) and r1.kernel_wait_s == pytest.approx(30e-6)
    for r in (r0, r1):
        assert r.share("idle") + r.share("compute") + r.share("non_compute") == pytest.approx(1.0)
    # HTA's kernel types: the GEMMs alone, the GEMMs while the all-reduce ran (3 x 195 us), the all-reduce alone
    # (3 x 5 us) and the copies
    kinds = {k: (s, share) for k, s, share in b.kernel_types}
    assert {k: s for k, (s, _) in kinds.items()} == pytest.approx(
        {"COMPUTATION": 2715e-6, "COMPUTATION overlapping COMMUNICATION": 585e-6, "COMMUNICATION": 15e-6,
         "MEMORY": 60e-6})
    assert kinds["MEMORY"][1] == pytest.approx(60 / 3375, abs=1e-3)
    assert b.top_kernels[0][0] == "COMPUTATION" and b.top_kernels[0][2] == pytest.approx(3300e-6)
    assert "rank 0: the GPU was idle 76%" in b.reading and "waiting for the host" in r0.reading()
    assert r1.reading().startswith("rank 1: the GPU was computing 93%")
    frame = b.to_dataframe()
    assert list(frame.index) == [0, 1] and frame.loc[1, "comm_overlap"] == pytest.approx(0.975, abs=0.005)
    text, page = repr(b), b._repr_html_()
    assert "idle: host wait" in text and "no comm" in text and "<table" in page and ("97%" in page or "98%" in page)


def test_tiny_kernels_far_apart_read_as_launch_gaps(tmp_path):
    # 120 launches (correlation ids that fit int8) among 600 events: HTA 0.5 under pandas 3 fails on such a trace
    # unless its correlation column is widened (gpulab.profiling.hta._wide_correlations)
    path = fake_trace.tiny_kernels().write(tmp_path / "one.pt.trace.json")
    r = profiling.trace_breakdown(path).rank(0)       # no distributedInfo: rank 0
    # 3 steps of 40 kernels of 5 us, 10 us apart (kernel waits: 3 x 39 x 10 us), 410 us between steps (host waits)
    assert r.kernel_wait_s == pytest.approx(1170e-6) and r.host_wait_s == pytest.approx(820e-6)
    assert r.share("idle") == pytest.approx(1990 / 2590)
    assert "between back-to-back kernels" in r.reading() and "CUDA graph" in r.reading()
    # a smaller launch-gap threshold turns the same gaps into other waits
    assert profiling.trace_breakdown(path, kernel_gap_us=5).rank(0).kernel_wait_s == 0.0


def test_a_profile_summary_is_read_through_its_trace_file_and_a_cpu_trace_is_refused(tmp_path):
    import torch

    w = torch.randn(32, 32, requires_grad=True)
    summary = profiling.profile(lambda: (torch.randn(8, 32) @ w).sum().backward(), steps=2, warmup=1,
                                trace_dir=tmp_path)
    with pytest.raises(ValueError, match="hold no GPU kernels .recorded without a GPU.*ProfileSummary.attribution"):
        profiling.trace_breakdown(summary)
    with pytest.raises(ValueError, match="hold no GPU kernels"):
        profiling.trace_breakdown(summary.trace_path)
    quiet = profiling.profile(lambda: (torch.randn(8, 32) @ w).sum().backward(), steps=2, warmup=1, trace=False)
    with pytest.raises(ValueError, match="wrote no trace file: profile with gl.profile"):
        profiling.trace_breakdown(quiet)


def test_bad_traces_are_refused_by_name(tmp_path):
    a = fake_trace.host_bound(rank=0).write(tmp_path / "a" / "x.json")
    b = fake_trace.host_bound(rank=0).write(tmp_path / "b" / "y.json")
    with pytest.raises(ValueError, match=r"x.json' and '.*y.json' are both rank 0"):
        profiling.trace_breakdown([a, b])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="the folder holds no .json or .json.gz trace"):
        profiling.trace_breakdown(tmp_path / "empty")
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        profiling.trace_breakdown(tmp_path / "nope")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json is not a readable torch.profiler trace: JSONDecodeError"):
        profiling.trace_breakdown(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text(json.dumps([1, 2]))
    with pytest.raises(ValueError, match="has no traceEvents list"):
        profiling.trace_breakdown(tmp_path / "list.json")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="notes.txt is not a torch.profiler trace"):
        profiling.trace_breakdown(tmp_path / "notes.txt")
    doc = fake_trace.host_bound(rank=0).document()
    doc["distributedInfo"]["rank"] = "0"
    (tmp_path / "rank.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"distributedInfo.rank is '0', not a rank"):
        profiling.trace_breakdown(tmp_path / "rank.json")
    with pytest.raises(ValueError, match="traces must name a trace file or a folder of traces, got ''"):
        profiling.trace_breakdown("")
    for bad in (3, None, [], [3]):
        with pytest.raises(TypeError, match="traces must be a gl.profile summary, a trace file"):
            profiling.trace_breakdown(bad)
    with pytest.raises(ValueError, match="kernel_gap_us must be a non-negative finite number"):
        profiling.trace_breakdown(a, kernel_gap_us=-1.0)
    with pytest.raises(KeyError, match=r"rank 3 is not in these traces \(ranks \[0\]\)"):
        profiling.trace_breakdown(a).rank(3)


def test_a_failure_inside_hta_names_the_files(tmp_path, monkeypatch):
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis

    path = fake_trace.host_bound().write(tmp_path / "t.json")

    def broken(*a, **k):
        raise AssertionError("non_compute_time >= 0")

    monkeypatch.setattr(BreakdownAnalysis, "get_temporal_breakdown", broken)
    with pytest.raises(RuntimeError, match=r"could not read \[.*t.json'\]: AssertionError: non_compute_time"):
        profiling.trace_breakdown(path)


def test_without_hta_one_import_error_says_how_to_install(tmp_path, monkeypatch):
    path = fake_trace.host_bound().write(tmp_path / "t.json")
    for name in [m for m in sys.modules if m == "hta" or m.startswith("hta.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "hta", None)
    with pytest.raises(ImportError, match=r"pip install HolisticTraceAnalysis \(the 'gpulab\[hta\]' extra\)"):
        profiling.trace_breakdown(path)


def test_hta_leaves_no_process_log_level_or_warning_filter_behind(tmp_path):
    fake_trace.host_bound(rank=0, world_size=2).write(tmp_path / "r0.json")
    fake_trace.busy_with_overlapped_comm(rank=1, world_size=2).write(tmp_path / "r1.json")
    import hta.common.trace as trace_module

    hta_logger, root = logging.getLogger("hta"), logging.getLogger()
    state = lambda: (hta_logger.level, root.level, list(root.handlers), list(warnings.filters),  # noqa: E731
                     len(psutil.Process().children(recursive=True)), trace_module.transform_correlation_to_index)
    before = state()
    profiling.trace_breakdown(tmp_path)
    assert state() == before
