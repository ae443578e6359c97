"""MNIST for the capstone, held as tensors: the real digits when they can be downloaded, an MNIST-shaped
stand-in (same shapes, dtype and value range, learnable) when they cannot, and the seed's per-sample dataset.

:func:`digits` returns uint8 images ``N x 28 x 28`` and int64 labels, split into train and test. The seed
loop reads them through :class:`PerSampleDigits`, which does exactly what ``torchvision.datasets.MNIST``
does per sample (a PIL image, then the transform, e.g. ``ToTensor``); the faster recipes skip that work
and index whole tensors.

Example:
    >>> from gpulab import course
    >>> d = course.digits(n_train=64, n_test=32, timeout_s=0.01, download=False)   # offline: the stand-in
    >>> tuple(d.train_x.shape), str(d.train_x.dtype), d.source
    ((64, 28, 28), 'torch.uint8', 'synthetic')
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from ..._check import flag, positive, whole
from ..._format import html_table, text_table

__all__ = ["Digits", "digits", "PerSampleDigits", "to_features"]

log = logging.getLogger("gpulab")


@dataclass(frozen=True, repr=False)
class Digits:
    """Train and test digits as tensors: ``*_x`` uint8 ``N x 28 x 28`` (0-255), ``*_y`` int64 class labels.
    ``source`` is "mnist" or "synthetic"; ``note`` says why a stand-in was used."""

    train_x: Any
    train_y: Any
    test_x: Any
    test_y: Any
    source: str
    note: str = ""

    @property
    def n_train(self) -> int:
        return int(self.train_x.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.test_x.shape[0])

    def take(self, n_train: int) -> "Digits":
        """The first ``n_train`` training images (already a random sample), the same test set.

        Example:
            >>> d = digits(n_train=64, n_test=8, download=False)
            >>> d.take(16).n_train, d.take(16).n_test
            (16, 8)
        """
        whole("n_train", n_train)
        if n_train > self.n_train:
            raise ValueError(f"n_train={n_train} is more than the {self.n_train:,} training images held")
        from dataclasses import replace

        return replace(self, train_x=self.train_x[:n_train], train_y=self.train_y[:n_train])

    def _rows(self) -> list[tuple[str, str]]:
        rows = [("source", "MNIST (torchvision's files)" if self.source == "mnist" else "MNIST-shaped stand-in"),
                ("train", f"{self.n_train:,} images 28x28, uint8"), ("test", f"{self.n_test:,} images")]
        return rows + ([("note", self.note)] if self.note else [])

    def __repr__(self) -> str:
        return "Digits\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Digits")


class _NoDownload(Exception):
    """download=False: the stand-in was asked for."""


def _standin(n: int, seed: int) -> tuple[Any, Any]:
    """``n`` MNIST-shaped images: bright strokes on black, where each class's smooth random field crosses zero
    (three fixed "styles" per class), bent by a random smooth field per image and shifted by up to 3 pixels:
    an MLP gets most of them right after one epoch and keeps improving for a few."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(4321)
    styles = F.interpolate(torch.randn(30, 1, 5, 5, generator=g), size=34, mode="bicubic", align_corners=False)[:, 0]
    g = torch.Generator().manual_seed(int(seed))
    y = torch.randint(0, 10, (n,), generator=g)
    style = y * 3 + torch.randint(0, 3, (n,), generator=g)
    dy, dx = torch.randint(0, 7, (n,), generator=g), torch.randint(0, 7, (n,), generator=g)
    out = torch.empty(n, 28, 28, dtype=torch.uint8)
    for lo in range(0, n, 8192):                                  # chunks keep the fields small
        hi = min(n, lo + 8192)
        bend = F.interpolate(torch.randn(hi - lo, 1, 4, 4, generator=g), size=34, mode="bicubic",
                             align_corners=False)[:, 0]
        rows = (dy[lo:hi, None] + torch.arange(28))[:, :, None]      # k x 28 x 1
        cols = (dx[lo:hi, None] + torch.arange(28))[:, None, :]      # k x 1 x 28
        k = torch.arange(hi - lo)[:, None, None]
        field = styles[style[lo:hi, None, None], rows, cols] + 0.3 * bend[k, rows, cols]
        out[lo:hi] = (torch.exp(-(field / 0.25) ** 2) * 255).round().to(torch.uint8)
    return out, y


def _real(timeout_s: float) -> tuple[Any, Any, Any, Any]:
    """MNIST's train and test sets, downloaded once into the course's data cache (torchvision's mirrors and
    checksums, with a deadline)."""
    from torchvision.datasets import MNIST

    from ..data.downloads import _fetch_mnist, _run_with_deadline
    from ..data.images import data_dir

    cache = data_dir() / "cache"
    _run_with_deadline(lambda cancel: _fetch_mnist(cache, time.monotonic() + timeout_s, cancel), timeout_s, "mnist")
    train, test = MNIST(str(cache), train=True, download=False), MNIST(str(cache), train=False, download=False)
    return train.data, train.targets, test.data, test.targets


def digits(n_train: int | None = None, n_test: int | None = None, *, seed: int = 0, download: bool = True,
           timeout_s: float = 60.0) -> Digits:
    """MNIST's digits as tensors: ``n_train`` training and ``n_test`` test images (seeded random subsets;
    None = all 60,000 / 10,000).

    With ``download`` the files come from torchvision's mirrors into the course's data cache (once, verified,
    within ``timeout_s``). Offline, or with ``download=False``, a stand-in of the same shape is generated
    (``source == "synthetic"``; one warning line says why), so every lesson cell still runs.
    """
    for name, value, most in (("n_train", n_train, 60_000), ("n_test", n_test, 10_000)):
        if value is not None and whole(name, value) > most:     # before a stand-in of that many images is made
            raise ValueError(f"{name}={value} is more than the {most:,} images MNIST has: ask for at most {most:,}")
    whole("seed", seed, low=0)
    flag("download", download)
    positive("timeout_s", timeout_s, unit="seconds")
    import torch

    note = ""
    try:
        if not download:
            raise _NoDownload()
        tx, ty, vx, vy = _real(timeout_s)
        source = "mnist"
    except Exception as e:
        if isinstance(e, _NoDownload):
            note = "download=False: an MNIST-shaped stand-in"
        else:
            note = f"MNIST unavailable ({type(e).__name__}: {e}); an MNIST-shaped stand-in instead"
            log.warning("gpulab: %s", note)
        tx, ty = _standin(n_train or 60_000, seed)
        vx, vy = _standin(n_test or 10_000, seed + 1_000_003)
        source = "synthetic"
    g = torch.Generator().manual_seed(int(seed))
    for name, want, have in (("n_train", n_train, tx.shape[0]), ("n_test", n_test, vx.shape[0])):
        if want is not None and want > have:
            raise ValueError(f"{name}={want} is more than the {have:,} images the set has: ask for at most {have:,}")
    pick = torch.randperm(tx.shape[0], generator=g)[:n_train] if n_train is not None else slice(None)
    vpick = torch.randperm(vx.shape[0], generator=g)[:n_test] if n_test is not None else slice(None)
    return Digits(tx[pick].contiguous(), ty[pick].long(), vx[vpick].contiguous(), vy[vpick].long(), source, note)


class PerSampleDigits:
    """A map-style dataset that returns ``(transform(PIL image), label)`` one sample at a time, the work
    ``torchvision.datasets.MNIST`` does in its ``__getitem__``: the seed loop's data path.

    Example:
        >>> import torch
        >>> from torchvision import transforms
        >>> ds = PerSampleDigits(torch.zeros(2, 28, 28, dtype=torch.uint8), torch.tensor([3, 4]), transforms.ToTensor())
        >>> x, y = ds[1]
        >>> tuple(x.shape), y
        ((1, 28, 28), 4)
    """

    def __init__(self, images: Any, labels: Any, transform: Callable[[Any], Any] | None = None) -> None:
        if len(images) != len(labels):
            raise ValueError(f"images and labels differ in length: {len(images)} vs {len(labels)}")
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        from PIL import Image

        img = Image.fromarray(self.images[i].numpy())
        return (self.transform(img) if self.transform is not None else img), int(self.labels[i])


def check_pixels(images: Any, name: str = "images") -> Any:
    """``images`` checked as uint8 pixels (0-255) or floats in [0, 1]; returns them (float64 as float32)."""
    import torch

    if not isinstance(images, torch.Tensor):
        raise TypeError(f"{name} must be a tensor of images, got {type(images).__name__}")
    if images.dtype == torch.uint8:
        return images
    if not images.is_floating_point():
        raise TypeError(f"{name} must hold uint8 pixels (0-255) or floats in [0, 1], got {images.dtype}: convert "
                        f"with {name}.to(torch.uint8) or {name}.float() / 255")
    if images.numel():
        lo, hi = (float(v) for v in torch.aminmax(images.detach().float()))
        if not (0.0 <= lo and hi <= 1.0):       # also NaN, which fails both comparisons
            raise ValueError(f"{name} holds floats from {lo:g} to {hi:g}: float pixels must already be in [0, 1] "
                             f"(uint8 pixels are divided by 255 here, floats are not); if they are 0-255 values, "
                             f"pass {name} / 255")
    return images if images.dtype == torch.float32 else images.float()



def to_features(images: Any, name: str = "images") -> Any:
    """``N x 28 x 28`` images -> float32 ``N x 784`` in [0, 1], what ``ToTensor`` + ``reshape`` give per sample,
    done once for the whole tensor: uint8 pixels are divided by 255, float pixels (already in [0, 1]) are kept
    as they are, never scaled twice; the caller's tensor is never modified. Floats outside [0, 1] are a
    ``ValueError`` saying how to scale them.

    Example:
        >>> import torch
        >>> u8 = torch.full((2, 28, 28), 255, dtype=torch.uint8)
        >>> to_features(u8).shape, float(to_features(u8).max()), float(to_features(u8.float() / 255).max())
        (torch.Size([2, 784]), 1.0, 1.0)
    """
    import torch

    images = check_pixels(images, name)
    flat = images.reshape(images.shape[0], -1)
    return flat.to(torch.float32).div(255.0) if images.dtype == torch.uint8 else flat
