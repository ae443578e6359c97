"""Augmenting a whole batch of images at once, on the device it lives on (lessons 06 and 08).

:func:`augment_batch` does for a ``(N, C, H, W)`` batch what torchvision's per-image transforms do one image
at a time - random resized crop, horizontal flip, brightness/contrast/saturation jitter, normalisation - as a
handful of batched tensor operations, each image with its own random parameters. The crop and flip are one
affine sampling grid per image (``affine_grid`` + ``grid_sample``, bilinear), so all of it runs on the device
that holds the batch (the GPU, when the batch is there).

Example:
    >>> import torch
    >>> x = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    >>> y = augment_batch(x, size=24, generator=torch.Generator().manual_seed(0))
    >>> tuple(y.shape), y.dtype, 0 <= float(y.min()) <= float(y.max()) <= 1
    ((8, 3, 24, 24), torch.float32, True)
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from ..._check import positive, whole

__all__ = ["augment_batch"]


def _pair(name: str, value: Any, low: float, high: float | None) -> tuple[float, float]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{name} must be a pair (low, high), got {value!r}")
    a, b = (positive(name, v) for v in value)
    if a > b or a < low or (high is not None and b > high):
        bound = f"<= {high}" if high is not None else "finite"
        raise ValueError(f"{name} must be (low, high) with {low} < low <= high {bound}, got {value!r}")
    return a, b


def _per_channel(name: str, value: Any, channels: int, like: Any) -> Any:
    import torch

    t = torch.as_tensor(value, dtype=torch.float32, device=like.device).flatten()
    if t.numel() != channels:
        raise ValueError(f"{name} needs one value per channel ({channels}), got {value!r}")
    return t.view(1, channels, 1, 1)


def augment_batch(x: Any, *, size: int | None = None, scale: tuple[float, float] = (0.25, 1.0),
                  ratio: tuple[float, float] = (3 / 4, 4 / 3), flip: bool = True, jitter: float = 0.0,
                  mean: Sequence[float] | Any | None = None, std: Sequence[float] | Any | None = None,
                  generator: Any = None) -> Any:
    """A randomly augmented float32 copy of the image batch ``x``, computed on ``x``'s device.

    For each image, independently: a crop covering a random share ``scale`` of its area with a random aspect
    ratio (width / height, log-uniform) in ``ratio``, placed at random inside the image and resized to ``size``
    x ``size`` (default: the input's height and width); a horizontal flip with probability 1/2 (``flip``);
    with ``jitter`` > 0, brightness, contrast and saturation each scaled by a random factor in
    ``[1 - jitter, 1 + jitter]``; then values clipped to [0, 1] and, with ``mean`` and ``std`` (one per
    channel), normalised as ``(x - mean) / std``.

    Args:
        x: ``(N, C, H, W)`` images, uint8 in [0, 255] or floating point in [0, 1].
        generator: a ``torch.Generator`` on ``x``'s device for reproducible draws; default: torch's global one.

    Example:
        >>> import torch
        >>> x = torch.zeros(4, 3, 16, 16, dtype=torch.uint8)
        >>> augment_batch(x, jitter=0.3, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)).unique().tolist()
        [-1.0]
    """
    import torch
    import torch.nn.functional as F

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor of images (N, C, H, W), got {type(x).__name__}")
    if x.dim() != 4 or x.shape[0] == 0:
        raise ValueError(f"x must be a non-empty batch of images (N, C, H, W), got shape {tuple(x.shape)}")
    if x.dtype != torch.uint8 and not x.is_floating_point():
        raise TypeError(f"x must hold uint8 (0-255) or floating point (0-1) pixels, got {x.dtype}")
    n, c, h, w = x.shape
    out_h, out_w = (h, w) if size is None else (whole("size", size),) * 2
    area = _pair("scale", scale, 0.0, 1.0)
    aspect = _pair("ratio", ratio, 0.0, None)
    if not isinstance(flip, bool):
        raise TypeError(f"flip must be True or False, got {flip!r}")
    jitter = positive("jitter", jitter, allow_zero=True)
    if jitter >= 1:
        raise ValueError(f"jitter must be in [0, 1): factors are drawn from [1 - jitter, 1 + jitter], got {jitter!r}")
    if (mean is None) != (std is None):
        raise ValueError("mean and std go together: give both (one value per channel) or neither")
    if generator is not None:
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator, got {generator!r}")
        if generator.device.type != x.device.type:
            raise ValueError(f"generator is on {generator.device} but x is on {x.device}: "
                             f"use torch.Generator(device=x.device)")
    dev, g = x.device, generator
    x = x.float().div_(255) if x.dtype == torch.uint8 else x.float()

    # random resized crop + flip: one affine grid per image (coordinates in [-1, 1])
    share = torch.empty(n, device=dev).uniform_(*area, generator=g)
    log_ratio = torch.empty(n, device=dev).uniform_(math.log(aspect[0]), math.log(aspect[1]), generator=g)
    cw = torch.sqrt(share * log_ratio.exp()).clamp(max=1.0)        # crop width and height as shares of the image
    ch = torch.sqrt(share / log_ratio.exp()).clamp(max=1.0)
    cx = (torch.rand(n, device=dev, generator=g) * 2 - 1) * (1 - cw)
    cy = (torch.rand(n, device=dev, generator=g) * 2 - 1) * (1 - ch)
    sign = (torch.where(torch.rand(n, device=dev, generator=g) < 0.5, -1.0, 1.0) if flip
            else torch.ones(n, device=dev))
    theta = torch.zeros(n, 2, 3, device=dev)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = cw * sign, cx, ch, cy
    grid = F.affine_grid(theta, [n, c, out_h, out_w], align_corners=False)
    x = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)

    if jitter > 0:   # brightness, contrast, saturation, each image its own factor
        def factor() -> Any:
            return torch.empty(n, 1, 1, 1, device=dev).uniform_(1 - jitter, 1 + jitter, generator=g)

        x = x * factor()
        m = x.mean(dim=(1, 2, 3), keepdim=True)
        x = (x - m) * factor() + m
        gray = x.mean(dim=1, keepdim=True)
        x = (x - gray) * factor() + gray
    x = x.clamp(0.0, 1.0)
    if mean is not None:
        mu, sigma = _per_channel("mean", mean, c, x), _per_channel("std", std, c, x)
        if not bool((sigma > 0).all()):
            raise ValueError(f"std must be positive for every channel, got {std!r}")
        x = (x - mu) / sigma
    return x
