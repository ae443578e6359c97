"""Lesson 10 on CUDA: torch.compile measured by gl.compiling.compile_report, a CUDA graph replay that gives the
eager output, and mixed precision against fp32 on a matmul-heavy training step."""
from __future__ import annotations

import gpulab as gl
from gpulab import course


def _chain(x):
    """Lesson 10's elementwise chain: nine operators, each reading its inputs and writing a new tensor."""
    import torch

    y = x * 1.5 + 0.5
    y = torch.sin(y) * torch.cos(y)
    y = torch.relu(y) + x
    return y * 0.1 - 1.0


def test_compile_report_on_cuda_measures_compile_time_and_speedup(figure):
    import torch

    x = torch.randn(2**24, device="cuda")                  # 64 MiB: memory-bound, so fusion pays
    report = gl.compiling.compile_report(_chain, x, label="elementwise chain", explain=False, min_run_time=0.3,
                                         device="cuda")
    assert report.backend == "inductor" and report.compiles >= 1, (
        f"the first compiled call compiled {report.compiles} graph(s) with backend {report.backend!r}")
    assert report.first_call_s > 0 and report.compile_s > 0, (
        f"compile time should be positive: first call {report.first_call_s:.3f} s, steady compiled call "
        f"{report.compiled.median_s * 1e3:.3f} ms")
    assert report.recompiles == 0, f"{report.recompiles} recompilation(s) while timing the same input:\n{report}"
    figure("compile_time_chain", report.compile_s, "s", note="torch.compile (Inductor) of a 9-operator elementwise "
           "chain on 2**24 floats: first call minus a steady call")
    figure("compile_speedup_chain", report.speedup, "x",
           note=f"eager {report.eager.median_s * 1e3:.3f} ms -> compiled {report.compiled.median_s * 1e3:.3f} ms"
                + (" (noisy)" if report.noisy else ""))
    assert report.speedup > 1.0, (
        f"Inductor fuses the chain into one kernel that reads x once and writes once, so on a GPU it should beat "
        f"eager's nine kernels: speedup {report.speedup:.2f}x\n{report}")


def test_cuda_graph_replay_equals_eager_output(figure):
    import torch

    torch.manual_seed(0)
    model = course.models.mlp(in_features=256, hidden=256, layers=4).to("cuda").eval()
    one = torch.randn(1, 256, device="cuda")
    with torch.inference_mode():
        replay = gl.compiling.cuda_graph(model, one.clone())
        torch.testing.assert_close(replay(one), model(one), rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"CUDA graph replay differs from eager on the captured input: {m}")
        other = torch.randn(1, 256, device="cuda")
        torch.testing.assert_close(replay(other).clone(), model(other), rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"replay with a new input (copied into the static one) differs: {m}")
        timed = gl.benchmark_interleaved({"eager": lambda: model(one), "CUDA graph": lambda: replay(one)},
                                         min_run_time=0.3, device="cuda")
    assert hasattr(replay, "graph") and isinstance(replay.graph, torch.cuda.CUDAGraph)
    figure("cuda_graph_speedup_mlp_batch1", timed["eager"].median_s / timed["CUDA graph"].median_s, "x",
           note=f"eager {timed['eager'].median_s * 1e6:.0f} us -> replay {timed['CUDA graph'].median_s * 1e6:.0f} us "
                "per call, a 4-layer MLP at batch 1 (launch overhead removed)")


def test_mixed_precision_speeds_up_a_matmul_heavy_step(figure):
    import torch
    import torch.nn.functional as F

    choice = gl.choose_precision()
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[choice.precision]
    torch.manual_seed(0)
    model = course.models.mlp(in_features=2048, hidden=4096, layers=3).to("cuda")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(2048, 2048, device="cuda")
    y = torch.randint(0, 10, (2048,), device="cuda")
    scaler = torch.amp.GradScaler("cuda") if choice.needs_scaler else None

    def step_fp32():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def step_amp():
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    with course.tf32(False):                                 # the fp32 baseline in true fp32
        timed = gl.benchmark_interleaved({"fp32": step_fp32, choice.precision: step_amp}, min_run_time=0.5,
                                         device="cuda", items=2048)
        with torch.autocast("cuda", dtype=dtype):
            loss = F.cross_entropy(model(x), y)
    assert torch.isfinite(loss), f"the {choice.precision} autocast loss is {loss}"
    speedup = timed["fp32"].median_s / timed[choice.precision].median_s
    figure(f"amp_speedup_{choice.precision}", speedup, "x",
           note=f"{choice.precision} autocast{' + GradScaler' if scaler else ''} vs fp32 (TF32 off): a 2048-4096x3-10 "
                f"MLP training step at batch 2048; {choice.reason}")
    assert speedup > 1.0, (
        f"{choice.precision} autocast should run this matmul-bound step faster than fp32 on tensor cores: "
        f"{speedup:.2f}x ({timed['fp32'].median_s * 1e3:.2f} ms -> {timed[choice.precision].median_s * 1e3:.2f} ms)")
