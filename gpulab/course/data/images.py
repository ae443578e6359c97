"""Image sets on disk that every loader can read: seeded synthetic JPEGs, and real data with an offline fallback.

:func:`synthetic_images` writes a deterministic, learnable image set (one shape or texture per class, with
random colours, positions, sizes and noise) as real JPEG files in the ImageFolder layout
(``root/<class>/<file>.jpg``), so the *same files* feed torchvision's ``ImageFolder``, TensorFlow's
``tf.data`` and NVIDIA DALI's ``fn.readers.file``. A set is generated once and reused; a manifest records
its parameters and every file's size and CRC, so a change of parameters regenerates it and a damaged file
raises :class:`CorruptDataError` naming the file. Generation happens in a temporary folder that is renamed
into place under a file lock: two processes asking at once get one complete set, never a half-written one.

:func:`real_images` exports CIFAR-10 or MNIST (loaded with torchvision's dataset classes) to the same
layout when the download works, e.g. on Colab; offline it falls back to the synthetic set of the same
shape with one log line. The download runs with a deadline (it never hangs) and is verified and renamed
into the cache only when complete (never a half-written cache).

Example:
    >>> import tempfile, gpulab as gl
    >>> from gpulab import course
    >>> images = course.synthetic_images(tempfile.mkdtemp() + "/shapes", n=20, classes=4, size=32)
    >>> images.n, images.classes[:2], images.counts()[0]
    (20, ('00_disc', '01_square'), 5)
    >>> course.synthetic_images(images.root, n=20, classes=4, size=32).generated   # reused, not rewritten
    False
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import secrets
import shutil
import threading
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from ..._check import flag, whole
from ..._format import fmt_bytes, fmt_number, fmt_seconds, html_table

__all__ = ['CorruptDataError', 'data_dir', 'ImageSet', 'synthetic_images', 'SHAPES', 'MEAN', 'STD']

log = logging.getLogger("gpulab")

# One shape or texture per class; the folder names sort in this order, so label i is SHAPES[i].
SHAPES = ("disc", "square", "triangle", "cross", "ring", "hstripes", "vstripes", "diagonal", "checker", "dots")
# Per-channel normalisation every loader in gpulab applies (the ImageNet statistics, as torchvision uses).
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

_FORMAT = 1                   # manifest format; bump when the generator changes what it writes
_MANIFEST = "manifest.json"
_LOCK_TIMEOUT_S = 600.0       # waiting longer than this for another process's generation is an error


class CorruptDataError(RuntimeError):
    """A file of a generated or cached data set is missing, truncated or changed since it was written."""


# ----------------------------------------------------------------------------------------------
# where data lives
def data_dir() -> Path:
    """The folder for generated and cached data: ``$GPULAB_DATA`` if set, else the ``data/`` folder of the
    course checkout this gpulab comes from, else ``./data`` (e.g. ``/content/data`` on Colab).

    Example:
        >>> data_dir().name
        'data'
    """
    env = os.environ.get("GPULAB_DATA")
    if env:
        return Path(env).expanduser()
    checkout = Path(__file__).resolve().parents[3] / "data"   # gpulab/course/data/images.py -> the checkout
    if (checkout / "README.md").is_file():
        return checkout
    return Path.cwd() / "data"


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True, repr=False)
class ImageSet:
    """A folder of JPEG images in the ImageFolder layout, with what it holds.

    ``files`` are paths relative to ``root`` and ``labels`` their class indices; ``classes`` are the folder
    names in label order (sorted, as ImageFolder, ``image_dataset_from_directory`` and DALI's file reader
    assign them). ``source`` says where the pixels come from ("synthetic", "cifar10", "mnist");
    ``note`` explains a fallback. ``generated`` is True when this call wrote the files (``build_s`` seconds).
    ``file_bytes``: each file's size when written (from the manifest; empty for a set made by hand), which
    :meth:`verify` compares with the disk. Every loader of :mod:`gpulab.course` reads exactly ``files``, with
    ``labels``: anything else in the folder (a stray ``notes.txt``, a ``.ipynb_checkpoints`` folder) is ignored.
    """

    root: Path
    source: str
    classes: tuple[str, ...]
    files: tuple[str, ...]
    labels: tuple[int, ...]
    size: int
    channels: int
    seed: int
    total_bytes: int
    generated: bool = False
    build_s: float = 0.0
    note: str = ""
    file_bytes: tuple[int, ...] = ()

    @property
    def n(self) -> int:
        return len(self.files)

    def verify(self, *, checksums: bool = False) -> ImageSet:
        """Check that every listed file is on disk with the size it was written with - one ``stat`` per file,
        cheap enough for every loader to run when it is built - or, with ``checksums=True``, also read every
        file and compare its CRC-32 with the manifest (what reusing a set does). Raises
        :class:`CorruptDataError` naming the first bad file and how to rebuild the set; returns the set.

        Example:
            >>> import tempfile
            >>> s = synthetic_images(tempfile.mkdtemp() + "/s", n=4, classes=2, size=16)
            >>> s.verify(checksums=True) is s
            True
        """
        flag("checksums", checksums)
        maker = "synthetic_images" if self.source == "synthetic" else "real_images"
        hint = f"Delete the folder {self.root} (or pass rebuild=True to course.{maker}) to write it again."
        if checksums:
            manifest = _read_manifest(self.root)
            if manifest is None:
                raise CorruptDataError(f"{self.root / _MANIFEST} is missing: the image set cannot be checked. {hint}")
            _verify(self.root, manifest, hint)
            return self
        sizes = self.file_bytes if len(self.file_bytes) == len(self.files) else (None,) * len(self.files)
        for rel, nbytes in zip(self.files, sizes):
            path = self.root / rel
            try:
                size = path.stat().st_size
            except (FileNotFoundError, NotADirectoryError):
                raise CorruptDataError(f"{path} is missing from the image set at {self.root}. {hint}") from None
            if nbytes is not None and size != nbytes:
                raise CorruptDataError(f"{path} is truncated or changed: {size} bytes on disk, {nbytes} written. "
                                       f"{hint}")
        return self

    def paths(self) -> list[Path]:
        """Absolute paths of the images, in manifest order (class by class)."""
        return [self.root / f for f in self.files]

    def counts(self) -> list[int]:
        """Number of images per class, in label order."""
        out = [0] * len(self.classes)
        for y in self.labels:
            out[y] += 1
        return out

    def show(self, per_class: int = 4) -> Any:
        """A grid of the first ``per_class`` images of every class (one row per class); returns the Figure."""
        whole("per_class", per_class)
        import matplotlib.pyplot as plt
        from PIL import Image

        rows = len(self.classes)
        fig, axes = plt.subplots(rows, per_class, figsize=(1.1 * per_class + 1.2, 1.1 * rows), squeeze=False)
        for label, name in enumerate(self.classes):
            picks = [f for f, y in zip(self.files, self.labels) if y == label][:per_class]
            for j, ax in enumerate(axes[label]):
                ax.set_xticks([])
                ax.set_yticks([])
                if j < len(picks):
                    ax.imshow(Image.open(self.root / picks[j]), cmap="gray" if self.channels == 1 else None)
            axes[label][0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
        fig.suptitle(f"{self.source}: {self.size}x{self.size} JPEGs", fontsize=9)
        fig.tight_layout()
        return fig

    def _rows(self) -> list[tuple[str, str]]:
        mode = {1: "grey", 3: "RGB"}.get(self.channels, f"{self.channels} channels")
        rows = [("images", f"{fmt_number(self.n)} {self.source} JPEGs, {self.size}x{self.size} {mode}, "
                           f"{len(self.classes)} classes, {fmt_bytes(self.total_bytes)}"),
                ("where", str(self.root)),
                ("state", f"generated now in {fmt_seconds(self.build_s)}" if self.generated else "reused from disk")]
        if self.note:
            rows.append(("note", self.note))
        return rows

    def __repr__(self) -> str:
        return "ImageSet\n" + "\n".join(f"  {k:<7} {v}" for k, v in self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Image set")


# ----------------------------------------------------------------------------------------------
# drawing the synthetic images (numpy only)
def _draw(index: int, label: int, size: int, channels: int, seed: int) -> Any:
    """One image (uint8, HxWxC) of class ``label``; depends only on (seed, index), so any subset or order
    of images can be drawn and gives the same pixels."""
    import numpy as np

    rng = np.random.default_rng([seed, index])
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    cx, cy = rng.uniform(0.3, 0.7, 2)
    r = rng.uniform(0.17, 0.3)
    dx, dy = xx - cx, yy - cy
    freq = rng.uniform(3.0, 6.0)
    phase = rng.uniform(0, 2 * np.pi)
    kind = SHAPES[label]
    if kind == "disc":
        mask = dx**2 + dy**2 < r**2
    elif kind == "square":
        mask = np.maximum(np.abs(dx), np.abs(dy)) < 0.85 * r
    elif kind == "triangle":
        mask = (dy < 0.8 * r) & (np.abs(dx) < (dy + 0.8 * r) * 0.6)
    elif kind == "cross":
        mask = ((np.abs(dx) < 0.3 * r) & (np.abs(dy) < r)) | ((np.abs(dy) < 0.3 * r) & (np.abs(dx) < r))
    elif kind == "ring":
        d2 = dx**2 + dy**2
        mask = (d2 < r**2) & (d2 > (0.55 * r) ** 2)
    elif kind == "hstripes":
        mask = np.sin(2 * np.pi * freq * yy + phase) > 0
    elif kind == "vstripes":
        mask = np.sin(2 * np.pi * freq * xx + phase) > 0
    elif kind == "diagonal":
        mask = np.sin(2 * np.pi * freq * (xx + yy) / math.sqrt(2) + phase) > 0
    elif kind == "checker":
        mask = (np.floor(xx * freq + phase) + np.floor(yy * freq + phase)) % 2 == 0
    else:  # dots on a lattice
        cell = 1.0 / freq
        mask = ((xx + phase) % cell - cell / 2) ** 2 + ((yy + phase) % cell - cell / 2) ** 2 < (0.28 * cell) ** 2
    background = rng.uniform(0, 1, channels).astype(np.float32)
    # the foreground differs from the background by 0.35-0.65 in every channel (wrapped): always visible
    foreground = (background + rng.uniform(0.35, 0.65, channels).astype(np.float32)) % 1.0
    img = np.where(mask[..., None], foreground, background)
    img = img + rng.normal(0, rng.uniform(0.02, 0.08), img.shape).astype(np.float32)
    return (np.clip(img, 0, 1) * 255 + 0.5).astype(np.uint8)


def _jpeg(array: Any, quality: int) -> bytes:
    from PIL import Image

    img = Image.fromarray(array[..., 0] if array.shape[-1] == 1 else array)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# writing a set safely: lock, temporary folder, manifest, rename
@contextlib.contextmanager
def _locked(root: Path, timeout_s: float = _LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive lock for generating ``root`` (a lock file beside it), shared by processes and threads."""
    root.parent.mkdir(parents=True, exist_ok=True)
    lock_path = root.parent / f".{root.name}.lock"
    with _THREAD_LOCK:
        fh = open(lock_path, "a+")
        try:
            try:
                import fcntl
            except ImportError:  # pragma: no cover - Windows: threads are serialised, rename stays atomic
                yield
                return
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"another process has been generating {root} for over {timeout_s:.0f} s; "
                                           f"if none is running, delete {lock_path}") from None
                    time.sleep(0.05)
            try:
                yield
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
        finally:
            fh.close()


_THREAD_LOCK = threading.RLock()   # flock is per open file: threads of one process also need a lock


def _read_manifest(root: Path) -> dict[str, Any] | None:
    try:
        return json.loads((root / _MANIFEST).read_text())
    except FileNotFoundError:
        return None
    except (ValueError, OSError) as e:
        raise CorruptDataError(f"{root / _MANIFEST} is unreadable ({e}); delete the folder {root} to rebuild it") from e


def _verify(root: Path, manifest: dict[str, Any], hint: str) -> None:
    """Every file listed exists with its recorded size and CRC-32; else a :class:`CorruptDataError`."""
    for rel, _label, nbytes, crc in manifest["files"]:
        path = root / rel
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise CorruptDataError(f"{path} is missing from the image set at {root}. {hint}") from None
        if len(data) != nbytes:
            raise CorruptDataError(f"{path} is truncated or changed: {len(data)} bytes on disk, {nbytes} written. "
                                   f"{hint}")
        if zlib.crc32(data) != crc:
            raise CorruptDataError(f"{path} is corrupt: its checksum differs from when it was written. {hint}")


def _image_set(root: Path, manifest: dict[str, Any], generated: bool, build_s: float, note: str = "") -> ImageSet:
    p = manifest["params"]
    files = manifest["files"]
    return ImageSet(root=root, source=manifest["source"], classes=tuple(manifest["classes"]),
                    files=tuple(f[0] for f in files), labels=tuple(int(f[1]) for f in files), size=int(p["size"]),
                    channels=int(p["channels"]), seed=int(p.get("seed", 0)), total_bytes=sum(f[2] for f in files),
                    generated=generated, build_s=build_s, note=note, file_bytes=tuple(int(f[2]) for f in files))


def _materialize(root: Path, source: str, params: dict[str, Any], classes: list[str],
                 items: Callable[[], Iterable[tuple[int, Any]]], quality: int, rebuild: bool,
                 note: str = "") -> ImageSet:
    """Reuse the set at ``root`` if its manifest has these params (verifying every file), else write it.

    ``items()`` yields ``(label, uint8 HxWxC array)``; files are written to a temporary sibling folder,
    the manifest last, then the folder is renamed into place (replacing an older gpulab set)."""
    root = Path(root).expanduser().resolve()
    wanted = {"format": _FORMAT, "source": source, "params": params}
    hint = (f"Delete the folder {root} (or pass rebuild=True) to write it again.")
    with _locked(root):
        manifest = _read_manifest(root) if root.exists() else None
        if root.exists() and manifest is None and any(root.iterdir()):
            raise ValueError(f"{root} exists and is not a gpulab image set (no {_MANIFEST}); refusing to overwrite "
                             "it: choose another root or empty the folder")
        if manifest is not None and not rebuild and all(manifest.get(k) == v for k, v in wanted.items()):
            _verify(root, manifest, hint)
            return _image_set(root, manifest, generated=False, build_s=0.0, note=note)

        t0 = time.perf_counter()
        for stale in root.parent.glob(f".{root.name}.tmp-*"):   # left by a crashed run (we hold the lock)
            shutil.rmtree(stale, ignore_errors=True)
        tmp = root.parent / f".{root.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            for c in classes:
                (tmp / c).mkdir(parents=True)
            files = []
            for i, (label, array) in enumerate(items()):
                data = _jpeg(array, quality)
                rel = f"{classes[label]}/{i:06d}.jpg"
                (tmp / rel).write_bytes(data)
                files.append([rel, label, len(data), zlib.crc32(data)])
            files.sort(key=lambda f: (f[1], f[0]))
            manifest = {**wanted, "classes": classes, "files": files}
            (tmp / _MANIFEST).write_text(json.dumps(manifest))
            if root.exists():
                old = root.parent / f".{root.name}.tmp-old-{secrets.token_hex(4)}"
                os.rename(root, old)
                os.rename(tmp, root)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, root)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        build_s = time.perf_counter() - t0
        log.info("gpulab: wrote %d images to %s in %.1f s", len(files), root, build_s)
        return _image_set(root, manifest, generated=True, build_s=build_s, note=note)


def _check_quality(quality: Any) -> None:
    if whole("quality", quality) > 100:
        raise ValueError(f"quality must be a JPEG quality between 1 and 100, got {quality!r}")


def synthetic_images(root: str | Path | None = None, n: int = 1024, classes: int = 10, size: int = 64,
                     seed: int = 0, *, channels: int = 3, quality: int = 90, rebuild: bool = False) -> ImageSet:
    """A seeded, learnable set of ``n`` JPEG images in ``classes`` classes (balanced), ``size`` x ``size``.

    Class *i* is the shape or texture ``SHAPES[i]`` (disc, square, triangle, ...) with random colours,
    position, size and noise. ``root`` defaults to ``data_dir()/generated/synthetic-<size>px-<rgb|grey>``.
    The set is written once and reused while the parameters match; a change regenerates it; a damaged
    file raises :class:`CorruptDataError` (``rebuild=True`` writes it again).

    Example:
        >>> import tempfile
        >>> s = synthetic_images(tempfile.mkdtemp() + "/s", n=6, classes=3, size=16)
        >>> s.labels, s.paths()[0].suffix
        ((0, 0, 1, 1, 2, 2), '.jpg')
    """
    whole("n", n)
    whole("size", size, low=8)
    if channels not in (1, 3) or isinstance(channels, bool):
        raise ValueError(f"channels must be 1 (grey) or 3 (RGB), got {channels!r}")
    whole("seed", seed, low=0)
    _check_quality(quality)
    flag("rebuild", rebuild)
    whole("classes", classes, low=2)
    if classes > len(SHAPES):
        raise ValueError(f"classes must be between 2 and {len(SHAPES)} (one shape or texture each), got {classes}")
    if root is None:
        root = data_dir() / "generated" / f"synthetic-{size}px-{'rgb' if channels == 3 else 'grey'}"
    names = [f"{i:02d}_{SHAPES[i]}" for i in range(classes)]
    params = {"n": n, "classes": classes, "size": size, "channels": channels, "seed": seed, "quality": quality}

    def items() -> Iterator[tuple[int, Any]]:
        for i in range(n):
            yield i % classes, _draw(i, i % classes, size, channels, seed)

    return _materialize(Path(root), "synthetic", params, names, items, quality, rebuild)
