"""Out-of-memory errors, explained: where the memory went and which fix to try first.

:func:`explain_oom` reads a CUDA (or :func:`~gpulab.memory_budget`) out-of-memory error, measures the
model's parameters, gradients and optimizer state, estimates the step's activations on fake tensors
(nothing is allocated), adds what the error and the allocator say about the cache, fragmentation, the
CUDA context and other processes (NVML), and ranks the fix ladder for this case: smaller batch +
accumulation, mixed precision, gradient checkpointing, ``zero_grad(set_to_none=True)``, not keeping
tensors with graphs, deleting references, ``expandable_segments``, a smaller model, more GPUs (FSDP).
:func:`try_fixes` then runs candidate configurations and tabulates which fit.

Example:
    >>> import torch, gpulab as gl
    >>> from gpulab import course
    >>> m = course.models.mlp(); opt = torch.optim.Adam(m.parameters()); batch = course.models.example_batch("mlp", 512)
    >>> try:
    ...     with gl.memory_budget(8 * gl.MiB):
    ...         course.train_step(m, opt, batch)
    ... except torch.OutOfMemoryError as e:
    ...     report = gl.explain_oom(e, model=m, optimizer=opt, batch=batch)
    >>> report.value("parameters") == sum(p.numel() for p in m.parameters()) * 4
    True
    >>> report.fixes[0].applies
    True
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .._check import checked
from .._format import fmt_bytes, html_table, text_table
from .._links import see
from .oom_message import OPTIMIZER_STATES_PER_PARAMETER, OOMMessage, parse_oom_message

__all__ = ['Fix', 'OOMReport', 'explain_oom']


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fix:
    """One rung of the fix ladder, judged for this case."""

    name: str
    applies: bool
    saves_bytes: int | None      # estimated, at the step's peak
    resolves: bool | None        # would the estimated saving alone close the gap?
    why: str
    how: str
    cost: str


@dataclass(frozen=True)
class OOMReport:
    """Where the memory went when a step ran out of it, and the fixes ranked for this case.

    ``rows`` are (category, bytes or None, note); ``fixes`` are ranked: fixes that close the gap on
    their own first (cheapest first), then the others by saving, then those that do not apply.
    """

    error: str
    device: str
    rows: tuple[tuple[str, int | None, str], ...]
    needed_bytes: int | None
    usable_bytes: int | None
    fixes: tuple[Fix, ...]
    notes: tuple[str, ...] = ()
    failed_during: str | None = None         # "forward", "backward" or "optimizer step" (from the traceback)
    message: OOMMessage | None = field(default=None, repr=False)
    estimate: Any = field(default=None, repr=False)     # the fake-tensor MemoryBreakdown

    @property
    def shortfall_bytes(self) -> int | None:
        """Estimated bytes missing (negative: the step should fit; then look at leaks and fragmentation)."""
        if self.needed_bytes is None or self.usable_bytes is None:
            return None
        return self.needed_bytes - self.usable_bytes

    def value(self, category: str) -> int | None:
        for k, v, _ in self.rows:
            if k == category:
                return v
        raise KeyError(f"no category {category!r}; categories: {[r[0] for r in self.rows]}")

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"category": k, "bytes": v, "note": n} for k, v, n in self.rows]).set_index("category")

    def ladder(self) -> Any:
        """The ranked fixes as a DataFrame."""
        import pandas as pd

        return pd.DataFrame([{"rank": i + 1, "fix": f.name, "applies": f.applies, "saves_bytes": f.saves_bytes,
                              "closes_gap": f.resolves, "why": f.why, "how": f.how, "cost": f.cost}
                             for i, f in enumerate(self.fixes)]).set_index("rank")

    def _head(self) -> str:
        m = self.message
        parts = [f"Out of memory on {self.device}"]
        if m is not None and m.requested_bytes is not None:
            parts.append(f"while allocating {fmt_bytes(m.requested_bytes)}")
        if self.failed_during:
            parts.append(f"in the {self.failed_during}")
        if self.needed_bytes is not None and self.usable_bytes is not None:
            gap = self.shortfall_bytes or 0
            parts.append(f"- the step needs ~{fmt_bytes(self.needed_bytes)}, {fmt_bytes(self.usable_bytes)} usable"
                         + (f": short by {fmt_bytes(gap)}" if gap > 0 else " (it should fit: look for leaks)"))
        return " ".join(parts)

    def _fix_rows(self) -> list[tuple[str, ...]]:
        mark = lambda f: "yes" if f.resolves else ("partly" if f.applies else "n/a")  # noqa: E731
        return [(str(i + 1), f.name, fmt_bytes(f.saves_bytes) if f.applies else "", mark(f), f.why)
                for i, f in enumerate(self.fixes)]

    def __repr__(self) -> str:
        rows = [(k, fmt_bytes(v), n) for k, v, n in self.rows]
        return (self._head() + "\n" + text_table(("where", "memory", "note"), rows) + "\nFix ladder for this case\n"
                + text_table(("#", "fix", "saves", "closes gap", "why"), self._fix_rows())
                + "".join(f"\nnote: {n}" for n in self.notes))

    def _repr_html_(self) -> str:
        rows = [(k, fmt_bytes(v), n) for k, v, n in self.rows]
        return (html_table(("where", "memory", "note"), rows, caption=self._head())
                + html_table(("#", "fix", "saves", "closes gap", "why"), self._fix_rows(),
                             caption="Fix ladder for this case", footer=" ".join(self.notes)))


# ----------------------------------------------------------------------------------------------
def _tensor_bytes(ts: Any) -> int:
    from .accounting import _tensor_bytes as tb

    return tb(ts)


def _batch_tensors(batch: Any) -> list[Any]:
    import torch

    if batch is None:
        return []
    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, Mapping):
        return [v for v in batch.values() if isinstance(v, torch.Tensor)]
    return [t for t in batch if isinstance(t, torch.Tensor)]


def _optimizer_kind(opt: Any) -> str:
    name = type(opt).__name__
    d = getattr(opt, "defaults", {}) or {}
    if name == "SGD" and d.get("momentum", 0):
        return "SGD+momentum"
    if name in ("Adam", "AdamW") and d.get("amsgrad"):
        return "Adam+amsgrad"
    return name


def _fake_breakdown(model: Any, optimizer: Any, batch: Any, loss_fn: Any, autocast_dtype: Any) -> Any:
    """Run one training step of a fake copy of ``model`` (same shapes and dtypes, on CPU fake tensors:
    nothing is allocated) and measure it with :func:`gpulab.memory.breakdown`."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from .accounting import breakdown

    def fake_like(t: Any) -> Any:
        return torch.empty(t.shape, dtype=t.dtype, device="cpu")

    with FakeTensorMode(allow_non_fake_inputs=True):
        memo: dict[int, Any] = {}
        for p in model.parameters():
            memo[id(p)] = torch.nn.Parameter(fake_like(p), requires_grad=p.requires_grad)
        for b in model.buffers():
            memo[id(b)] = fake_like(b)
        fmodel = copy.deepcopy(model, memo)
        if optimizer is not None:
            groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [memo[id(p)] for p in g["params"]]}
                      for g in optimizer.param_groups]
            defaults = {k: v for k, v in optimizer.defaults.items() if k not in ("foreach", "fused", "capturable")}
            fopt = type(optimizer)(groups, **defaults)
        else:
            fopt = torch.optim.SGD(fmodel.parameters(), lr=0.0)
        if isinstance(batch, torch.Tensor):
            fbatch: Any = fake_like(batch)
        else:
            fbatch = type(batch)(fake_like(t) if isinstance(t, torch.Tensor) else t for t in batch)
            if len(fbatch) > 1 and not fbatch[1].is_floating_point():
                fbatch = type(batch)([fbatch[0], torch.zeros(fbatch[1].shape, dtype=fbatch[1].dtype), *fbatch[2:]])
        return breakdown(fmodel, fopt, fbatch, loss_fn=loss_fn, autocast_dtype=autocast_dtype)


def _layers(model: Any) -> int:
    return max(1, sum(1 for m in model.modules() if any(True for _ in m.parameters(recurse=False))))


def _cuda_context(msg: OOMMessage | None, device: str) -> tuple[int | None, int | None, str]:
    """(CUDA context + non-PyTorch bytes, other processes' bytes, source) from the message or NVML."""
    if msg is None or msg.simulated or not device.startswith("cuda"):
        return None, None, ""
    ctx = others = None
    src = "the error message"
    if msg.process_bytes is not None and msg.reserved_bytes is not None:
        ctx = max(0, msg.process_bytes - msg.reserved_bytes)
    if msg.other_processes:
        others = sum(b for _, b in msg.other_processes)
    if others is None or ctx is None:
        from .cuda import _this_process_elsewhere, nvml_processes

        procs = nvml_processes(msg.gpu_index or 0)
        if procs is not None:
            import os

            me = os.getpid()             # inside a container NVML may list this process under its host PID
            elsewhere = _this_process_elsewhere(procs, me, msg.reserved_bytes or 0)
            if elsewhere is not None:
                me = elsewhere[0]
            mine = [b for p, b in procs if p == me and b is not None]
            if others is None:
                others = sum(b for p, b in procs if p != me and b is not None)
            if ctx is None and mine and msg.reserved_bytes is not None:
                ctx = max(0, mine[0] - msg.reserved_bytes)
            src = "the error message and NVML"
    return ctx, others, src


@checked("torch", loss_fn="fn?", capacity_bytes="bytes1?", device="devspec", scan_references="flag")
def explain_oom(exc: BaseException | str, model: Any = None, optimizer: Any = None, batch: Any = None, *,
                loss_fn: Callable[..., Any] | None = None, autocast_dtype: Any = None,
                capacity_bytes: int | None = None, device: str | None = None,
                scan_references: bool = True) -> OOMReport:
    """Explain an out-of-memory error: a breakdown of where the memory went and the fix ladder ranked
    for this case. Call it after the failed step, with the objects the step used.

    - parameters, gradients and optimizer state are measured on ``model`` / ``optimizer`` (optimizer state
      not created yet is predicted from the optimizer's type); activations are estimated by running the
      step on fake tensors shaped like ``batch`` (nothing is allocated; ``loss_fn`` and ``autocast_dtype``
      as in :func:`gpulab.breakdown`);
    - the request, capacity, allocated memory, the allocator's cache and fragmentation come from the
      error message; the CUDA context and other processes from the message or NVML;
    - ``scan_references`` looks for lists that keep tensors with autograd graphs alive and for a stored
      exception (``sys.last_traceback``).

    ``capacity_bytes`` overrides the capacity: the memory PyTorch's allocator may use (e.g. the cap of
    :func:`smaller_card` or ``set_per_process_memory_fraction``); context and other processes are then not
    subtracted from it. ``device`` names where the step ran (default: the model's device).
    """
    from .._check import whole

    if capacity_bytes is not None:
        whole("capacity_bytes", capacity_bytes)
    from .peak import CUDA_CONTEXT_BYTES, is_oom

    text = exc if isinstance(exc, str) else (str(exc) if isinstance(exc, BaseException) else None)
    if text is None:
        raise TypeError(f"explain_oom needs the exception (or its text), got {type(exc).__name__}")
    oom = is_oom(exc) if isinstance(exc, BaseException) else "out of memory" in text.lower()
    if not oom:
        raise ValueError("not an out-of-memory error; for other CUDA errors use gl.errors.explain_error(exc)")
    msg = parse_oom_message(text)
    params = list(model.parameters()) if model is not None else []
    tensors = _batch_tensors(batch)
    dev = (params[0].device if params else tensors[0].device if tensors else None)
    if device is None:
        device = ("simulated card" if msg is not None and msg.simulated else str(dev) if dev is not None
                  else f"cuda:{msg.gpu_index or 0}" if msg is not None and msg.gpu_index is not None else "unknown")
    elif not isinstance(device, str):
        device = str(device)
    notes: list[str] = []

    # measured
    P = _tensor_bytes(params) + (_tensor_bytes(model.buffers()) if model is not None else 0)
    G_now = _tensor_bytes(p.grad for p in params if p.grad is not None)
    from .accounting import _optimizer_state_tensors

    O_now = _tensor_bytes(_optimizer_state_tensors(optimizer)) if optimizer is not None else 0
    B = _tensor_bytes(tensors)
    # estimated on fake tensors
    est = None
    if model is not None and params and batch is not None:
        try:
            est = _fake_breakdown(model, optimizer, batch, loss_fn, autocast_dtype)
        except Exception as e:  # an exotic model or loss: report what is measured, say why
            notes.append(f"could not run the step on fake tensors ({type(e).__name__}: {e}); activations unknown")
    A = est.activations_bytes if est is not None else None
    trainable = _tensor_bytes(p for p in params if p.requires_grad)
    G = max(G_now, est.gradients_bytes if est is not None else trainable)
    kind = _optimizer_kind(optimizer) if optimizer is not None else None
    O_pred = (est.optimizer_state_bytes if est is not None else
              OPTIMIZER_STATES_PER_PARAMETER.get(kind or "", 0) * trainable)
    O = max(O_now, O_pred)
    needed = None
    if est is not None:   # the fake step's peak; or its forward with today's gradients still held
        needed = max(est.peak_bytes, P + B + O + (A or 0) + G_now)
    phase = _failed_phase(exc)

    # capacity and what else occupies the card
    cap = capacity_bytes or (msg.capacity_bytes if msg is not None else None)
    if cap is None and device.startswith("cuda"):
        import torch

        cap = int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    ctx, others, src = _cuda_context(msg, device)
    reserve = None
    if device.startswith("cuda") and not (msg and msg.simulated):
        from ..telemetry.nvml import cuda_memory_info

        nv = cuda_memory_info(msg.gpu_index or 0 if msg is not None else 0)
        reserve = None if nv is None else nv.reserved_bytes
    usable = None
    if capacity_bytes is not None:
        usable = capacity_bytes          # an allocator cap: context and other processes live outside it
    elif cap is not None:
        usable = cap - (ctx or 0) - (others or 0)
    cached = msg.reserved_unallocated_bytes if msg is not None else None
    allocated = msg.allocated_bytes if msg is not None else None
    expected_live = P + G_now + O_now + B
    extra = max(0, allocated - expected_live) if allocated is not None else None

    rows: list[tuple[str, int | None, str]] = [
        ("parameters", P, "weights and buffers: fixed for the model"),
        ("gradients", G, f"{fmt_bytes(G_now)} exist now (this step's, or kept from the last one)" if G_now
         else "created by backward, one per trainable parameter"),
        ("optimizer state", O, f"{kind}: " + ("measured" if O_now else "predicted, created at the first step")
         if kind else "no optimizer given"),
        ("activations (estimate)", A, "saved by forward for backward at this batch; grows with the batch"
         if A is not None else "pass model and batch to estimate them"),
        ("batch", B, "inputs and targets on the device"),
        ("step needs (estimate)", needed, "peak of one training step, from the fake-tensor run"),
        ("allocated at failure", allocated, "live tensors when the allocation failed (from the error)"),
        ("  beyond the model's own state", extra,
         "the failed step's tensors so far + anything kept from earlier steps"),
        ("request that failed", msg.requested_bytes if msg is not None else None, "the allocation that did not fit"),
        ("allocator cache / fragmentation", cached,
         "reserved by PyTorch but unallocated" if not (msg and msg.simulated) else "not simulated on this card"),
        ("CUDA context + non-PyTorch", ctx, f"from {src}" if ctx is not None else
         f"not simulated: a real GPU loses ~{fmt_bytes(CUDA_CONTEXT_BYTES)} here" if msg and msg.simulated
         else "unknown"),
        ("other processes", others, f"from {src}" if others is not None else "none reported"),
        ("driver reserve (NVML)", reserve, "kept by driver and firmware; already outside CUDA's capacity"
         if reserve is not None else "NVML v2 memory query not available"),
        ("capacity", cap, "the card" if not (msg and msg.simulated) else "the simulated card"),
        ("usable for this step", usable, "the allocator's cap (capacity_bytes)" if capacity_bytes is not None
         else "capacity minus context and other processes"),
    ]

    # references that keep memory alive
    holders: list[Any] = []
    last_tb = False
    if scan_references:
        import sys

        from .leaks import graph_holders

        holders = graph_holders()
        last_tb = getattr(sys, "last_traceback", None) is not None
    # gradients held during a forward pass are what set_to_none saves; in backward or the step they are needed
    held_in_forward = G_now if phase in ("forward", None) else 0
    fixes = _ladder(needed=needed, usable=usable, P=P, G=G, G_now=held_in_forward, O=O, A=A, B=B, cached=cached,
                    requested=msg.requested_bytes if msg is not None else None, extra=extra,
                    cuda=device.startswith("cuda"), simulated=bool(msg and msg.simulated), holders=holders,
                    last_tb=last_tb, autocast=autocast_dtype is not None, batch_size=_batch_size(tensors),
                    layers=_layers(model) if model is not None else 1, cap=cap)
    if isinstance(exc, BaseException) and exc.__traceback__ is not None:
        notes.append("this exception's traceback keeps the failed step's tensors alive: let it go (leave the "
                     "except block, del the variable holding it) before retrying")
    return OOMReport(text.strip().splitlines()[0][:300], device, tuple(rows), needed, usable, tuple(fixes),
                     tuple(notes), phase, msg, est)


def _failed_phase(exc: Any) -> str | None:
    """Where a step failed, from the traceback's frames: "optimizer step", "backward" or "forward"."""
    tb = getattr(exc, "__traceback__", None)
    if tb is None:
        return None
    files = []
    while tb is not None:
        files.append(tb.tb_frame.f_code.co_filename.replace("\\", "/"))
        tb = tb.tb_next
    if any("/torch/optim/" in f for f in files):
        return "optimizer step"
    if any("/torch/autograd/" in f for f in files):
        return "backward"
    return "forward"


def _batch_size(tensors: list[Any]) -> int | None:
    return int(tensors[0].shape[0]) if tensors and tensors[0].dim() > 0 else None


def _ladder(*, needed: int | None, usable: int | None, P: int, G: int, G_now: int, O: int, A: int | None, B: int,
            cached: int | None, requested: int | None, extra: int | None, cuda: bool, simulated: bool,
            holders: list[Any], last_tb: bool, autocast: bool, batch_size: int | None, layers: int,
            cap: int | None) -> list[Fix]:
    gap = (needed - usable) if needed is not None and usable is not None else None
    closes = lambda s: None if gap is None or s is None else s >= gap  # noqa: E731
    act = A or 0
    out: list[tuple[int, Fix]] = []

    # 1. batch + accumulation: activations / k
    k, save_k = None, None
    if act and batch_size and batch_size > 1:
        k = 2
        while gap is not None and k < batch_size and act * (1 - 1 / k) < gap:
            k *= 2
        k = min(k, batch_size)
        save_k = int(act * (1 - 1 / k))
    if k and batch_size and gap is not None and save_k is not None and save_k < gap:
        acc_why = f"activations ({fmt_bytes(act)}) scale with the batch, but even micro-batches of 1 leave the gap"
    else:
        acc_why = f"activations ({fmt_bytes(act)}) scale with the batch" + (
            f"; {k} micro-batches of {batch_size // k}" if k and batch_size else "")
    out.append((3, Fix("smaller batch + gradient accumulation", bool(act and batch_size and batch_size > 1), save_k,
                       closes(save_k), acc_why,
                       f"{k or 4} micro-batches per optimizer step, loss / {k or 4} each: same gradients, activations "
                       f"/ {k or 4} ({see('accumulation')})",
                       "more, smaller steps: slower on a GPU that small batches leave idle")))
    # 2. mixed precision: 16-bit activations
    save_mp = None if autocast or not act else act // 2
    out.append((2, Fix("mixed precision (bf16/fp16 autocast)", bool(act) and not autocast, save_mp, closes(save_mp),
                       "already on" if autocast else "activations stored in 16 bits take half the memory",
                       f"torch.autocast(device_type, dtype=torch.bfloat16 or torch.float16) ({see('amp')})",
                       "usually faster on tensor cores; weights and optimizer state stay fp32")))
    # 3. gradient checkpointing: keep ~2/sqrt(L) of the activations
    save_ck = int(act * max(0.0, 1 - 2 / math.sqrt(layers))) if act and layers >= 4 else None
    out.append((4, Fix("gradient checkpointing", bool(save_ck), save_ck, closes(save_ck),
                       f"{layers} layers: keep segment inputs only, recompute the rest in backward"
                       if layers >= 4 else "too few layers to gain much",
                       f"torch.utils.checkpoint.checkpoint_sequential(model, segments, x) ({see('checkpoint')})",
                       "about one extra forward pass (+20-30% step time)")))
    # 4. set_to_none
    out.append((0, Fix("zero_grad(set_to_none=True)", G_now > 0, G_now or None, closes(G_now or None),
                       f"{fmt_bytes(G_now)} of gradients exist now; zero_grad(set_to_none=False) would keep them "
                       "through the next forward, on top of its activations" if G_now
                       else "no gradients exist between steps",
                       "optimizer.zero_grad(set_to_none=True) (the default since PyTorch 2.0), or model.zero_grad()",
                       "free")))
    # 5. tensors with graphs kept (losses in a list)
    big = [h for h in holders if h.graph_tensors >= 2]
    out.append((0, Fix("don't keep tensors with graphs (loss.item(), not loss)", bool(big),
                       None, None,
                       f"a {big[0].kind}{' (' + ', '.join(big[0].names) + ')' if big[0].names else ''} holds "
                       f"{big[0].graph_tensors} tensors with autograd history: each keeps its graph (and, until "
                       "backward, its activations)" if big else "no container of graph tensors found",
                       "losses.append(loss.item()) or loss.detach(); evaluate under torch.no_grad()",
                       "free")))
    # 6. delete references + gc + empty_cache. One step's own transient tensors are at most its activations,
    # their gradients (about as large) and the parameters' gradients; more than that was kept from before.
    transient = 2 * act + G
    leak = extra - transient if extra is not None and act and extra > transient else None
    applies = bool(last_tb or leak)
    why = []
    if leak:
        why.append(f"{fmt_bytes(leak)} more is live than one step needs: something from earlier steps is referenced")
    if last_tb:
        why.append("sys.last_traceback holds the frames (and tensors) of an earlier failed cell")
    out.append((0, Fix("delete references, gc.collect(), empty_cache()", applies, leak, closes(leak),
                       "; ".join(why) or "nothing found referenced beyond the step",
                       "del out, loss; gl.memory.recover_memory(globals(), [...]) clears sys.last_traceback and Out too",
                       "free; empty_cache() only helps other processes - PyTorch reuses its cache itself")))
    # 7. expandable segments
    frag = cached if cuda and cached and requested and (cached >= requested or (cap and cached > 0.05 * cap)) else None
    out.append((1, Fix("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", bool(frag), frag, closes(frag),
                       f"{fmt_bytes(cached)} is reserved but unallocated: free, but in pieces too small for the "
                       f"{fmt_bytes(requested)} request (fragmentation)" if frag else
                       ("not simulated on this card" if simulated else "little reserved-but-unallocated memory"),
                       "set the variable before the first CUDA allocation (restart the kernel)",
                       "free; lets the allocator grow segments instead of splitting them")))
    # 8. smaller model
    static = P + G + O
    small = bool(usable) and static > 0.5 * usable
    save_sm = static // 2 if small else None
    out.append((5, Fix("a smaller model", small, save_sm, closes(save_sm),
                       f"weights + gradients + optimizer state = {fmt_bytes(static)}, "
                       f"{static / usable:.0%} of usable memory" if usable else "capacity unknown",
                       "fewer or narrower layers; or a lighter optimizer (SGD momentum: 1 state, 8-bit Adam)",
                       "accuracy")))
    # 9. more GPUs: shard weights, gradients and optimizer state
    n = None
    if usable and static and usable > act + B:
        n = max(2, math.ceil(static / max(1, usable - act - B)))
    save_fs = int(static * (1 - 1 / n)) if n else None
    fsdp = static > 0.25 * (usable or static + 1)
    if not fsdp:
        fs_why = (f"weights + gradients + optimizer state are {static / usable:.0%} of usable memory: sharding them "
                  "saves little" if usable else "capacity unknown")
    elif n:
        fs_why = f"FSDP on {n} GPUs keeps 1/{n} of weights, gradients and optimizer state per GPU"
    else:
        fs_why = "activations alone exceed the card: shard them too (tensor/sequence parallelism)"
    out.append((6, Fix("more GPUs: shard with FSDP", fsdp, save_fs if fsdp else None, closes(save_fs) if fsdp else None,
                       fs_why,
                       f"torch.distributed.fsdp.fully_shard ({see('fsdp')})", "hardware and communication")))

    ranked = sorted(out, key=lambda cf: (not cf[1].applies, not cf[1].resolves, cf[0] if cf[1].resolves else 0,
                                         -(cf[1].saves_bytes or 0)))
    return [f for _, f in ranked]
