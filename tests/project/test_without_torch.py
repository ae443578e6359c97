"""Without PyTorch: `import gpulab` works, the calls that need no torch run, and every call that needs it fails with
one ImportError naming the ``pip install`` that adds it (the ``gpulab[torch]`` extra) (never a raw ModuleNotFoundError from deep inside).
The CPU's ceilings come from numpy there, so ``gl.compare(..., peak_flops=gl.machine_limits().peak_flops())`` works.

The interpreter runs without site-packages (``python -S``) on a folder of links to every installed package except
torch, torchvision, Triton and their helpers, so ``import torch`` and ``importlib.util.find_spec("torch")`` behave
exactly as on a machine where it was never installed."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LEFT_OUT = {"torch", "torchvision", "triton", "functorch", "torchgen"}

PROBE = textwrap.dedent('''
    import json, os, sys, tempfile
    import numpy as np
    import gpulab as gl
    os.chdir(tempfile.mkdtemp())
    x = np.ones((4, 3), dtype=np.float32)
    m = gl.benchmark(lambda: x.sum(), label="a", min_run_time=0.02, warn_noisy=False)
    calls = {
        # no torch needed
        "benchmark": lambda: m,
        "benchmark_interleaved": lambda: gl.benchmark_interleaved({"a": lambda: None}, min_run_time=0.02),
        "timer": lambda: gl.timer().__enter__(),
        "compare": lambda: gl.compare([m]),
        "published": lambda: gl.published("amp-pytorch"),
        "gpu_spec": lambda: gl.gpu_spec("T4"),
        "fit_amdahl": lambda: gl.fit_amdahl([1, 2], [1.0, 0.6]),
        "attainable_flops": lambda: gl.attainable_flops(1.0, 1e12, 1e11),
        "choose_precision": lambda: gl.choose_precision(gpu="T4"),
        "measure_loader": lambda: gl.measure_loader([x, x], warmup_batches=0),
        "Monitor": lambda: gl.Monitor(gpus=False).start().stop(),
        "system_info": lambda: gl.system_info(),
        "doctor": lambda: gl.doctor(),
        "device_query": lambda: gl.device_query(),
        "setup": lambda: gl.setup(),
        "torchrun_command": lambda: gl.torchrun_command("train.py", check_script=False),
        # the CPU's ceilings from numpy, and the README's comparison against them
        "machine_limits": lambda: gl.machine_limits(sizes=[128], copy_bytes=1 << 22, min_run_time=0.02),
        "compare_peak": lambda: gl.compare([m], peak_flops=gl.machine_limits(sizes=[128], copy_bytes=1 << 22,
                                                                           min_run_time=0.02).peak_flops()),
        "limits.measure_matmul": lambda: gl.limits.measure_matmul(64, min_run_time=0.02),
        # torch needed
        "device": lambda: gl.device(),
        "count_flops": lambda: gl.count_flops(lambda: None),
        "profile": lambda: gl.profile(lambda: None, steps=1),
        "phase": lambda: gl.phase("x").__enter__(),
        "peak_memory": lambda: gl.peak_memory(lambda: None),
        "memory_budget": lambda: gl.memory_budget(1 << 20).__enter__(),
        "breakdown": lambda: gl.breakdown(object(), object(), object()),
        "estimate": lambda: gl.estimate(lambda: None, lambda n: None, 2),
        "find_max_batch_size": lambda: gl.find_max_batch_size(lambda n: None, budget=1 << 20),
        "explain_oom": lambda: gl.explain_oom("CUDA out of memory. Tried to allocate 2.00 GiB"),
        "free_memory": lambda: gl.free_memory(),
        "machine_limits_gpu": lambda: gl.machine_limits("cuda"),
        "machine_limits_bf16": lambda: gl.machine_limits(dtypes=["bfloat16"]),
        "transfer.measure_transfer": lambda: gl.transfer.measure_transfer(1 << 16),
        "transfer.find_host_syncs": lambda: gl.transfer.find_host_syncs(lambda: None),
        "memory.memory_growth": lambda: gl.memory.memory_growth(lambda: None),
        "memory.smaller_card": lambda: gl.memory.smaller_card(1 << 20).__enter__(),
        "compiling.compile_report": lambda: gl.compiling.compile_report(lambda: None),
        "limits.step_matmul_ceiling": lambda: gl.limits.step_matmul_ceiling(lambda: None),
        "launch": lambda: gl.launch("train.py", nproc=1),
    }
    out = {}
    for name, call in calls.items():
        try:
            call()
            out[name] = "ok"
        except ModuleNotFoundError as e:
            out[name] = f"raw ModuleNotFoundError: {e}"
        except ImportError as e:
            out[name] = "hint" if "pip install torch torchvision (the 'gpulab[torch]' extra)" in str(e) else f"ImportError without the hint: {e}"
        except ValueError as e:      # a device or dtype only torch has: one line saying to install it
            out[name] = "hint" if "pip install" in str(e) and "torch" in str(e) else f"ValueError: {str(e)[:200]}"
        except Exception as e:
            out[name] = f"{type(e).__name__}: {str(e)[:200]}"
    print(json.dumps(out))
''')


def _site_without_torch(tmp: Path) -> Path:
    farm = tmp / "site"
    farm.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        top = entry.name.split("-")[0].split(".")[0].lower()
        if top in LEFT_OUT or entry.suffix == ".pth" or entry.name == "gpulab" or top == "__editable__":
            continue
        (farm / entry.name).symlink_to(entry)
    return farm


@pytest.mark.slow
def test_without_torch_every_call_works_or_says_how_to_install_it(tmp_path):
    farm = _site_without_torch(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "GPULAB"))}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{farm}"
    check = subprocess.run([sys.executable, "-S", "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
                           env=env, capture_output=True, text=True, timeout=60)
    assert check.stdout.strip() == "None", check.stderr      # torch really is absent in the child
    done = subprocess.run([sys.executable, "-S", "-c", PROBE], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(out, indent=1))
    no_torch = ["benchmark", "benchmark_interleaved", "timer", "compare", "published", "gpu_spec", "fit_amdahl",
                "attainable_flops", "choose_precision", "measure_loader", "Monitor", "system_info", "doctor",
                "device_query", "setup", "torchrun_command", "machine_limits", "compare_peak", "limits.measure_matmul"]
    assert {k: v for k, v in out.items() if k in no_torch and v != "ok"} == {}
    assert {k: v for k, v in out.items() if k not in no_torch and v != "hint"} == {}
