"""Lesson 12's capstone on CUDA: the seed loop and each device change of the PyTorch ablation (pinned memory, data
on the device, fp16 with a GradScaler, bf16, TF32, fused Adam, torch.compile, CUDA graphs) trained for a short run
on the offline MNIST stand-in, each finishing with finite losses and accuracy."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from gpulab import course

EPOCHS = 2            # the first epoch pays start-up and compilation; the second is timed
BATCH = 256
_RUNS: dict[str, object] = {}      # label -> RecipeRun, for the summary test at the end of this file


@pytest.fixture(scope="module")
def data():
    return course.digits(n_train=2048, n_test=256, download=False)


def _rows() -> dict[str, tuple[dict, str | None]]:
    """label -> (the changes on top of batch 256 with whole tensors, what the device must support or None)."""
    return {
        "pinned memory, non_blocking copies": ({"pin_memory": True}, None),
        "data on the device": ({"data": "device"}, None),
        "fp16 autocast + GradScaler": ({"data": "device", "precision": "fp16"}, None),
        "bf16 autocast": ({"data": "device", "precision": "bf16"}, "bf16"),
        "TF32 matmuls": ({"data": "device", "tf32": True}, "tf32"),
        "fused Adam": ({"data": "device", "optimizer": "fused"}, None),
        "torch.compile": ({"data": "device", "compile": True}, None),
        "CUDA graphs (compile, reduce-overhead)": ({"data": "device", "compile": True, "cuda_graphs": True}, None),
    }


def _unsupported(need: str | None) -> str | None:
    import torch

    from gpulab.rehearsal import compute_capability

    cc = compute_capability()                 # a rehearsed T4 (--as t4) plans for sm_75 on any GPU
    if need == "bf16" and not (cc >= (8, 0) and torch.cuda.is_bf16_supported()):
        return f"bf16 tensor cores need compute capability 8.0 or newer; this GPU is sm_{cc[0]}{cc[1]}"
    if need == "tf32" and not course.tf32_supported("cuda"):
        return f"TF32 needs compute capability 8.0 or newer; this GPU is sm_{cc[0]}{cc[1]}"
    return None


def _check_run(label: str, run) -> None:
    assert run.device.startswith("cuda"), f"{label}: trained on {run.device}, not on the GPU"
    assert run.epochs == EPOCHS and len(run.epoch_times_s) == EPOCHS, f"{label}: {run}"
    assert run.losses, f"{label}: no loss was read"
    bad = [(step, loss) for step, loss in run.losses if not math.isfinite(loss)]
    assert not bad, f"{label}: non-finite losses {bad[:5]} (overflow without a working GradScaler?)"
    assert run.test_accuracy is not None and math.isfinite(run.test_accuracy) and 0.0 <= run.test_accuracy <= 1.0, (
        f"{label}: test accuracy {run.test_accuracy}")
    assert run.samples_per_s > 0, f"{label}: throughput {run.samples_per_s}"
    assert run.memory_method == "cuda-allocator" and run.peak_memory_bytes and run.peak_memory_bytes > 0, (
        f"{label}: peak memory {run.peak_memory_bytes} ({run.memory_method})")


def test_seed_loop_runs_on_the_gpu(data):
    run = course.train_recipe(course.Recipe(), data, epochs=EPOCHS, device="cuda")
    _check_run("seed loop", run)
    _RUNS["seed loop"] = run


@pytest.mark.parametrize("label", list(_rows()))
def test_device_change_trains_with_finite_loss_and_accuracy(label, data):
    changes, need = _rows()[label]
    why = _unsupported(need)
    if why:
        pytest.skip(why)
    recipe = replace(course.Recipe(batch_size=BATCH, data="host"), **changes)
    if recipe.compile:
        import torch

        torch._dynamo.reset()           # a fresh cache: earlier tests' compiled graphs count toward recompile limits
    run = course.train_recipe(recipe, data, epochs=EPOCHS, device="cuda")
    _check_run(label, run)
    assert run.recipe == recipe
    _RUNS[label] = run


def test_fastest_recipe_against_the_seed(spec, figure):
    seed = _RUNS.get("seed loop")
    rest = {k: v for k, v in _RUNS.items() if k != "seed loop"}
    if seed is None or not rest:
        pytest.skip("the seed loop and the device changes above did not all run in this session (run the whole file)")
    label, best = max(rest.items(), key=lambda kv: kv[1].samples_per_s)
    speedup = best.samples_per_s / seed.samples_per_s
    figure("capstone_fastest_vs_seed", speedup, "x",
           note=f"{label} ({best.recipe.describe()}): {best.samples_per_s:,.0f} vs the seed loop's "
                f"{seed.samples_per_s:,.0f} samples/s, second of {EPOCHS} epochs on {best.samples_per_epoch:,} images")
    assert speedup > 1.0, (f"the fastest device recipe ({label}, {best.samples_per_s:,.0f} samples/s) should beat the "
                           f"seed loop's per-sample DataLoader at batch 32 ({seed.samples_per_s:,.0f} samples/s)")
    ceiling = course.recipe_ceiling(best.recipe, device="cuda", min_run_time=0.1)
    assert ceiling.flops_per_s > 0
    figure("capstone_fastest_share_of_step_matmul_ceiling", 100 * best.achieved_flops / ceiling.flops_per_s, "%",
           note=f"achieved {best.achieved_flops / 1e12:.3f} TFLOP/s; the step's own matmuls alone "
                f"{ceiling.flops_per_s / 1e12:.2f} TFLOP/s ({best.recipe.precision})")
    if spec is not None:
        peak = {"fp32": spec.tf32_tensor_flops if best.recipe.tf32 else spec.fp32_flops,
                "fp16": spec.fp16_tensor_flops, "bf16": spec.bf16_tensor_flops}[best.recipe.precision]
        if peak:
            figure("capstone_fastest_mfu", 100 * best.achieved_flops / peak, "%", datasheet=None,
                   note=f"model FLOPs utilisation against the {spec.name} datasheet peak for "
                        f"{best.recipe.precision}{' (TF32)' if best.recipe.tf32 else ''}: {peak / 1e12:.0f} TFLOP/s")
