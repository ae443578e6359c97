"""FSDP2 (``fully_shard``) beside DDP: every rank runs this file, one process per device.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpulab.course.scripts.fsdp_train --steps 3

or, from a notebook, ``gl.launch("gpulab.course.scripts.fsdp_train", nproc=2)``. Each rank

1. builds the same MLP (``--model gpt``: the course's GPT, sharded per block) twice from one seed: a DDP replica (every rank holds every parameter) and an FSDP2 model
   (:func:`fully_shard` on each ``Linear`` and on the root: every rank holds ``1/world`` of each parameter, a
   ``DTensor`` sharded on dim 0, and gathers a layer's full weights only while it runs);
2. trains both for ``--steps`` steps with Adam on its own shard of the same global batches;
3. reports the bytes of parameters, gradients and Adam's moments this rank holds in each (and DDP's gradient buckets), the global mean loss of
   every step for both, and the largest difference between the two models' final weights.

``fully_shard`` is public as ``torch.distributed.fsdp.fully_shard`` from torch 2.6; torch 2.4 and 2.5 have it as
``torch.distributed._composable.fsdp.fully_shard`` (:func:`import_fully_shard` finds either). It runs over NCCL on
GPUs, and over gloo on a CPU from torch 2.7 (:func:`runs_on_cpu`; torch 2.5 stops with "FSDP requires CUDA for
streams").
"""
from __future__ import annotations

import argparse
import copy
import gc
import time
from typing import Any, Callable, Sequence

from gpulab import course
from gpulab.course.distributed.data_parallel import fsdp_runs_on_cpu as runs_on_cpu
from gpulab.distributed import WorkerInfo, barrier, init_worker, report, shard_indices
from gpulab.timing import synchronize

__all__ = ["parse_args", "import_fully_shard", "runs_on_cpu", "local_bytes", "state_bytes", "ddp_bucket_bytes",
           "train_both", "main"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The script's options (``--help`` lists them)."""
    p = argparse.ArgumentParser(prog="fsdp_train", description="FSDP2 (fully_shard) beside DDP.")
    p.add_argument("--model", choices=("mlp", "gpt"), default="mlp",
                   help="the MLP, or the course's GPT (hidden = d_model, layers = blocks) on its byte-level text")
    p.add_argument("--hidden", type=int, default=512, help="width of the MLP's hidden layers (the GPT's d_model)")
    p.add_argument("--layers", type=int, default=3, help="hidden layers (the GPT's blocks)")
    p.add_argument("--heads", type=int, default=4, help="the GPT's attention heads")
    p.add_argument("--seq-len", type=int, default=64, help="the GPT's context: tokens per sequence")
    p.add_argument("--batch", type=int, default=32, help="items per rank per step")
    p.add_argument("--steps", type=int, default=3, help="training steps")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    for name in ("hidden", "layers", "batch", "steps", "heads", "seq_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.model == "gpt" and args.hidden % args.heads:
        p.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}")
    return args


def import_fully_shard() -> Callable[..., Any]:
    """``fully_shard`` from where this torch keeps it: ``torch.distributed.fsdp`` (torch 2.6 and later) or
    ``torch.distributed._composable.fsdp`` (2.4, 2.5). Raises ``ImportError`` naming the version needed.

    Example:
        >>> callable(import_fully_shard())
        True
    """
    import importlib

    import torch

    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            found = getattr(importlib.import_module(where), "fully_shard", None)
        except ImportError:
            found = None
        if found is not None:
            return found
    raise ImportError(f"FSDP2's fully_shard needs torch 2.4 or later (public from 2.6); this is torch "
                      f"{torch.__version__}: pip install -U torch")


def local_bytes(tensors: Any) -> int:
    """Bytes these tensors hold on this rank: a sharded ``DTensor`` counts its local shard only.

    Example:
        >>> import torch
        >>> local_bytes([torch.zeros(10), torch.zeros(2, 3, dtype=torch.float64)])
        88
    """
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        total += local.numel() * local.element_size()
    return total


def state_bytes(model: Any, optimizer: Any) -> dict[str, int]:
    """What this rank holds of the model state: parameters, gradients, optimizer state (bytes each).

    Example:
        >>> import torch
        >>> m = torch.nn.Linear(4, 2)
        >>> state_bytes(m, torch.optim.SGD(m.parameters(), lr=0.1))
        {'params': 40, 'grads': 0, 'optimizer': 0}
    """
    params = list(model.parameters())
    moments = [v for s in optimizer.state.values() for v in s.values() if hasattr(v, "numel") and v.dim() > 0]
    return {"params": local_bytes(params), "grads": local_bytes(p.grad for p in params),
            "optimizer": local_bytes(moments)}


def ddp_bucket_bytes(ddp: Any) -> int | None:
    """The bytes a DDP model's gradient buckets hold beside its gradients: the sizes of the flat buffers its reducer
    all-reduces, as DDP logs them (``_get_ddp_logging_data()["bucket_sizes"]``), a second copy of every gradient; 0
    with ``gradient_as_bucket_view=True``, where the gradients are views into the buckets. None where this torch does
    not log them (or before the first backward has built the buckets)."""
    if getattr(ddp, "gradient_as_bucket_view", False):
        return 0
    try:
        sizes = str(ddp._get_ddp_logging_data().get("bucket_sizes", ""))
        return sum(int(b) for b in sizes.replace(" ", "").split(",") if b) or None
    except (AttributeError, RuntimeError, ValueError):
        return None


def _median(times: list[float]) -> float:
    """The median step after the first (which holds one-off costs), or the only one."""
    kept = sorted(times[1:] or times)
    return kept[len(kept) // 2]


class _Data:
    """The model and batches of ``--model``: the MLP on the course's example images, or the GPT on its text."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tokens = None
        if args.model == "gpt":
            from gpulab.course.transformers.gpt import text_tokens

            self.tokens = text_tokens()

    def model(self) -> Any:
        a = self.args
        if a.model == "mlp":
            return course.models.mlp(hidden=a.hidden, layers=a.layers)
        from gpulab.course.transformers.gpt import gpt
        from gpulab.transformer import TransformerShape

        return gpt(TransformerShape(layers=a.layers, d_model=a.hidden, heads=a.heads, seq_len=a.seq_len, vocab=256))

    def batch(self, n: int, seed: int) -> tuple[Any, Any]:
        if self.tokens is None:
            return course.models.example_batch("mlp", n, seed=seed)
        import torch

        from gpulab.course.transformers.gpt import token_batch

        return token_batch(self.tokens, n, self.args.seq_len, torch.Generator().manual_seed(seed))

    def loss(self, model: Any, x: Any, y: Any) -> Any:
        if self.tokens is None:
            import torch.nn.functional as F

            return F.cross_entropy(model(x), y)
        return model(x, y)[1]


def _full(t: Any) -> Any:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()


def train_both(info: WorkerInfo, args: argparse.Namespace) -> dict[str, Any]:
    """Train a DDP replica and an FSDP2 model of the same MLP (or GPT), from the same weights, on the same shards;
    return this rank's bytes of model state in each, both loss curves (global means), each one's median step time
    and the final weights' difference."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    fully_shard = import_fully_shard()
    dev, world = info.device, info.world_size
    if dev.type == "cpu" and not runs_on_cpu():
        raise RuntimeError(f"fully_shard on a CPU (gloo) needs torch 2.7 or later; this is torch {torch.__version__}. "
                           "Upgrade torch, or run on GPUs (NCCL)")
    torch.manual_seed(args.seed)
    data = _Data(args)
    base = data.model()
    ddp = DistributedDataParallel(copy.deepcopy(base).to(dev),
                                  device_ids=[dev.index] if dev.type == "cuda" else None)
    sharded = copy.deepcopy(base).to(dev)
    # The mesh names this rank's device: fully_shard's default mesh is the machine's accelerator, so gloo ranks on
    # the CPU of a one-GPU machine would otherwise shard onto cuda:0, cuda:1, ... (rank 1 has no GPU there).
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(dev.type, (world,))
    for layer in (sharded.blocks if args.model == "gpt" else sharded):
        if args.model == "gpt" or isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)   # each layer's weights gathered just before it runs, freed after
    fully_shard(sharded, mesh=mesh)     # the root: whatever the layers left (nothing here) and the step's hooks
    optimizers = {"ddp": torch.optim.Adam(ddp.parameters(), lr=args.lr),
                  "fsdp": torch.optim.Adam(sharded.parameters(), lr=args.lr)}
    models = {"ddp": ddp, "fsdp": sharded}
    losses: dict[str, list[float]] = {"ddp": [], "fsdp": []}
    times: dict[str, list[float]] = {"ddp": [], "fsdp": []}
    n = args.batch * world
    for step in range(args.steps):
        x, y = data.batch(n, args.seed + step)
        mine = torch.tensor(shard_indices(n, world, seed=args.seed, epoch=step)[info.rank])
        xb, yb = x[mine].to(dev), y[mine].to(dev)
        for name, model in models.items():
            synchronize(dev)
            t0 = time.perf_counter()
            optimizers[name].zero_grad(set_to_none=False)
            loss = data.loss(model, xb, yb)
            loss.backward()             # DDP: all-reduce; FSDP: reduce-scatter, each rank keeps its shard's grads
            optimizers[name].step()
            synchronize(dev)
            times[name].append(time.perf_counter() - t0)
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses[name].append(float(mean) / world)
    held = {name: state_bytes(models[name], optimizers[name]) for name in models}
    held["ddp"]["buckets"] = ddp_bucket_bytes(ddp)     # DDP's second copy of the gradients (None: not logged here)
    diff = max(float((_full(a) - _full(b)).abs().max()) for a, b in zip(ddp.module.parameters(), sharded.parameters()))
    full_bytes = sum(p.numel() * p.element_size() for p in base.parameters())
    return {"param_count": sum(p.numel() for p in base.parameters()), "full_param_bytes": full_bytes,
            **{f"{name}_{part}_bytes": b for name, h in held.items() for part, b in h.items()},
            "ddp_losses": losses["ddp"], "fsdp_losses": losses["fsdp"],
            "max_loss_diff": max(abs(a - b) for a, b in zip(losses["ddp"], losses["fsdp"])),
            "max_param_diff": diff,
            "fsdp_param_type": type(next(sharded.parameters())).__name__, "model": args.model,
            **{f"{name}_step_s": _median(t) for name, t in times.items()},
            "torch": torch.__version__}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run :func:`train_both` on this rank and report it."""
    args = parse_args(argv)
    import torch.distributed as dist

    info = init_worker()
    report(rank=info.rank, world_size=info.world_size, backend=info.backend, device=str(info.device))
    try:
        done = report(**train_both(info, args))
        gc.collect()            # the models, their DTensors and hooks go before the process group they use
        barrier(info)           # gloo: every pending work done before the group's threads are joined
    finally:
        dist.destroy_process_group()
    print(f"rank {info.rank}/{info.world_size} ({info.backend}): FSDP holds {done['fsdp_params_bytes']:,} of "
          f"{done['full_param_bytes']:,} parameter bytes", flush=True)
    return done


if __name__ == "__main__":
    main()
