"""Where a training step's memory goes (parameters, gradients, optimizer state, activations), measured or estimated."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from .._check import checked
from .._format import fmt_bytes, html_table, text_table
from .peak import CUDA_CONTEXT_BYTES, GiB, MemoryTracker, _torch, free_memory

__all__ = ['MemoryBreakdown', 'breakdown', 'MemoryEstimate', 'estimate']


# ----------------------------------------------------------------------------------------------
def _tensor_bytes(tensors: Any) -> int:
    torch = _torch()
    seen, total = set(), 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.numel():
            st = t.untyped_storage()
            if st._cdata not in seen:
                seen.add(st._cdata)
                total += int(st.nbytes())
    return total


def _optimizer_state_tensors(optimizer: Any) -> list[Any]:
    torch = _torch()
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def _loss(out: Any, batch: Any, loss_fn: Callable[..., Any] | None) -> Any:
    torch = _torch()
    if loss_fn is not None:
        return loss_fn(out, batch[1]) if isinstance(batch, (tuple, list)) and len(batch) > 1 else loss_fn(out)
    if isinstance(batch, (tuple, list)) and len(batch) > 1:
        return torch.nn.functional.cross_entropy(out.float(), batch[1])
    return out.float().mean()


def _inputs(batch: Any) -> Any:
    return batch[0] if isinstance(batch, (tuple, list)) else batch


@dataclass(frozen=True)
class MemoryBreakdown:
    """Where one training step's memory went, by category (bytes), and the peak."""

    device: str
    parameters_bytes: int
    gradients_bytes: int
    optimizer_state_bytes: int
    activations_bytes: int      # saved for backward, at the end of the forward pass
    peak_bytes: int             # everything at the step's peak (parameters included)
    method: str
    allocator: dict[str, int | None] = field(default_factory=dict)   # CUDA: allocated, reserved, NVML used

    @property
    def rows(self) -> list[tuple[str, int | None, str]]:
        r = [("parameters", self.parameters_bytes, "the weights"),
             ("gradients", self.gradients_bytes, "one per parameter after backward"),
             ("optimizer state", self.optimizer_state_bytes, "e.g. Adam keeps two moments per parameter"),
             ("activations", self.activations_bytes, "saved by forward for backward; grows with batch size"),
             ("peak during the step", self.peak_bytes, "what must fit on the device")]
        for k, v in self.allocator.items():
            r.append((k, v, {"allocated (torch)": "live tensors, as torch.cuda.memory_allocated",
                             "reserved (allocator cache)": "held by PyTorch's caching allocator",
                             "NVML used": "what nvidia-smi shows: reserved + CUDA context + other processes",
                             "context and others": "NVML used minus reserved",
                             "driver reserve (NVML)": "kept by driver and firmware: not in NVML used (v2)"}.get(k, "")))
        return r

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([{"category": c, "bytes": b, "note": n} for c, b, n in self.rows]).set_index("category")

    def __repr__(self) -> str:
        return (f"MemoryBreakdown on {self.device} ({self.method})\n"
                + text_table(("category", "memory", "note"), [(c, fmt_bytes(b), n) for c, b, n in self.rows]))

    def _repr_html_(self) -> str:
        return html_table(("category", "memory", "note"), [(c, fmt_bytes(b), n) for c, b, n in self.rows],
                          caption=f"Memory of one training step on {self.device} ({self.method})")


def _module_parts(model: Any, optimizer: Any, autocast_dtype: Any) -> None:
    """A model with parameters, an optimizer, and an autocast dtype that is a torch dtype (not "bf16")."""
    torch = _torch()
    if model is not None and not callable(getattr(model, "parameters", None)):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__} {model!r:.40}")
    if optimizer is not None and not callable(getattr(optimizer, "zero_grad", None)):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer built on the model's parameters, got "
                        f"{type(optimizer).__name__} {optimizer!r:.40}")
    if autocast_dtype is not None and autocast_dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"autocast_dtype must be torch.bfloat16, torch.float16 or None, got {autocast_dtype!r}")


@checked(loss_fn="fn?")
def breakdown(model: Any, optimizer: Any, batch: Any, loss_fn: Callable[..., Any] | None = None,
              autocast_dtype: Any = None) -> MemoryBreakdown:
    """Run one training step (forward, backward, optimizer step) and split its memory by category.

    ``batch`` is ``(inputs, targets)`` (cross-entropy by default) or inputs alone (mean of the output).
    On CUDA the allocator's allocated/reserved bytes and NVML's view are reconciled too.

    Example:
        >>> import torch, gpulab as gl
        >>> m = torch.nn.Linear(64, 10); opt = torch.optim.Adam(m.parameters())
        >>> b = gl.breakdown(m, opt, (torch.randn(32, 64), torch.randint(0, 10, (32,))))
        >>> b.optimizer_state_bytes >= 2 * b.parameters_bytes
        True
    """
    torch = _torch()
    _module_parts(model, optimizer, autocast_dtype)
    if not hasattr(_inputs(batch), "shape"):
        raise TypeError(f"batch must be a tensor of inputs or an (inputs, targets) tuple of tensors, got "
                        f"{type(batch).__name__} {batch!r:.40}")
    params = list(model.parameters())
    if not params:
        raise ValueError("breakdown needs a model with parameters")
    device = params[0].device
    param_bytes = _tensor_bytes(params) + _tensor_bytes(model.buffers())
    optimizer.zero_grad(set_to_none=True)
    cast = (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None
            else contextlib.nullcontext())
    cuda = device.type == "cuda"
    if cuda:
        free_memory(device)
        base = torch.cuda.memory_allocated(device)
        with cast:
            out = model(_inputs(batch))
            loss = _loss(out, batch, loss_fn)
        torch.cuda.synchronize(device)
        activations = torch.cuda.memory_allocated(device) - base
        loss.backward()
        del out, loss
        optimizer.step()
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device)
        method = "cuda-allocator"
    else:
        with MemoryTracker() as tracker:
            with cast:
                out = model(_inputs(batch))
                loss = _loss(out, batch, loss_fn)
            activations = tracker.current_bytes
            loss.backward()
            del out, loss
            optimizer.step()
        peak = param_bytes + _tensor_bytes(_input_tensors(batch)) + tracker.peak_bytes
        method = "tracked tensors"
    grads = _tensor_bytes(p.grad for p in params if p.grad is not None)
    opt_state = _tensor_bytes(_optimizer_state_tensors(optimizer))
    allocator: dict[str, int | None] = {}
    if cuda:
        reserved = torch.cuda.memory_reserved(device)
        allocator = {"allocated (torch)": int(torch.cuda.memory_allocated(device)),
                     "reserved (allocator cache)": int(reserved)}
        from ..telemetry import nvml

        nv = nvml.cuda_memory_info(device.index if device.index is not None else torch.cuda.current_device())
        if nv is not None:   # v2 "used" leaves the driver's reserve out, so the rest is context + other processes
            allocator["NVML used"] = nv.used_bytes
            allocator["context and others"] = nv.used_bytes - int(reserved)
            if nv.reserved_bytes is not None:
                allocator["driver reserve (NVML)"] = nv.reserved_bytes
    optimizer.zero_grad(set_to_none=True)
    return MemoryBreakdown(str(device), param_bytes, grads, opt_state, int(activations), int(peak), method, allocator)


def _input_tensors(batch: Any) -> list[Any]:
    return list(batch) if isinstance(batch, (tuple, list)) else [batch]


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryEstimate:
    """A training step's memory computed on fake tensors (nothing allocated), and which GPUs it fits."""

    breakdown: MemoryBreakdown
    batch_size: int
    context_bytes: int

    @property
    def peak_bytes(self) -> int:
        return self.breakdown.peak_bytes

    def fits(self) -> Any:
        """A DataFrame: for each GPU of the course, the memory a program sees (``GPUSpec.program_memory_bytes``), what
        is usable after the CUDA context, whether the step fits, and the largest batch that would (activations scale
        with the batch, the rest does not)."""
        import pandas as pd

        from ..reference import GPU_SPECS

        b = self.breakdown
        static = b.peak_bytes - b.activations_bytes
        per_item = b.activations_bytes / self.batch_size if self.batch_size else 0
        rows = []
        for name in ("T4", "L4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM"):
            memory = GPU_SPECS[name].program_memory_bytes     # what a program sees (a T4: 14.75 GiB, not 15)
            usable = memory - self.context_bytes
            max_batch = int((usable - static) // per_item) if per_item and usable > static else 0
            rows.append({"gpu": name, "memory GiB": memory / GiB,
                         "usable GiB": usable / GiB, "fits": b.peak_bytes <= usable,
                         "largest batch (est.)": max(max_batch, 0)})
        return pd.DataFrame(rows).set_index("gpu")

    def __repr__(self) -> str:
        return (f"MemoryEstimate for batch {self.batch_size}: peak {fmt_bytes(self.peak_bytes)} "
                f"+ {fmt_bytes(self.context_bytes)} CUDA context\n{self.breakdown!r}\n{self.fits()!r}")

    def _repr_html_(self) -> str:
        return self.breakdown._repr_html_() + self.fits().to_html()


@checked(model_fn="fn", batch_fn="fn", batch_size="count", context_bytes="bytes")
def estimate(model_fn: Callable[[], Any], batch_fn: Callable[[int], Any], batch_size: int,
             optimizer: Literal["adam", "adamw", "sgd"] = "adam", autocast_dtype: Any = None,
             context_bytes: int = CUDA_CONTEXT_BYTES) -> MemoryEstimate:
    """Estimate a training step's peak memory without allocating it: the model and batch are built as
    fake tensors (``torch._subclasses.FakeTensorMode``), so a 7B-parameter model costs nothing here.

    ``model_fn()`` builds the model; ``batch_fn(batch_size)`` builds ``(inputs, targets)``.

    Example:
        >>> import torch, gpulab as gl
        >>> est = gl.estimate(lambda: torch.nn.Linear(4096, 4096), lambda n: torch.randn(n, 4096), 8)
        >>> est.breakdown.parameters_bytes == (4096 * 4096 + 4096) * 4
        True
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive whole number, got {batch_size!r}")
    if isinstance(context_bytes, bool) or not isinstance(context_bytes, int) or context_bytes < 0:
        raise ValueError(f"context_bytes must be whole bytes >= 0 (e.g. 500 * gl.MiB), got {context_bytes!r}")
    torch = _torch()
    try:
        from torch._subclasses.fake_tensor import FakeTensorMode
    except ImportError as e:  # pragma: no cover - private API moved
        raise RuntimeError("this PyTorch has no FakeTensorMode; estimate() needs torch >= 2.1") from e
    _module_parts(None, None, autocast_dtype)
    makers = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": lambda p: torch.optim.SGD(p, lr=0.1,
                                                                                                       momentum=0.9)}
    if optimizer not in makers:
        raise ValueError(f"optimizer must be one of {sorted(makers)}, got {optimizer!r}")
    with FakeTensorMode(allow_non_fake_inputs=False):
        model = model_fn()
        opt = makers[optimizer](model.parameters())
        batch = batch_fn(batch_size)
        b = breakdown(model, opt, batch, autocast_dtype=autocast_dtype)
    b = MemoryBreakdown("estimate (fake tensors)", b.parameters_bytes, b.gradients_bytes, b.optimizer_state_bytes,
                        b.activations_bytes, b.peak_bytes, "fake tensors, nothing allocated")
    return MemoryEstimate(b, batch_size, context_bytes)
