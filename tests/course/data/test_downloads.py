"""gpulab.course.data.downloads: torchvision's checksum and unpacking helpers, with gpulab's deadline, atomic rename
and safe tar extraction around them."""
from __future__ import annotations

import gzip
import hashlib
import io
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("torchvision")
from torchvision.datasets import CIFAR10, MNIST  # noqa: E402

from gpulab.course.data import downloads  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


@pytest.fixture
def fake_mnist(monkeypatch):
    """MNIST's four resources as small gzip files with their own md5s, served by a fake urlopen."""
    raw = {name: f"{name} contents".encode() * 100 for name, _ in MNIST.resources}
    packed = {name: gzip.compress(data) for name, data in raw.items()}
    monkeypatch.setattr(MNIST, "resources", [(n, hashlib.md5(g).hexdigest()) for n, g in packed.items()])
    monkeypatch.setattr(MNIST, "mirrors", ["https://a.example/", "https://b.example/"])
    calls: list[str] = []

    def serve(url, timeout):
        calls.append(url)
        if url.startswith("https://a.example/"):
            raise OSError("mirror a is down")
        return io.BytesIO(packed[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(downloads, "_urlopen", serve)
    return raw, packed, calls


def _fetch_mnist(cache: Path) -> Path:
    return downloads._fetch_mnist(cache, time.monotonic() + 30, threading.Event())


def test_mnist_is_unpacked_whole_from_the_second_mirror(fake_mnist, tmp_path):
    raw, _, calls = fake_mnist
    out = _fetch_mnist(tmp_path)
    assert out == tmp_path / "MNIST" / "raw"
    assert _files(tmp_path) == sorted(f"MNIST/raw/{n.removesuffix('.gz')}" for n in raw)   # no .gz, no temporaries
    assert all((out / n.removesuffix(".gz")).read_bytes() == data for n, data in raw.items())
    assert len(calls) == 8 and all(c.startswith("https://b.example/") for c in calls[1::2])
    calls.clear()
    _fetch_mnist(tmp_path)
    assert calls == []                                                 # cached: nothing downloaded again


def test_a_whole_archive_already_there_is_used_and_a_cut_one_is_fetched_again(fake_mnist, tmp_path):
    raw, packed, calls = fake_mnist
    first, second = list(packed)[:2]
    folder = tmp_path / "MNIST" / "raw"
    folder.mkdir(parents=True)
    (folder / first).write_bytes(packed[first])                       # whole (as MNIST(download=True) leaves it)
    (folder / second).write_bytes(packed[second][:10])                # cut short
    _fetch_mnist(tmp_path)
    assert not any(c.endswith(first) for c in calls) and any(c.endswith(second) for c in calls)
    assert (folder / second.removesuffix(".gz")).read_bytes() == raw[second]


def test_a_wrong_download_names_both_checksums_and_leaves_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(downloads, "_urlopen", lambda url, timeout: io.BytesIO(b"not the file"))
    with pytest.raises(ValueError, match="checksum mismatch") as e:
        downloads._download("https://x.example/f", tmp_path / "f", "0" * 32, time.monotonic() + 10, threading.Event())
    assert hashlib.md5(b"not the file").hexdigest() in str(e.value) and "0" * 32 in str(e.value)
    assert _files(tmp_path) == []


def test_a_cut_cifar_archive_in_the_cache_is_fetched_again(monkeypatch, tmp_path):
    data = b"the archive"
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(data).hexdigest())
    (tmp_path / CIFAR10.filename).write_bytes(data[:4])               # a download cut short, not ours
    calls = []

    def serve(url, timeout):
        calls.append(url)
        return io.BytesIO(data)

    monkeypatch.setattr(downloads, "_urlopen", serve)
    with pytest.raises(tarfile.TarError):                              # the fetched bytes are no tar: extracting fails
        downloads._fetch_cifar10(tmp_path, time.monotonic() + 10, threading.Event())
    assert calls == [CIFAR10.url]


def test_a_tar_member_outside_the_cache_is_refused(monkeypatch, tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../outside.txt")
        info.size = 4
        tar.addfile(info, io.BytesIO(b"evil"))
    archive = buf.getvalue()
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(archive).hexdigest())
    monkeypatch.setattr(downloads, "_urlopen", lambda url, timeout: io.BytesIO(archive))
    cache = tmp_path / "cache"
    with pytest.raises(tarfile.TarError):
        downloads._fetch_cifar10(cache, time.monotonic() + 10, threading.Event())
    assert not (tmp_path / "outside.txt").exists() and not (cache / CIFAR10.base_folder).exists()


def test_import_gpulab_course_does_not_import_torchvision():
    code = "import sys, gpulab.course; print('torchvision' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"
