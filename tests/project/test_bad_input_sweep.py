"""The guard for bad input: every public call, given a table of bad values per parameter kind
(``tests/support/badinput.py``), refuses each with a ``TypeError``/``ValueError`` (or gpulab's own error) naming the
parameter; none is accepted as if it made sense, none hangs. ``python tests/support/badinput.py`` prints the details."""
from __future__ import annotations

import inspect

import pytest

from support import badinput
import gpulab as gl

@pytest.fixture(autouse=True)
def _forget_the_sweeps_ceilings():
    """The sweep measures tiny ceilings (64x64 matmuls, 1 MiB copies); later tests must not inherit them."""
    yield
    gl.limits.forget_limits()


# results made by a function of the face, not built by hand: their constructors are checked in their own tests
RESULTS = {"Measurement", "Comparison", "MachineLimits", "Trace"}


def test_every_public_call_of_the_face_is_in_the_sweep():
    swept = {c.name.split("(")[0].split(".")[0] for c in badinput.cases_()}
    public = {n for n in gl.__all__ if callable(getattr(gl, n)) and n not in RESULTS}
    assert public - swept == set()


def test_every_method_of_the_results_is_in_the_sweep():
    swept = {c.name for c in badinput.cases_()}
    for cls in (gl.Comparison, gl.Trace, gl.Measurement, gl.MachineLimits, gl.Monitor):
        methods = {f"{cls.__name__}.{k}" for k, v in vars(cls).items() if not k.startswith("_") and callable(v)
                   and len(inspect.signature(v).parameters) > 1}       # a method taking arguments
        assert methods - swept == set(), cls.__name__


def test_each_valid_call_of_the_sweep_works_and_leaves_the_process_as_it_found_it(tmp_path, monkeypatch):
    """A bad value is only refused for the right reason when the same call with good values works; and a gpulab
    call leaves no global state changed (environment, loggers, warnings filters, random generators, torch's
    switches, threads, child processes) and no data of the user's touched (tests/support/globalstate.py)."""
    from support import globalstate

    monkeypatch.chdir(tmp_path)
    globalstate.preimport()
    failed, leaked = [], []
    for case in badinput.cases_():
        why, left = badinput.check_state(case)
        failed += [why] if why else []
        leaked += left
    assert failed == []
    assert leaked == []


# the modules whose every public call is swept, beyond gpulab's face
MODULES = ("tracking", "compiling", "kernels", "limits", "streams", "profiling", "course.capstone.recipe",
           "course.capstone.ablation", "course.transformers.gpt", "course.transformers.train", "course.transformers.lever_ablation",
           "course.transformers.challenge",
           "course.transformers.generation", "attention")
NOT_CALLS = {"compiled_graphs", "forget_limits", "cuda_build_support", "seed_model",   # no arguments to get wrong
             "TrackedRun", "RunTable", "UICommands", "CompileReport", "Exported", "GraphBreaks", "OnnxModel",
             "KernelBackend", "KernelCheck", "Traffic", "Tuning", "KernelPoint", "KernelRoofline", "BuildSupport",
             "Extension", "MachineLimits", "StepMatmuls", "Span", "StreamTimeline", "ProfileSummary", "OpStat",
             "DeviceCheck", "ProfileComparison", "StepRoofline", "Attribution", "NsightCommands", "TFProfile", "RecipeRun",
             "AblationStep", "Ablation", "GPTRun", "GenerationRow", "GenerationSpeed", "SdpaReport", "KernelResources", "Occupancy",
             "TraceBreakdown", "RankTime",
             "text_tokens",                                                      # results, made by the calls
             "check_device_events", "diagnose_profile", "step_roofline",         # fed by gl.profile's own results
             "nvtx_capture", "tf_profile", "Run"}                                # swept as track() and Run.<method>


def test_every_public_call_of_the_newer_modules_is_in_the_sweep():
    import importlib

    swept = {c.name.split("(")[0].rsplit(".", 1)[-1] for c in badinput.cases_()}
    # in the lean compat venv (no MLflow, ONNX, Numba or HTA) these calls have no valid call to sweep from
    absent = ({"track", "runs", "load_trace"} if not badinput._installed("mlflow") else set()) | \
        ({"onnx_runtime"} if not badinput._installed("onnx", "onnxscript", "onnxruntime") else set()) | \
        ({"numba_backend"} if not badinput._installed("numba", "numba_cuda") else set()) | \
        ({"trace_breakdown"} if not badinput._installed("hta") else set()) | \
        ({"kernel_resources"} if not badinput.triton_compiles_ahead() else set())
    missing = {}
    for name in MODULES:
        mod = importlib.import_module(f"gpulab.{name}")
        calls = {n for n in mod.__all__ if callable(getattr(mod, n)) and n not in NOT_CALLS | absent}
        missing[name] = sorted(calls - swept)
    assert {k: v for k, v in missing.items() if v} == {}


@pytest.mark.slow
def test_bad_input_is_refused_clearly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = badinput.sweep()
    print(result)
    n = len(result.attempts)
    assert n >= 400 and result.cases >= 80
    assert result.count("hang") == 0, result
    assert result.count("silent") == 0, result
    assert result.count("leak") == 0, result
    assert result.count("loss") == 0, result
    assert result.count("clear") / n >= 0.99, result
