"""Input pipelines over one :class:`~gpulab.data.ImageSet`, built the same way in PyTorch, TensorFlow and DALI.

Every builder reads the same JPEG files and applies the same recipe, so their outputs compare:
decode -> (training) random resized crop to ``crop`` x ``crop`` (area 25-100%, aspect 3/4-4/3) and a random
horizontal flip, or (evaluation, ``augment=False``) a resize to ``crop`` -> float32 scaled to [0, 1] and
normalised with :data:`gpulab.data.MEAN` / :data:`~gpulab.data.STD`. PyTorch and DALI give ``(N, C, H, W)``
float32 images and int64 labels; TensorFlow gives ``(N, H, W, C)`` unless ``layout="NCHW"``.

Each reads exactly the files the set's manifest lists (``ImageSet.files``), with its labels: a stray file in the
folder (an empty ``x.jpg``, a ``notes.txt``, a ``.ipynb_checkpoints`` folder) is never read, and a listed file that
is missing or has another size raises :class:`~gpulab.course.CorruptDataError` when the loader is built.

- :func:`torch_loader`: :class:`ImageFiles` (ImageFolder's decoding over the listed files) + ``DataLoader``
  (workers, pinning, prefetching).
- :func:`cached_loader`: decode once (offline preprocessing), then batched augmentation on tensors, on the
  device the batches go to.
- :func:`tf_dataset`: ``tf.data`` with ``map(num_parallel_calls=AUTOTUNE)``, ``prefetch``, ``cache``, ``interleave``.
- :func:`dali_loader`: NVIDIA DALI, ``fn.readers.file`` -> ``fn.decoders.image`` -> ``fn.random_resized_crop``
  -> ``fn.crop_mirror_normalize``; on a CUDA GPU the decoder is ``"mixed"`` (nvJPEG) and the augmentation runs
  on the GPU; elsewhere the whole pipeline runs on the CPU (``device_id=None``). :func:`dali_plan` says which.
- :func:`dali_tf_dataset`: the same DALI pipeline as a ``tf.data.Dataset`` (needs DALI's TensorFlow plugin).

Example:
    >>> import tempfile, gpulab as gl
    >>> from gpulab import course
    >>> images = course.synthetic_images(tempfile.mkdtemp() + "/s", n=16, classes=4, size=32)
    >>> x, y = next(iter(course.torch_loader(images, batch_size=8, crop=24)))
    >>> tuple(x.shape), str(x.dtype), str(y.dtype)
    ((8, 3, 24, 24), 'torch.float32', 'torch.int64')
"""
from __future__ import annotations

import math
from typing import Any, Iterator, Literal

from ..._check import checked, flag, whole
from .augment import augment_batch
from .images import MEAN, STD, CorruptDataError, ImageSet

__all__ = ['ImageFiles', 'torch_loader', 'CachedLoader', 'cached_loader', 'tf_dataset', 'AREA', 'ASPECT']

AREA = (0.25, 1.0)            # random resized crop: share of the image's area kept
ASPECT = (3 / 4, 4 / 3)       # ... and the crop's aspect ratio (torchvision's default)


def _check_set(images: Any) -> ImageSet:
    if not isinstance(images, ImageSet):
        raise TypeError(f"images must be a gpulab ImageSet (from course.synthetic_images or course.real_images), "
                        f"got {type(images).__name__}")
    return images


def _crop(images: ImageSet, crop: Any) -> int:
    return images.size if crop is None else whole("crop", crop, low=1)


def _norm(channels: int) -> tuple[list[float], list[float]]:
    mean, std = (list(MEAN), list(STD)) if channels == 3 else ([sum(MEAN) / 3], [sum(STD) / 3])
    return mean, std


# ----------------------------------------------------------------------------------------------
# PyTorch: the listed files + DataLoader
class ImageFiles:
    """A map-style dataset (what ``DataLoader`` takes) over exactly the files an :class:`ImageSet` lists:
    item ``i`` is ``(transform(image), label)``, decoded as torchvision's ``ImageFolder`` decodes (its
    ``default_loader``: PIL, converted to RGB), in manifest order. Unlike ``ImageFolder`` it never scans the
    folder, so a stray file there is not read. ``classes``, ``class_to_idx``, ``samples`` and ``targets`` are
    ImageFolder's attributes. A file that cannot be decoded raises :class:`CorruptDataError` naming it.

    Example:
        >>> import tempfile
        >>> from gpulab import course
        >>> s = course.synthetic_images(tempfile.mkdtemp() + "/s", n=4, classes=2, size=16)
        >>> files = ImageFiles(s)
        >>> len(files), files.targets, files[0][0].size
        (4, [0, 0, 1, 1], (16, 16))
    """

    def __init__(self, images: ImageSet, transform: Any = None) -> None:
        _check_set(images)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be a callable taking a PIL image (or None), got {transform!r}")
        self.root, self.transform = images.root, transform
        self.classes = list(images.classes)
        self.class_to_idx = {c: i for i, c in enumerate(images.classes)}
        self.samples = [(str(p), y) for p, y in zip(images.paths(), images.labels)]
        self.targets = list(images.labels)
        maker = "synthetic_images" if images.source == "synthetic" else "real_images"
        self._hint = f"Delete the folder {images.root} (or pass rebuild=True to course.{maker}) to write it again."

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        from torchvision.datasets.folder import default_loader

        path, label = self.samples[index]
        try:
            image = default_loader(path)
        except OSError as e:   # missing, truncated, not an image (PIL's UnidentifiedImageError is an OSError)
            raise CorruptDataError(f"{path} cannot be read as an image ({e}). {self._hint}") from e
        return (self.transform(image) if self.transform is not None else image), label

    def __repr__(self) -> str:
        return f"ImageFiles({len(self)} listed images in {len(self.classes)} classes under {self.root})"


def _torch_transform(images: ImageSet, crop: int, augment: bool) -> Any:
    from torchvision import transforms as T

    mean, std = _norm(images.channels)
    steps: list[Any] = [T.Grayscale()] if images.channels == 1 else []
    if augment:
        steps += [T.RandomResizedCrop(crop, scale=AREA, ratio=ASPECT, antialias=True), T.RandomHorizontalFlip()]
    elif crop != images.size:
        steps.append(T.Resize((crop, crop), antialias=True))
    return T.Compose(steps + [T.ToTensor(), T.Normalize(mean, std)])


def torch_loader(images: ImageSet, batch_size: int = 64, *, crop: int | None = None, augment: bool = True,
                 num_workers: int = 0, pin_memory: bool = False, persistent_workers: bool = False,
                 prefetch_factor: int | None = None, shuffle: bool = True, drop_last: bool = False,
                 seed: int = 0) -> Any:
    """A ``torch.utils.data.DataLoader`` over :class:`ImageFiles` - the files ``images`` lists, with their labels
    (``ImageFolder``'s decoding and order; stray files in the folder are never read).

    Decoding (PIL) and augmentation run per image in the loading process(es): with ``num_workers=0`` in the
    training process itself, between steps; with ``num_workers=k`` in k worker processes that fill a queue of
    ``prefetch_factor`` batches each while the training step runs. ``persistent_workers`` keeps the workers
    between epochs (no restart cost per epoch). ``pin_memory`` copies each batch into page-locked memory so a
    later ``.to("cuda", non_blocking=True)`` is a fast asynchronous copy; it only applies with a CUDA GPU
    (elsewhere there is nothing to pin for and it is left off).

    Example:
        >>> import tempfile, gpulab as gl
        >>> from gpulab import course
        >>> s = course.synthetic_images(tempfile.mkdtemp() + "/s", n=8, classes=2, size=16)
        >>> len(course.torch_loader(s, batch_size=4))
        2
    """
    import torch

    _check_set(images)
    whole("batch_size", batch_size)
    crop = _crop(images, crop)
    whole("num_workers", num_workers, low=0)
    for name, value in (("augment", augment), ("pin_memory", pin_memory), ("persistent_workers", persistent_workers),
                        ("shuffle", shuffle), ("drop_last", drop_last)):
        flag(name, value)
    if num_workers == 0 and (persistent_workers or prefetch_factor is not None):
        raise ValueError("persistent_workers and prefetch_factor need worker processes: pass num_workers >= 1")
    if prefetch_factor is not None:
        whole("prefetch_factor", prefetch_factor)
    dataset = ImageFiles(images.verify(), transform=_torch_transform(images, crop, augment))
    extra: dict[str, Any] = {}
    if num_workers:
        extra.update(persistent_workers=persistent_workers, prefetch_factor=prefetch_factor)
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, num_workers=num_workers,
        pin_memory=pin_memory and torch.cuda.is_available(), generator=torch.Generator().manual_seed(seed), **extra)


# ----------------------------------------------------------------------------------------------
# Decode once, augment batches on tensors
class CachedLoader:
    """Batches from images decoded once into one uint8 tensor on ``device`` (see :func:`cached_loader`).

    Iterating gives an epoch of ``(images, labels)``; augmentation is a random resized crop and flip per
    image, done for the whole batch at once with ``affine_grid`` / ``grid_sample`` (on the GPU when the
    cache lives there). ``prepare_s`` is what the one-off decoding cost.
    """

    def __init__(self, pixels: Any, labels: Any, batch_size: int, crop: int, augment: bool, shuffle: bool,
                 drop_last: bool, seed: int, prepare_s: float) -> None:
        import torch

        self.pixels, self.labels = pixels, labels
        self.batch_size, self.crop, self.augment, self.shuffle, self.drop_last = (batch_size, crop, augment, shuffle,
                                                                                  drop_last)
        self.prepare_s = prepare_s
        self._gen = torch.Generator(device=pixels.device).manual_seed(seed)
        mean, std = _norm(pixels.shape[1])
        self._mean = torch.tensor(mean, device=pixels.device).view(1, -1, 1, 1)
        self._std = torch.tensor(std, device=pixels.device).view(1, -1, 1, 1)

    @property
    def nbytes(self) -> int:
        return self.pixels.numel() * self.pixels.element_size()

    def __len__(self) -> int:
        n = self.pixels.shape[0]
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        import torch

        n = self.pixels.shape[0]
        dev = self.pixels.device
        order = torch.randperm(n, generator=self._gen, device=dev) if self.shuffle else torch.arange(n, device=dev)
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            x = self.pixels[idx].float().div_(255)
            x = (augment_batch(x, size=self.crop, scale=AREA, ratio=ASPECT, generator=self._gen) if self.augment
                 else self._resize(x))
            yield (x - self._mean) / self._std, self.labels[idx]

    def _resize(self, x: Any) -> Any:
        import torch.nn.functional as F

        if x.shape[-1] == self.crop:
            return x
        return F.interpolate(x, size=(self.crop, self.crop), mode="bilinear", antialias=True, align_corners=False)

    def __repr__(self) -> str:
        return (f"CachedLoader({self.pixels.shape[0]} images decoded once in {self.prepare_s:.2f} s, "
                f"{self.nbytes / 2**20:.1f} MiB on {self.pixels.device}, batch {self.batch_size}, crop {self.crop}, "
                f"augment={self.augment})")


@checked(device="device")
def cached_loader(images: ImageSet, batch_size: int = 64, *, crop: int | None = None, augment: bool = True,
                  device: Any = None, shuffle: bool = True, drop_last: bool = False, seed: int = 0) -> CachedLoader:
    """Decode every image once (offline preprocessing) into a uint8 tensor on ``device`` (default: the
    course device), then serve batches with on-the-fly augmentation done on whole batches.

    The trade: decoding is paid once instead of every epoch, and augmentation becomes a few batched tensor
    operations (GPU-friendly), at the price of holding the decoded set in memory - ``N x C x H x W`` bytes,
    which is why this works for CIFAR-sized sets and not for ImageNet in GPU memory.

    Example:
        >>> import tempfile, gpulab as gl
        >>> from gpulab import course
        >>> s = course.synthetic_images(tempfile.mkdtemp() + "/s", n=8, classes=2, size=16)
        >>> x, y = next(iter(course.cached_loader(s, batch_size=8, crop=12, device="cpu")))
        >>> tuple(x.shape), y.tolist() == sorted(y.tolist())
        ((8, 3, 12, 12), False)
    """
    import time

    import numpy as np
    import torch
    from PIL import Image

    _check_set(images)
    whole("batch_size", batch_size)
    crop = _crop(images, crop)
    for name, value in (("augment", augment), ("shuffle", shuffle), ("drop_last", drop_last)):
        flag(name, value)
    if device is None:
        from ...system import device as best_device

        device = best_device()
    t0 = time.perf_counter()
    mode = "RGB" if images.channels == 3 else "L"
    arrays = [np.asarray(Image.open(p).convert(mode)) for p in images.paths()]
    stacked = np.stack(arrays).reshape(len(arrays), images.size, images.size, images.channels)
    pixels = torch.from_numpy(stacked).permute(0, 3, 1, 2).contiguous().to(device)
    if not augment and crop != images.size:   # fully preprocessed: resize once, keep uint8
        import torch.nn.functional as F

        resized = F.interpolate(pixels.float(), size=(crop, crop), mode="bilinear", antialias=True, align_corners=False)
        pixels = resized.round_().clamp_(0, 255).to(torch.uint8)
    labels = torch.tensor(images.labels, dtype=torch.int64, device=device)
    prepare_s = time.perf_counter() - t0
    return CachedLoader(pixels, labels, batch_size, crop, augment, shuffle, drop_last, seed, prepare_s)


# ----------------------------------------------------------------------------------------------
# TensorFlow: tf.data
def tf_dataset(images: ImageSet, batch_size: int = 64, *, crop: int | None = None, augment: bool = True,
               parallel: bool = True, prefetch: bool = True, cache: bool = False, interleave: bool = False,
               shuffle: bool = True, seed: int = 0, layout: Literal["NHWC", "NCHW"] = "NHWC") -> Any:
    """A ``tf.data.Dataset`` of ``(images, labels)`` batches from the JPEG files.

    parallel: ``map(..., num_parallel_calls=tf.data.AUTOTUNE)`` - decode and augment several images at once
        on TensorFlow's thread pool (off: one image at a time).
    prefetch: ``prefetch(AUTOTUNE)`` - prepare the next batches while the model trains on this one.
    cache: keep the *decoded* images in memory after the first epoch (augmentation still runs every epoch).
    interleave: read the files through ``interleave`` over 8 shards of the file list, several shards at once
        - what sharded formats (TFRecord) need on network storage; with local files it mostly adds overhead.

    Example:
        >>> import tempfile, gpulab as gl
        >>> from gpulab import course
        >>> s = course.synthetic_images(tempfile.mkdtemp() + "/s", n=8, classes=2, size=16)
        >>> x, y = next(iter(course.tf_dataset(s, batch_size=4)))
        >>> tuple(x.shape), y.dtype.name
        ((4, 16, 16, 3), 'int64')
    """
    from ..._tf import import_tensorflow

    tf = import_tensorflow()

    _check_set(images)
    whole("batch_size", batch_size)
    crop = _crop(images, crop)
    for name, value in (("augment", augment), ("parallel", parallel), ("prefetch", prefetch), ("cache", cache),
                        ("interleave", interleave), ("shuffle", shuffle)):
        flag(name, value)
    if layout not in ("NHWC", "NCHW"):
        raise ValueError(f"layout must be 'NHWC' (TensorFlow's) or 'NCHW' (PyTorch's), got {layout!r}")
    calls = tf.data.AUTOTUNE if parallel else None
    channels = images.channels
    mean, std = _norm(channels)
    mean_t, std_t = tf.constant(mean, tf.float32), tf.constant(std, tf.float32)
    paths = tf.constant([str(p) for p in images.verify().paths()])   # the listed files only
    labels = tf.constant(images.labels, tf.int64)

    def decode(path: Any, label: Any) -> Any:
        image = tf.io.decode_jpeg(tf.io.read_file(path), channels=channels, dct_method="INTEGER_ACCURATE")
        return tf.ensure_shape(image, [images.size, images.size, channels]), label

    def transform(image: Any, label: Any) -> Any:
        x = tf.cast(image, tf.float32) / 255.0
        if augment:
            begin, size, _ = tf.image.sample_distorted_bounding_box(
                tf.shape(image), bounding_boxes=tf.zeros([1, 0, 4]), min_object_covered=0.0,
                aspect_ratio_range=ASPECT, area_range=AREA, max_attempts=10, use_image_if_no_bounding_boxes=True)
            x = tf.image.resize(tf.slice(x, begin, size), [crop, crop], antialias=True)
            x = tf.image.random_flip_left_right(x)
        elif crop != images.size:
            x = tf.image.resize(x, [crop, crop], antialias=True)
        return (x - mean_t) / std_t, label

    if interleave:
        shards = min(8, images.n)
        files = tf.data.Dataset.from_tensor_slices((paths, labels))
        ds = tf.data.Dataset.range(shards).interleave(lambda i: files.shard(shards, i), cycle_length=shards,
                                                      num_parallel_calls=calls, deterministic=not shuffle)
    else:
        ds = tf.data.Dataset.from_tensor_slices((paths, labels))
    if cache:   # decode once, keep decoded images; shuffle after the cache so every epoch has a new order
        ds = ds.map(decode, num_parallel_calls=calls).cache()
        ds = ds.shuffle(images.n, seed=seed, reshuffle_each_iteration=True) if shuffle else ds
    else:       # shuffle the (cheap) file names, then decode
        ds = ds.shuffle(images.n, seed=seed, reshuffle_each_iteration=True) if shuffle else ds
        ds = ds.map(decode, num_parallel_calls=calls)
    ds = ds.map(transform, num_parallel_calls=calls).batch(batch_size)
    if layout == "NCHW":
        ds = ds.map(lambda x, y: (tf.transpose(x, [0, 3, 1, 2]), y))
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds
