"""Real images (CIFAR-10, MNIST) exported to the same on-disk layout as the synthetic sets: downloaded with a deadline and verified, or the synthetic set of the same shape when offline."""
from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Literal

from ..._check import flag, positive, whole
from .images import ImageSet, _check_quality, _materialize, data_dir, log, synthetic_images

__all__ = ['real_images']


# ----------------------------------------------------------------------------------------------
# real data: download with a deadline, verify, rename into the cache; fall back to synthetic offline
_urlopen = None   # tests replace this with a fake; None means urllib.request.urlopen


def _open(url: str, timeout_s: float) -> Any:
    if _urlopen is not None:
        return _urlopen(url, timeout=timeout_s)
    import urllib.request

    return urllib.request.urlopen(url, timeout=timeout_s)


# Not torchvision's download_url: no timeout or cancel, and it writes to the final name, where a cut download stays.
def _download(url: str, dest: Path, md5: str | None, deadline: float, cancel: threading.Event) -> None:
    """Stream ``url`` to ``dest`` via a temporary file; the file appears only when complete and verified."""
    from torchvision.datasets.utils import calculate_md5

    part = dest.with_name(f".{dest.name}.part-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        with _open(url, max(1.0, min(30.0, deadline - time.monotonic()))) as response, open(part, "wb") as out:
            while True:
                if cancel.is_set() or time.monotonic() > deadline:
                    raise TimeoutError(f"download of {url} ran out of time")
                chunk = response.read(1 << 20)
                if not chunk:
                    break
                out.write(chunk)
        got = None if md5 is None else calculate_md5(part)
        if got != md5:
            raise ValueError(f"{url}: checksum mismatch (got md5 {got}, expected {md5})")
        os.replace(part, dest)
    finally:
        with contextlib.suppress(FileNotFoundError):
            part.unlink()


def _run_with_deadline(fn: Callable[[threading.Event], Any], timeout_s: float, what: str) -> Any:
    """Run ``fn(cancel)`` in a daemon thread; give up after ``timeout_s`` (the thread is told to stop and
    cleans up after itself whenever it wakes), so a stalled network never blocks the caller."""
    result: dict[str, Any] = {}
    cancel = threading.Event()

    def target() -> None:
        try:
            result["value"] = fn(cancel)
        except BaseException as e:  # handed to the caller
            result["error"] = e

    t = threading.Thread(target=target, name=f"gpulab-download-{what}", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        cancel.set()
        raise TimeoutError(f"{what}: no complete download within {timeout_s:g} s")
    if "error" in result:
        raise result["error"]
    return result.get("value")


def _fetch_cifar10(cache: Path, deadline: float, cancel: threading.Event) -> Path:
    """torchvision's CIFAR-10 archive, downloaded, verified and extracted into ``cache`` atomically."""
    import tarfile

    from torchvision.datasets import CIFAR10
    from torchvision.datasets.utils import check_integrity

    final = cache / CIFAR10.base_folder
    if final.is_dir():
        return final
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / CIFAR10.filename
    if not check_integrity(str(archive), CIFAR10.tgz_md5):    # absent, or cut short (e.g. by CIFAR10(download=True))
        _download(CIFAR10.url, archive, CIFAR10.tgz_md5, deadline, cancel)
    tmp = cache / f".{CIFAR10.base_folder}.tmp-{secrets.token_hex(4)}"
    try:
        # tarfile, not torchvision's extract_archive: it extracts with no filter (0.20 to 0.29), trusting member paths
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(tmp, filter="data")
        os.rename(tmp / CIFAR10.base_folder, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    archive.unlink(missing_ok=True)
    return final


def _fetch_mnist(cache: Path, deadline: float, cancel: threading.Event) -> Path:
    """torchvision's MNIST files (gzip), downloaded from its mirrors, verified and unpacked atomically into
    ``cache/MNIST/raw`` (the layout ``torchvision.datasets.MNIST(download=False)`` reads)."""
    from torchvision.datasets import MNIST
    from torchvision.datasets.utils import check_integrity, extract_archive

    raw = cache / "MNIST" / "raw"
    wanted = [name for name, _ in MNIST.resources]
    if all((raw / n.removesuffix(".gz")).is_file() for n in wanted):
        return raw
    raw.mkdir(parents=True, exist_ok=True)
    for name, md5 in MNIST.resources:
        target = raw / name.removesuffix(".gz")
        if target.is_file():
            continue
        errors = []
        for mirror in MNIST.mirrors:
            if check_integrity(str(raw / name), md5):    # here and whole (e.g. from MNIST(download=True)): kept
                break
            try:
                _download(f"{mirror}{name}", raw / name, md5, deadline, cancel)
                break
            except (OSError, ValueError) as e:
                errors.append(f"{mirror}: {e}")
        else:
            raise OSError("; ".join(errors))
        tmp = raw / f".{target.name}.tmp-{secrets.token_hex(4)}"   # unpacked beside, renamed whole: never half a file
        try:
            tmp.mkdir()
            extract_archive(str(raw / name), str(tmp))
            os.replace(tmp / target.name, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
            (raw / name).unlink(missing_ok=True)
    return raw


_REAL = {"cifar10": (_fetch_cifar10, 32, 3), "mnist": (_fetch_mnist, 28, 1)}


def _load_real(name: str, cache: Path) -> tuple[Any, Any, list[str]]:
    """(uint8 images NxHxW[xC], labels, class names) through torchvision's dataset class."""
    import numpy as np

    if name == "cifar10":
        from torchvision.datasets import CIFAR10

        ds = CIFAR10(str(cache), train=True, download=False)
        return ds.data, np.asarray(ds.targets), list(ds.classes)
    from torchvision.datasets import MNIST

    ds = MNIST(str(cache), train=True, download=False)
    return ds.data.numpy()[..., None], ds.targets.numpy(), [c.split(" - ")[-1] for c in ds.classes]


def real_images(name: Literal["cifar10", "mnist"] = "cifar10", n: int = 1024, root: str | Path | None = None, *,
                seed: int = 0, timeout_s: float = 60.0, fallback: bool = True, quality: int = 95,
                rebuild: bool = False) -> ImageSet:
    """``n`` images of CIFAR-10 (32x32 RGB) or MNIST (28x28 grey), a seeded class-balanced sample of the
    training set, written as JPEGs in the ImageFolder layout under ``data_dir()/generated``.

    The data set is downloaded once into ``data_dir()/cache`` (torchvision's URLs and checksums) and read
    with torchvision's dataset class. Without network (or torchvision) it returns, with one warning line,
    the synthetic set of the same shape (``ImageSet.note`` says why) - or raises if ``fallback=False``.
    ``timeout_s`` bounds the whole download: a stalled connection never hangs the caller, and only a
    complete, verified download ever reaches the cache.

    Example:
        >>> import tempfile
        >>> s = real_images("mnist", n=10, root=tempfile.mkdtemp() + "/m", timeout_s=0.01)  # no time: stand-in
        >>> (s.size, s.channels, s.n)
        (28, 1, 10)
    """
    if name not in _REAL:
        raise ValueError(f"name must be one of {sorted(_REAL)}, got {name!r}")
    whole("n", n)
    whole("seed", seed, low=0)
    _check_quality(quality)
    flag("rebuild", rebuild)
    positive("timeout_s", timeout_s, unit="seconds")
    flag("fallback", fallback)
    fetch, size, channels = _REAL[name]
    cache = data_dir() / "cache"
    try:
        _run_with_deadline(lambda cancel: fetch(cache, time.monotonic() + timeout_s, cancel), timeout_s, name)
        x, y, class_names = _load_real(name, cache)
    except Exception as e:
        if not fallback:
            raise
        reason = f"{name} unavailable ({type(e).__name__}: {e})"
        log.warning("gpulab: %s; using the synthetic image set of the same shape instead", reason)
        synthetic_root = None if root is None else Path(root)
        return _with_note(synthetic_images(synthetic_root, n=n, classes=10, size=size, seed=seed, channels=channels,
                                           rebuild=rebuild), f"{reason}: synthetic stand-in")
    import numpy as np

    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(y == c)) for c in range(len(class_names))]
    pick = [int(per_class[i % len(class_names)][i // len(class_names)]) for i in range(n)]
    names = [f"{i:02d}_{c.replace(' ', '_')}" for i, c in enumerate(class_names)]
    if root is None:
        root = data_dir() / "generated" / name
    params = {"n": n, "size": size, "channels": channels, "seed": seed, "quality": quality}
    return _materialize(Path(root), name, params, names, lambda: ((int(y[j]), x[j]) for j in pick), quality, rebuild)


def _with_note(s: ImageSet, note: str) -> ImageSet:
    from dataclasses import replace

    return replace(s, note=note)
