"""The training loop of the profiling lesson as a script, for the tools that profile a whole process: Nsight
Systems (``nsys``) and Nsight Compute (``ncu``) run a program, not a notebook cell.

    python -m gpulab.course.scripts.profile_train --steps 20             # or: python <path of this file> ...
    nsys profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi ... python <path of this file>

Each step is the lesson's fixed step: a shuffled batch of uint8 images, augmented as a whole batch on the device
(:func:`gpulab.course.augment_batch`), a small CNN, one vectorised cross-entropy, SGD with momentum, and the loss
kept on the device. ``--slow`` plants the lesson's two other habits back (a per-item loss loop and ``.item()``
logging every step) to compare the two timelines. Every step is split into ``gl.phase`` ranges (``data``,
``forward``, ``backward``, ``optimizer``): NVTX ranges on the Nsight timeline, the ranges ``ncu --nvtx-include``
selects. The steps after ``--warmup`` run inside :func:`gpulab.profiling.nvtx_capture`, the region
``--capture-range=cudaProfilerApi`` records (on a CPU it records nothing and the script simply trains).

It prints one line: the device, the steps, the median step time and the last loss.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable, Sequence

import gpulab as gl
from gpulab import course

__all__ = ["parse_args", "make_step", "main"]

MEAN, STD = (0.49, 0.48, 0.45), (0.25, 0.24, 0.26)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="steps recorded (inside the capture range)")
    p.add_argument("--warmup", type=int, default=3, help="steps before the capture range (lazy init, autotuning)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default: 64 on a CPU, 256 on a GPU)")
    p.add_argument("--images", type=int, default=2048, help="synthetic 32x32 images in the data set")
    p.add_argument("--width", type=int, default=None, help="CNN width (default: 16 on a CPU, 64 on a GPU)")
    p.add_argument("--slow", action="store_true", help="per-item loss loop and .item() logging every step")
    p.add_argument("--device", default=None, help="torch device (default: the best available)")
    args = p.parse_args(argv)
    for name in ("steps", "images"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        p.error(f"--warmup must be >= 0, got {args.warmup}")
    return args


def make_step(model: Any, optimizer: Any, images: Any, labels: Any, batch: int, device: Any,
              slow: bool = False) -> tuple[Callable[[], None], Any]:
    """One training step over a shuffled stream of ``images`` (N x 3 x H x W uint8) and ``labels``, split into
    ``gl.phase`` ranges; returns ``(step, running)`` where ``running`` sums the loss and accuracy on the device."""
    import torch
    import torch.nn.functional as F

    mean, std = torch.tensor(MEAN), torch.tensor(STD)
    running = torch.zeros(2, device=device)
    order: list[Any] = []

    def next_batch() -> tuple[Any, Any]:
        if not order:
            order.extend(i for i in torch.randperm(len(images)).split(batch) if len(i) == batch)
        idx = order.pop()
        x = images[idx].to(device, non_blocking=True)
        return course.augment_batch(x, scale=(0.6, 1.0), jitter=0.3, mean=mean, std=std), labels[idx].to(device)

    def step() -> None:
        with gl.phase("data"):
            x, y = next_batch()
        with gl.phase("forward"):
            out = model(x)
            if slow:
                loss = sum(F.cross_entropy(out[i:i + 1], y[i:i + 1]) for i in range(len(y))) / len(y)
            else:
                loss = F.cross_entropy(out, y)
        with gl.phase("backward"):
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
        with gl.phase("optimizer"):
            optimizer.step()
        accuracy = (out.argmax(dim=1) == y).float().mean()
        if slow:
            logged = (loss.item(), accuracy.item())      # two host syncs every step
            running.add_(torch.tensor(logged, device=device))
        else:
            running.add_(torch.stack([loss.detach(), accuracy]))

    return step, running


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    import torch

    args = parse_args(argv)
    device = torch.device(args.device) if args.device else gl.device()
    on_gpu = device.type == "cuda"
    batch = args.batch or (256 if on_gpu else 64)
    if batch > args.images:
        raise SystemExit(f"--batch {batch} is larger than --images {args.images}")
    torch.manual_seed(0)
    images = torch.randint(0, 256, (args.images, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (args.images,))
    model = course.models.small_cnn(width=args.width or (64 if on_gpu else 16)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step, running = make_step(model, optimizer, images, labels, batch, device, slow=args.slow)
    for _ in range(args.warmup):
        step()
    gl.timing.synchronize(device)
    times = []
    with gl.profiling.nvtx_capture() as captured:       # cudaProfilerStart/Stop + an NVTX range per operator
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            gl.timing.synchronize(device)               # per-step times for the printout (nsys sees the syncs)
            times.append(time.perf_counter() - t0)
    loss_sum = float(running[0]) / (args.warmup + args.steps)
    result = {"device": str(device), "steps": args.steps, "batch": batch, "median_step_s": statistics.median(times),
              "mean_loss": loss_sum, "captured": bool(captured), "slow": args.slow}
    print(f"profile_train: {args.steps} steps of batch {batch} on {device}{' (slow habits)' if args.slow else ''}: "
          f"median {result['median_step_s'] * 1e3:.2f} ms/step, mean loss {loss_sum:.3f}, "
          f"capture range {'recorded' if captured else 'inactive (no CUDA)'}")
    return result


if __name__ == "__main__":
    main()
