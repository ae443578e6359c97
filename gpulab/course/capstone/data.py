"""The capstone's data paths: the digits' pixels as features (uint8 0-255 or floats already in [0, 1]), the
images as files on disk, and one epoch of batches the way a :class:`course.Recipe` says to make them.

Pixels: uint8 images are divided by 255 (what ``ToTensor`` does); float images are taken as they are and must
already lie in [0, 1]. Floats outside it (0-255 values held as floats) are refused with a ``ValueError`` rather
than guessed at: divide them by 255 first.

Example:
    >>> import torch
    >>> u8 = torch.tensor([[[0, 255]]], dtype=torch.uint8)
    >>> features(u8).tolist(), features(u8.float() / 255).tolist()      # the same features, scaled once
    ([[0.0, 1.0]], [[0.0, 1.0]])
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .digits import Digits, PerSampleDigits, check_pixels, to_features as features

__all__ = ["features", "digits_on_disk"]


def as_uint8(images: Any) -> Any:
    """Pixels as uint8 0-255 (floats in [0, 1] rounded), as image files hold them."""
    import torch

    images = check_pixels(images)
    return images if images.dtype == torch.uint8 else (images * 255.0).round().to(torch.uint8)


def _grey(path: str) -> Any:
    from PIL import Image

    with open(path, "rb") as f:
        return Image.open(f).convert("L")


def digits_on_disk(d: Digits, root: str | Path | None = None) -> Path:
    """Write ``d``'s training images as PNG files in the ImageFolder layout (``root/<class>/<i>.png``),
    once: a second call with the same digits finds them. Float pixels in [0, 1] are written as 0-255. Returns
    the folder."""
    import hashlib

    from PIL import Image

    from ..._check import path_arg
    from ..data.images import data_dir

    if not isinstance(d, Digits):
        raise TypeError(f"d must be course.digits(...), got {type(d).__name__} {d!r:.40}")
    if root is not None:
        path_arg("root", root)
    digest = hashlib.sha1(d.train_x.numpy().tobytes() + d.train_y.numpy().tobytes()).hexdigest()[:12]
    root = Path(root) if root is not None else data_dir() / "generated" / f"digits-{digest}"
    done = root / ".complete"
    if done.is_file() and done.read_text() == digest:
        return root
    for c in range(10):
        (root / f"{c}").mkdir(parents=True, exist_ok=True)
    for i, (img, label) in enumerate(zip(as_uint8(d.train_x).numpy(), d.train_y.tolist())):
        Image.fromarray(img).save(root / f"{label}" / f"{i:06d}.png")
    done.write_text(digest)
    return root


class Batches:
    """One epoch of ``(x, y)`` batches on the device, the way the recipe's data path makes them. ``close()`` shuts
    down the DataLoader's worker processes (call it in a ``finally``: an interrupted epoch leaves them running)."""

    def __init__(self, recipe: Any, d: Digits, dev: Any, seed: int, disk_root: Path | None) -> None:
        import torch

        self.r, self.dev, self.cuda = recipe, dev, dev.type == "cuda"
        self.pin = recipe.pin_memory and self.cuda
        self.g = torch.Generator().manual_seed(seed)
        self.loader: Any = None
        if recipe.data in ("per-sample", "disk"):
            from torch.utils.data import DataLoader
            from torchvision import transforms

            if recipe.data == "disk":
                from torchvision.datasets import ImageFolder

                ds: Any = ImageFolder(str(disk_root or digits_on_disk(d)), transform=transforms.ToTensor(), loader=_grey)
            else:
                # float pixels become mode "F" PIL images, which ToTensor returns unscaled; uint8 ones it divides
                ds = PerSampleDigits(check_pixels(d.train_x, "data.train_x"), d.train_y, transforms.ToTensor())
            self.loader = DataLoader(ds, batch_size=recipe.batch_size, shuffle=True, num_workers=recipe.workers,
                                     pin_memory=self.pin, persistent_workers=recipe.workers > 0, generator=self.g)
        else:
            x, y = features(d.train_x, "data.train_x"), d.train_y
            if recipe.data == "device":
                x, y = x.to(dev), y.to(dev)
            self.x, self.y = x, y
            if self.pin and recipe.data == "host":     # gathered once per epoch into page-locked buffers
                self.px = torch.empty_like(x).pin_memory()
                self.py = torch.empty_like(y).pin_memory()

    def steps_per_epoch(self) -> int:
        return len(self.loader) if self.loader is not None else -(-int(self.x.shape[0]) // self.r.batch_size)

    def resident(self) -> list[Any]:
        """The data tensors held in the device's memory (on a CPU, host memory is the device's)."""
        if self.loader is not None:
            return []
        return [self.x, self.y] if (self.r.data == "device" or not self.cuda) else []

    def close(self) -> None:
        """Shut down the DataLoader's worker processes now (and its pinning thread), as the loader's iterator does
        when it is garbage collected; the next epoch starts new ones. Safe to call twice."""
        if self.loader is None:
            return
        it, self.loader._iterator = getattr(self.loader, "_iterator", None), None   # persistent workers' iterator
        shutdown = getattr(it, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()

    def epoch(self) -> Any:
        import torch

        r, dev = self.r, self.dev
        if self.loader is not None:
            for images, labels in self.loader:
                yield (images.reshape(-1, 28 * 28).to(dev, non_blocking=self.pin),
                       labels.to(dev, non_blocking=self.pin))
            return
        n = int(self.x.shape[0])
        perm = torch.randperm(n, generator=self.g)
        if r.data == "device":
            perm = perm.to(dev)
            x, y = self.x, self.y
            for i in range(0, n, r.batch_size):
                idx = perm[i:i + r.batch_size]
                yield x[idx], y[idx]
            return
        if self.pin:
            # The previous epoch's copies have finished (each epoch ends with a device sync), so the pinned
            # buffers can be rewritten; slices of them are page-locked and copy asynchronously.
            torch.index_select(self.x, 0, perm, out=self.px)
            torch.index_select(self.y, 0, perm, out=self.py)
            x, y = self.px, self.py
        else:
            x, y = self.x[perm], self.y[perm]
        for i in range(0, n, r.batch_size):
            yield (x[i:i + r.batch_size].to(dev, non_blocking=self.pin),
                   y[i:i + r.batch_size].to(dev, non_blocking=self.pin))
