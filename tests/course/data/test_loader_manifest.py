"""Every image loader of the course reads exactly the files the image set's manifest lists, with its labels.

Stray files dropped into the set's folder (an empty ``stray.jpg``, a ``notes.txt``, a ``.ipynb_checkpoints`` folder
holding a valid JPEG - in a class folder and at the top, where ImageFolder would take it for a class - and a
valid JPEG the manifest does not list) change nothing: torchvision, DALI and tf.data all deliver the manifest's
images and labels, identical to those of a clean copy of the set. A listed file that is missing or truncated is a
:class:`CorruptDataError` naming the file and saying how to rebuild the set, raised when the loader is built.
"""
from __future__ import annotations

import importlib.util
import shutil

from support import fake_dali
import numpy as np
import pytest
import torch

import gpulab as gl
from gpulab import course
from gpulab.course.data import pipelines
from gpulab.course.data import dali as dali_mod
from gpulab.course.data.images import CorruptDataError

KW = dict(batch_size=8, augment=False, shuffle=False)


def _strays(images):
    """Drop into the folder what a learner's tools leave there; returns the paths written."""
    first, second = (images.root / c for c in images.classes[:2])
    real = (images.root / images.files[0]).read_bytes()
    written = {first / "stray.jpg": b"", second / "notes.txt": b"my notes",
               first / ".ipynb_checkpoints" / "000000-checkpoint.jpg": real,
               images.root / ".ipynb_checkpoints" / "000001-checkpoint.jpg": real,   # a hidden "class" folder
               first / "extra.jpg": real}                                           # valid, but not listed
    for path, data in written.items():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
    return list(written)


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("manifest")
    clean = course.synthetic_images(root / "clean", n=24, classes=3, size=16)
    dirty = course.synthetic_images(root / "dirty", n=24, classes=3, size=16)
    assert clean.files == dirty.files and clean.labels == dirty.labels
    _strays(dirty)
    return clean, dirty


def _all(loader):
    xs, ys = zip(*[(np.asarray(x), np.asarray(y).reshape(-1)) for x, y in loader])
    return np.concatenate(xs), np.concatenate(ys).tolist()


def test_the_strays_would_break_a_folder_scan(sets):
    """The premise: torchvision's ImageFolder, which scans the folder, fails on this folder."""
    from torchvision.datasets import ImageFolder

    _, dirty = sets
    folder = ImageFolder(str(dirty.root))
    assert len(folder) != dirty.n or folder.classes != list(dirty.classes)
    with pytest.raises(OSError):
        [folder[i] for i in range(len(folder))]


def test_torch_loader_reads_only_the_listed_files(sets):
    clean, dirty = sets
    x, y = _all(course.torch_loader(dirty, **KW))
    x_clean, y_clean = _all(course.torch_loader(clean, **KW))
    assert len(y) == dirty.n and y == list(dirty.labels)                      # the manifest's order and labels
    assert np.array_equal(x, x_clean) and y == y_clean                         # what a clean folder gives
    shuffled = course.torch_loader(dirty, 8, crop=12, seed=3)
    twin = course.torch_loader(clean, 8, crop=12, seed=3)
    torch.manual_seed(0)
    a = [(x, y) for x, y in shuffled]
    torch.manual_seed(0)
    b = [(x, y) for x, y in twin]
    assert [y.tolist() for _, y in a] == [y.tolist() for _, y in b]            # the same shuffle as before
    assert all(torch.equal(p[0], q[0]) for p, q in zip(a, b))
    assert sorted(v for _, y in a for v in y.tolist()) == sorted(dirty.labels)
    data = course.torch_loader(dirty, 8).dataset
    assert isinstance(data, pipelines.ImageFiles) and data.classes == list(dirty.classes)
    assert data.class_to_idx == {c: i for i, c in enumerate(dirty.classes)} and data.targets == list(dirty.labels)
    assert len(data) == dirty.n and "24 listed images" in repr(data)


def test_torch_loader_with_a_worker_reads_only_the_listed_files(sets):
    _, dirty = sets
    _, y = _all(course.torch_loader(dirty, num_workers=1, **KW))
    assert y == list(dirty.labels)


def test_dali_reads_only_the_listed_files(sets):
    pytest.importorskip("nvidia.dali")
    clean, dirty = sets
    loader = course.dali_loader(dirty, device="cpu", num_threads=1, **KW)
    for _ in range(2):                                                         # two whole epochs
        x, y = _all(loader)
        assert len(y) == dirty.n and y == list(dirty.labels)
    reference = _all(course.torch_loader(clean, **KW))
    assert np.abs(x - reference[0]).max() < 1e-5                               # same decode, same files, same order
    shuffled = [int(v) for _, ys in course.dali_loader(dirty, 8, device="cpu", num_threads=1) for v in ys]
    assert sorted(shuffled) == sorted(dirty.labels)


def test_tf_dataset_reads_only_the_listed_files(sets):
    if importlib.util.find_spec("tensorflow") is None:
        pytest.skip("tensorflow not installed")
    clean, dirty = sets
    x, y = _all(course.tf_dataset(dirty, layout="NCHW", **KW))
    assert y == list(dirty.labels)
    assert np.abs(x - _all(course.torch_loader(clean, **KW))[0]).max() < 1e-5


def test_the_dali_reader_is_given_the_listed_files_and_labels(sets):
    _, dirty = sets
    fn, dali_types, log = fake_dali.recording_fn()
    dali_mod._dali_graph(fn, dali_types, course.dali_plan("cpu"), dirty, 16, False, False, 0)
    calls = dict((name, kw) for name, kw in log if isinstance(kw, dict))
    reader = calls["readers.file"]
    assert reader["files"] == list(dirty.files) and reader["labels"] == list(dirty.labels)
    assert reader["file_root"] == str(dirty.root)                              # files= are relative to it
    assert all(isinstance(v, int) for v in reader["labels"])


# ---- a listed file missing, truncated or damaged ---------------------------------------------------------------
def _builders():
    out = [("torch", lambda s: course.torch_loader(s, 4))]
    if importlib.util.find_spec("nvidia") and importlib.util.find_spec("nvidia.dali"):
        out.append(("dali", lambda s: course.dali_loader(s, 4, device="cpu", num_threads=1)))
    if importlib.util.find_spec("tensorflow") is not None:
        out.append(("tf", lambda s: course.tf_dataset(s, 4)))
    return out


@pytest.mark.parametrize("damage", ["missing", "truncated"])
def test_a_missing_or_truncated_listed_file_is_a_clear_error(tmp_path, damage):
    s = course.synthetic_images(tmp_path / "s", n=6, classes=2, size=16)
    victim = s.root / s.files[3]
    if damage == "missing":
        victim.unlink()
    else:
        victim.write_bytes(victim.read_bytes()[:40])
    for name, build in _builders():
        with pytest.raises(CorruptDataError) as e:
            build(s)
        message = str(e.value)
        assert str(victim) in message and "rebuild=True" in message and "course.synthetic_images" in message, name
        assert ("missing" if damage == "missing" else "truncated") in message, name
    with pytest.raises(CorruptDataError, match=damage if damage == "missing" else "truncated"):
        s.verify()


def test_a_file_damaged_after_the_loader_was_built_names_the_file(tmp_path):
    s = course.synthetic_images(tmp_path / "s", n=6, classes=2, size=16)
    loader = course.torch_loader(s, 3, shuffle=False)
    victim = s.root / s.files[1]
    victim.write_bytes(b"\0" * victim.stat().st_size)                         # same size: only a checksum sees it
    assert s.verify() is s
    with pytest.raises(CorruptDataError, match="checksum"):
        s.verify(checksums=True)
    with pytest.raises(CorruptDataError) as e:
        list(loader)
    assert str(victim) in str(e.value) and "rebuild=True" in str(e.value)


def test_verify_of_a_set_made_by_hand_checks_existence(tmp_path):
    s = course.synthetic_images(tmp_path / "s", n=4, classes=2, size=16)
    assert len(s.file_bytes) == s.n and sum(s.file_bytes) == s.total_bytes
    from dataclasses import replace

    by_hand = replace(s, file_bytes=())
    assert by_hand.verify() is by_hand
    shutil.rmtree(s.root / s.classes[1])
    with pytest.raises(CorruptDataError, match="missing"):
        by_hand.verify()
    with pytest.raises(TypeError, match="checksums"):
        s.verify(checksums="yes")


def test_image_files_bad_input(sets):
    _, dirty = sets
    with pytest.raises(TypeError, match="ImageSet"):
        pipelines.ImageFiles(str(dirty.root))
    with pytest.raises(TypeError, match="transform"):
        pipelines.ImageFiles(dirty, transform="resize")
    img, label = pipelines.ImageFiles(dirty)[len(dirty.files) - 1]
    assert img.size == (16, 16) and label == dirty.labels[-1]


def test_measure_loader_over_a_dirty_folder_counts_the_listed_images(sets):
    _, dirty = sets
    run = gl.measure_loader(course.torch_loader(dirty, 8), None, epochs=2, warmup_batches=0)
    assert run.items == 2 * dirty.n and run.epochs == 2 and run.stopped_by is None
