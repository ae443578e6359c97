"""Two convolution levers timed one at a time: the channels_last layout and ``torch.backends.cudnn.benchmark``.

``channels_last`` (NHWC) stores the channels of one pixel side by side: the layout tensor-core convolution kernels
read directly. ``cudnn.benchmark = True`` makes cuDNN time several algorithms for each new input shape and keep the
fastest. Both act on GPUs through cuDNN; on a CPU there is no cuDNN (the benchmark switch changes nothing) and
oneDNN reorders into its own blocked layout either way. :func:`conv_lever_steps` builds the four variants
(baseline, each lever alone, both) from the same initial weights, to be timed side by side with
:func:`gpulab.benchmark_interleaved`; :func:`cudnn_benchmark` sets the switch inside a ``with`` block.

Example:
    >>> from gpulab import course
    >>> with course.cudnn_benchmark(True) as on:
    ...     on
    True
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

__all__ = ["cudnn_benchmark", "conv_lever_steps", "CONV_LEVERS"]

#: The four variants, as ``(channels_last, cudnn.benchmark)``: the baseline, each lever alone, both together.
CONV_LEVERS: dict[str, tuple[bool, bool]] = {
    "baseline (NCHW, benchmark off)": (False, False),
    "channels_last alone": (True, False),
    "cudnn.benchmark alone": (False, True),
    "both": (True, True),
}


@contextlib.contextmanager
def cudnn_benchmark(enabled: bool) -> Iterator[bool]:
    """Inside the block ``torch.backends.cudnn.benchmark`` is ``enabled``; the previous value is restored on
    exit, even after an error. Yields the value set.

    Example:
        >>> import torch
        >>> before = torch.backends.cudnn.benchmark
        >>> with cudnn_benchmark(not before):
        ...     torch.backends.cudnn.benchmark == (not before)
        True
        >>> torch.backends.cudnn.benchmark == before
        True
    """
    if not isinstance(enabled, bool):
        raise TypeError(f"enabled must be True or False, got {enabled!r}")
    import torch

    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = enabled
    try:
        yield enabled
    finally:
        torch.backends.cudnn.benchmark = before


def conv_lever_steps(make_model: Callable[[], Any], batch: tuple[Any, Any], *, precision: str = "fp32",
                     seed: int = 0) -> dict[str, Callable[[], Any]]:
    """One zero-argument training step per entry of :data:`CONV_LEVERS`, each on its own model built by
    ``make_model()`` from the same seed (same initial weights) on ``batch``'s device, with SGD at ``lr=0`` so
    every call does the same work. A channels_last variant converts its model and its input to NHWC; a benchmark
    variant runs its step under :func:`cudnn_benchmark` ``(True)``, the others under ``(False)``. ``precision``:
    ``"fp32"``, ``"bf16"`` or ``"fp16"`` (autocast, with a ``GradScaler`` for fp16), as in
    :class:`~gpulab.course.TrainConfig`. Each step returns its loss (a detached tensor).

    Example:
        >>> import torch
        >>> from gpulab import course
        >>> steps = conv_lever_steps(lambda: course.models.small_cnn(width=4), course.pattern_batch(2))
        >>> list(steps) == list(CONV_LEVERS), all(torch.isfinite(step()) for step in steps.values())
        (True, True)
    """
    import torch

    from ..lesson.loop import TrainConfig, make_scaler, train_step

    if not callable(make_model):
        raise TypeError(f"make_model must be a callable returning a fresh model, got {make_model!r}")
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        raise TypeError(f"batch must be a pair (inputs, targets), got {type(batch).__name__}")
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(f"precision must be 'fp32', 'bf16' or 'fp16', got {precision!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an integer, got {seed!r}")
    device = batch[0].device
    steps: dict[str, Callable[[], Any]] = {}
    for label, (channels_last, benchmark) in CONV_LEVERS.items():
        torch.manual_seed(seed)
        model = make_model().to(device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        config = TrainConfig(precision=precision, channels_last=channels_last, progress=False)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
        scaler = make_scaler(config, device.type)

        def step(model: Any = model, optimizer: Any = optimizer, config: TrainConfig = config, scaler: Any = scaler,
                 benchmark: bool = benchmark) -> Any:
            with cudnn_benchmark(benchmark):
                return train_step(model, optimizer, batch, config, scaler)
        steps[label] = step
    return steps
