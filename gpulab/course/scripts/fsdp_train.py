"""FSDP2 (``fully_shard``) beside DDP: every rank runs this file, one process per device.

    python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpulab.course.scripts.fsdp_train --steps 3

or, from a notebook, ``gl.launch("gpulab.course.scripts.fsdp_train", nproc=2)``. Each rank

1. builds the same MLP (``--model gpt``: the course's GPT, sharded per block) twice from one seed: a DDP replica (every rank holds every parameter) and an FSDP2 model
   (:func:`fully_shard` on each ``Linear`` and on the root: every rank holds ``1/world`` of each parameter, a
   ``DTensor`` sharded on dim 0, and gathers a layer's full weights only while it runs);
2. trains both for ``--steps`` steps with Adam on its own shard of the same global batches;
3. reports the bytes of parameters, gradients and Adam's moments this rank holds in each (and DDP's gradient buckets), the global mean loss of
   every step for both, and the largest difference between the two models' final weights; on GPUs, each model's
   peak bytes on the rank (its state plus what its step allocated: ``torch.cuda.max_memory_allocated``).

``--mixed-precision`` adds a third model: FSDP2 under ``MixedPrecisionPolicy(param_dtype=torch.bfloat16,
reduce_dtype=torch.float32)``: the shards stay fp32 (Adam updates them), each layer's weights are all-gathered and
computed with in bf16 (half the bytes on the wire and in memory while it runs), and the gradients are
reduce-scattered in fp32.

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

__all__ = ["parse_args", "import_fully_shard", "import_mixed_precision_policy", "runs_on_cpu", "local_bytes", "state_bytes", "ddp_bucket_bytes",
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
    p.add_argument("--mixed-precision", action="store_true",
                   help="also train an FSDP2 model under MixedPrecisionPolicy: bf16 parameters for compute and "
                        "communication, gradients reduced in fp32")
    args = p.parse_args(argv)
    for name in ("hidden", "layers", "batch", "steps", "heads", "seq_len"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.model == "gpt" and args.hidden % args.heads:
        p.error(f"--hidden {args.hidden} must be a multiple of --heads {args.heads}")
    return args


def _from_fsdp2(name: str) -> Any:
    """``name`` from where this torch keeps FSDP2: ``torch.distributed.fsdp`` (2.6 and later), else
    ``torch.distributed._composable.fsdp`` (2.4, 2.5); None where neither has it."""
    import importlib

    for where in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            found = getattr(importlib.import_module(where), name, None)
        except ImportError:
            found = None
        if found is not None:
            return found
    return None


def import_mixed_precision_policy() -> Any:
    """FSDP2's ``MixedPrecisionPolicy``, from where this torch keeps it (beside ``fully_shard``).

    Example:
        >>> import_mixed_precision_policy().__name__
        'MixedPrecisionPolicy'
    """
    import torch

    found = _from_fsdp2("MixedPrecisionPolicy")
    if found is None:
        raise ImportError(f"FSDP2's MixedPrecisionPolicy needs torch 2.4 or later; this is torch {torch.__version__}")
    return found


def import_fully_shard() -> Callable[..., Any]:
    """``fully_shard`` from where this torch keeps it: ``torch.distributed.fsdp`` (torch 2.6 and later) or
    ``torch.distributed._composable.fsdp`` (2.4, 2.5). Raises ``ImportError`` naming the version needed.

    Example:
        >>> callable(import_fully_shard())
        True
    """
    import torch

    found = _from_fsdp2("fully_shard")
    if found is None:
        raise ImportError(f"FSDP2's fully_shard needs torch 2.4 or later (public from 2.6); this is torch "
                          f"{torch.__version__}: pip install -U torch")
    return found


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


def _shard(model: Any, args: argparse.Namespace, mesh: Any, mp_policy: Any = None) -> Any:
    """fully_shard each block (GPT) or Linear (MLP), then the root; with ``mp_policy`` if given."""
    import torch

    fully_shard = import_fully_shard()
    kwargs = {"mesh": mesh} if mp_policy is None else {"mesh": mesh, "mp_policy": mp_policy}
    for layer in (model.blocks if args.model == "gpt" else model):
        if args.model == "gpt" or isinstance(layer, torch.nn.Linear):
            fully_shard(layer, **kwargs)   # each layer's weights gathered just before it runs, freed after
    fully_shard(model, **kwargs)           # the root: whatever the layers left (nothing here) and the step's hooks
    return model


def _full(t: Any) -> Any:
    return (t.full_tensor() if hasattr(t, "full_tensor") else t).detach().cpu()


def _allocated(dev: Any) -> int | None:
    """Bytes the CUDA allocator holds for tensors now, its peak counter reset to it; None on a CPU."""
    if dev.type != "cuda":
        return None
    import torch

    torch.cuda.reset_peak_memory_stats(dev)
    return torch.cuda.memory_allocated(dev)


def train_both(info: WorkerInfo, args: argparse.Namespace) -> dict[str, Any]:
    """Train a DDP replica and an FSDP2 model of the same MLP (or GPT), from the same weights, on the same shards
    (with ``--mixed-precision`` a third: FSDP2 under ``MixedPrecisionPolicy``, bf16 parameters, fp32 reduction);
    return this rank's bytes of model state in each, the loss curves (global means), each one's median step time,
    on a GPU each one's peak bytes on this rank, and the final weights' difference."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

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
    models = {"ddp": ddp, "fsdp": _shard(sharded, args, mesh)}
    if args.mixed_precision:    # bf16 weights gathered and computed with, gradients reduce-scattered in fp32
        policy = import_mixed_precision_policy()(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        models["fsdp_mp"] = _shard(copy.deepcopy(base).to(dev), args, mesh, policy)
    optimizers = {name: torch.optim.Adam(model.parameters(), lr=args.lr) for name, model in models.items()}
    losses: dict[str, list[float]] = {name: [] for name in models}
    times: dict[str, list[float]] = {name: [] for name in models}
    peaks: dict[str, int | None] = {name: None for name in models}     # the step's bytes above what was resident
    n = args.batch * world
    for step in range(args.steps):
        x, y = data.batch(n, args.seed + step)
        mine = torch.tensor(shard_indices(n, world, seed=args.seed, epoch=step)[info.rank])
        xb, yb = x[mine].to(dev), y[mine].to(dev)
        for name, model in models.items():
            synchronize(dev)
            before = _allocated(dev)
            t0 = time.perf_counter()
            optimizers[name].zero_grad(set_to_none=False)
            loss = data.loss(model, xb, yb)
            loss.backward()             # DDP: all-reduce; FSDP: reduce-scatter, each rank keeps its shard's grads
            optimizers[name].step()
            synchronize(dev)
            times[name].append(time.perf_counter() - t0)
            if before is not None:
                above = torch.cuda.max_memory_allocated(dev) - before
                peaks[name] = max(peaks[name] or 0, above)
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses[name].append(float(mean) / world)
    held = {name: state_bytes(models[name], optimizers[name]) for name in models}
    held["ddp"]["buckets"] = ddp_bucket_bytes(ddp)     # DDP's second copy of the gradients (None: not logged here)
    # a model's peak on this rank: its own resident state plus what its step allocated above all that was resident
    # (the other models' state included, so it is that model's peak as if it trained alone); None on a CPU
    peak = {name: None if peaks[name] is None else peaks[name] + sum(b or 0 for b in held[name].values())
            for name in models}
    diff = max(float((_full(a) - _full(b)).abs().max()) for a, b in zip(ddp.module.parameters(), sharded.parameters()))
    full_bytes = sum(p.numel() * p.element_size() for p in base.parameters())
    return {"param_count": sum(p.numel() for p in base.parameters()), "full_param_bytes": full_bytes,
            **{f"{name}_{part}_bytes": b for name, h in held.items() for part, b in h.items()},
            "ddp_losses": losses["ddp"], "fsdp_losses": losses["fsdp"],
            "max_loss_diff": max(abs(a - b) for a, b in zip(losses["ddp"], losses["fsdp"])),
            **({"fsdp_mp_losses": losses["fsdp_mp"],
                "fsdp_mp_max_rel_loss_diff": max(abs(a - b) / abs(a) for a, b in zip(losses["ddp"], losses["fsdp_mp"]))}
               if "fsdp_mp" in models else {}),
            **{f"{name}_peak_bytes": b for name, b in peak.items()},
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
