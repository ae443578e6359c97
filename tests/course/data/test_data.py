"""gpulab.data, gpulab.pipelines, gpulab.loading: the image sets on disk (determinism, regeneration,
concurrent generation, damaged files, offline fallback that never hangs), the loaders (DALI on CPU really
runs; its GPU graph is checked against a recording fake), and the loader measurements."""
from __future__ import annotations

import contextlib
import doctest
import importlib.util
import io
import json
import os
import pickle
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import types
import urllib.error
from pathlib import Path

from support import fake_dali
import numpy as np
import pytest

import gpulab as gl
from gpulab import course
import gpulab.course.data.images
import gpulab.course.data.downloads
import gpulab.course.data.dali
import gpulab.data.compare
import gpulab.data.measure
import gpulab.course.data.pipelines
from gpulab.course.data import downloads as data_mod
from gpulab.course.data import dali as pipe_mod

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(autouse=True)
def private_data_dir(tmp_path, monkeypatch):
    """Every test writes under its own data directory, never the checkout's data/."""
    monkeypatch.setenv("GPULAB_DATA", str(tmp_path / "data"))
    return tmp_path / "data"


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    """One small shared set for the loader tests (64 images, 32x32, 4 classes)."""
    return course.synthetic_images(tmp_path_factory.mktemp("sets") / "shapes", n=64, classes=4, size=32)


def test_doctests():
    # Examples that need DALI or TensorFlow skip where they are absent (the lean `make compat` venv).
    needs = {"gpulab.course.data.dali.dali_loader": "nvidia.dali", "gpulab.course.data.dali.check_dali": "nvidia.dali",
             "gpulab.course.data.pipelines.tf_dataset": "tensorflow"}

    def absent(package):
        try:
            return importlib.util.find_spec(package) is None
        except ModuleNotFoundError:        # its parent package ("nvidia") is missing too
            return True

    skip = {name for name, package in needs.items() if absent(package)}
    runner = doctest.DocTestRunner()
    for mod in (gpulab.course.data.images, gpulab.course.data.downloads, gpulab.course.data.pipelines, gpulab.course.data.dali,
                gpulab.data.measure, gpulab.data.compare):
        for test in doctest.DocTestFinder().find(mod):
            if test.name not in skip:
                failed = runner.run(test).failed
                assert failed == 0, test.name


# ---- synthetic images ---------------------------------------------------------------------------
def test_synthetic_images_are_deterministic_and_laid_out_for_imagefolder(tmp_path):
    a = course.synthetic_images(tmp_path / "a", n=30, classes=3, size=24, seed=7)
    b = course.synthetic_images(tmp_path / "b", n=30, classes=3, size=24, seed=7)
    c = course.synthetic_images(tmp_path / "c", n=30, classes=3, size=24, seed=8)
    assert a.generated and a.n == 30 and a.counts() == [10, 10, 10]
    assert a.classes == ("00_disc", "01_square", "02_triangle") and a.files == b.files
    assert [p.read_bytes() for p in a.paths()] == [p.read_bytes() for p in b.paths()]     # same seed: same bytes
    assert [p.read_bytes() for p in a.paths()] != [p.read_bytes() for p in c.paths()]
    assert sorted(d.name for d in a.root.iterdir() if d.is_dir()) == list(a.classes)
    for path, label in zip(a.paths(), a.labels):
        assert path.parent.name == a.classes[label] and path.read_bytes()[:2] == b"\xff\xd8"   # a JPEG
    assert "30 synthetic JPEGs" in repr(a) and "<table" in a._repr_html_()


def test_the_default_root_is_under_the_data_dir(private_data_dir):
    s = course.synthetic_images(n=4, classes=2, size=16)
    assert s.root == (private_data_dir / "generated" / "synthetic-16px-rgb").resolve()
    assert course.data_dir() == private_data_dir


def test_reused_while_parameters_match_regenerated_when_they_change(tmp_path):
    first = course.synthetic_images(tmp_path / "s", n=12, classes=3, size=16)
    again = course.synthetic_images(tmp_path / "s", n=12, classes=3, size=16)
    assert first.generated and not again.generated and again.files == first.files
    bigger = course.synthetic_images(tmp_path / "s", n=20, classes=4, size=16)
    assert bigger.generated and bigger.n == 20 and len(bigger.classes) == 4
    assert sorted(d.name for d in bigger.root.iterdir() if d.is_dir()) == list(bigger.classes)
    other_seed = course.synthetic_images(tmp_path / "s", n=20, classes=4, size=16, seed=1)
    assert other_seed.generated
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]           # no temporary folders left


def test_grey_images_and_rebuild(tmp_path):
    g = course.synthetic_images(tmp_path / "g", n=4, classes=2, size=16, channels=1)
    from PIL import Image

    assert Image.open(g.paths()[0]).mode == "L" and g.channels == 1
    assert course.synthetic_images(g.root, n=4, classes=2, size=16, channels=1, rebuild=True).generated


def test_the_images_are_learnable(tmp_path):
    import torch

    s = course.synthetic_images(tmp_path / "l", n=600, classes=10, size=32)
    torch.manual_seed(0)
    model = course.models.small_cnn(width=16)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    train = course.cached_loader(s, 64, augment=False, device="cpu", seed=0)
    for _ in range(6):
        for batch in train:
            course.train_step(model, opt, batch)
    held_out = course.synthetic_images(tmp_path / "t", n=200, classes=10, size=32, seed=123)
    x, y = next(iter(course.cached_loader(held_out, 200, augment=False, shuffle=False, device="cpu")))
    assert course.evaluate(model, (x, y)) > 0.5          # chance is 0.1; about 0.7 after these 6 epochs


def test_concurrent_generation_gives_one_complete_set(tmp_path):
    """Two processes (and two threads) ask for the same set at once: one writes it, the others wait for
    the lock and reuse it; nobody sees a half-written folder."""
    root = tmp_path / "shared"
    code = textwrap.dedent(f"""
        import json
        from gpulab import course
        s = course.synthetic_images({str(root)!r}, n=300, classes=10, size=32)
        print(json.dumps({{"generated": s.generated, "n": s.n, "files": len(set(s.files))}}))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert sorted(r["generated"] for r in results) == [False, True]
    assert all(r["n"] == 300 and r["files"] == 300 for r in results)
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(course.synthetic_images(root, n=300, classes=10, size=32)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(got) == 3 and not any(s.generated for s in got)
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_damaged_files_raise_a_clear_error(tmp_path):
    s = course.synthetic_images(tmp_path / "d", n=8, classes=2, size=16)
    victim = s.paths()[3]
    victim.write_bytes(victim.read_bytes()[:-20])                              # truncated
    with pytest.raises(course.CorruptDataError, match=r"truncated.*rebuild=True"):
        course.synthetic_images(s.root, n=8, classes=2, size=16)
    course.synthetic_images(s.root, n=8, classes=2, size=16, rebuild=True)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF                                             # same size, one byte changed
    victim.write_bytes(bytes(data))
    with pytest.raises(course.CorruptDataError, match="corrupt"):
        course.synthetic_images(s.root, n=8, classes=2, size=16)
    victim.unlink()
    with pytest.raises(course.CorruptDataError, match="missing"):
        course.synthetic_images(s.root, n=8, classes=2, size=16)
    (s.root / "manifest.json").write_text("{half a manifest")
    with pytest.raises(course.CorruptDataError, match="unreadable"):
        course.synthetic_images(s.root, n=8, classes=2, size=16)


def test_a_folder_that_is_not_a_gpulab_set_is_never_overwritten(tmp_path):
    mine = tmp_path / "photos"
    mine.mkdir()
    (mine / "holiday.jpg").write_bytes(b"precious")
    with pytest.raises(ValueError, match="not a gpulab image set"):
        course.synthetic_images(mine, n=4, classes=2, size=16)
    assert (mine / "holiday.jpg").read_bytes() == b"precious"


@pytest.mark.parametrize("kwargs, error", [
    ({"n": 0}, ValueError), ({"n": 2.5}, TypeError), ({"classes": 1}, ValueError), ({"classes": 11}, ValueError),
    ({"size": 4}, ValueError), ({"channels": 2}, ValueError), ({"quality": 101}, ValueError),
    ({"seed": -1}, ValueError), ({"rebuild": 1}, TypeError)])
def test_synthetic_images_bad_input(tmp_path, kwargs, error):
    with pytest.raises(error):
        course.synthetic_images(tmp_path / "x", **{"n": 4, "classes": 2, "size": 16, **kwargs})


# ---- real data: offline fallback, deadline, no half-written cache -----------------------------
def _no_download_left(data_dir: Path) -> bool:
    cache = data_dir / "cache"
    return not cache.exists() or not [p for p in cache.rglob("*") if p.is_file()]


def test_offline_falls_back_to_synthetic_with_one_line(monkeypatch, private_data_dir, caplog):
    def refuse(url, timeout):
        raise urllib.error.URLError("no network in this test")

    monkeypatch.setattr(data_mod, "_urlopen", refuse)
    with caplog.at_level("WARNING", logger="gpulab"):
        s = course.real_images("cifar10", n=20, timeout_s=5)
    assert s.source == "synthetic" and (s.size, s.channels, s.n) == (32, 3, 20)
    assert "cifar10 unavailable" in s.note and "no network" in s.note
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
    assert _no_download_left(private_data_dir)
    with pytest.raises(OSError):
        course.real_images("mnist", n=4, timeout_s=5, fallback=False)


def test_a_stalled_download_never_hangs(monkeypatch, private_data_dir):
    release = threading.Event()

    class Stalled:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, n):
            release.wait(30)          # a connection that never delivers
            return b"x" * 100

    monkeypatch.setattr(data_mod, "_urlopen", lambda url, timeout: Stalled())
    t0 = time.monotonic()
    s = course.real_images("cifar10", n=10, timeout_s=0.5)
    assert time.monotonic() - t0 < 10
    assert s.source == "synthetic" and "TimeoutError" in s.note
    release.set()                     # the abandoned thread wakes, sees it was cancelled and cleans up
    deadline = time.monotonic() + 10
    while not _no_download_left(private_data_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _no_download_left(private_data_dir)


def test_a_bad_download_is_not_cached(monkeypatch, private_data_dir):
    monkeypatch.setattr(data_mod, "_urlopen", lambda url, timeout: io.BytesIO(b"not the archive"))
    s = course.real_images("cifar10", n=10, timeout_s=5)
    assert "checksum mismatch" in s.note and _no_download_left(private_data_dir)


def _fake_cifar_archive() -> tuple[bytes, np.ndarray, list[int]]:
    rng = np.random.default_rng(0)
    ramp = np.linspace(0, 120, 32)[None, None, None, :]                      # smooth images survive JPEG
    pixels = (ramp + rng.integers(0, 130, (50, 3, 1, 1))).repeat(32, axis=2).astype(np.uint8)
    labels = [i % 10 for i in range(50)]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        def add(name, obj):
            raw = pickle.dumps(obj)
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(raw)
            tar.addfile(info, io.BytesIO(raw))
        for i in range(1, 6):
            part = slice((i - 1) * 10, i * 10)
            add(f"data_batch_{i}", {"data": pixels[part].reshape(10, -1), "labels": labels[part]})
        add("test_batch", {"data": pixels[:10].reshape(10, -1), "labels": labels[:10]})
        add("batches.meta", {"label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog",
                                             "horse", "ship", "truck"]})
    return buf.getvalue(), pixels, labels


def test_a_working_download_is_cached_once_and_exported(monkeypatch, private_data_dir):
    import hashlib

    from torchvision.datasets import CIFAR10

    archive, pixels, labels = _fake_cifar_archive()
    calls = []

    def serve(url, timeout):
        calls.append(url)
        return io.BytesIO(archive)

    monkeypatch.setattr(data_mod, "_urlopen", serve)
    monkeypatch.setattr(CIFAR10, "tgz_md5", hashlib.md5(archive).hexdigest())
    monkeypatch.setattr("torchvision.datasets.cifar.check_integrity", lambda *a, **k: True)   # fake files: other md5s
    s = course.real_images("cifar10", n=20, timeout_s=10)
    assert s.source == "cifar10" and s.note == "" and s.n == 20 and s.counts() == [2] * 10
    assert s.classes[0] == "00_airplane" and (private_data_dir / "cache" / "cifar-10-batches-py").is_dir()
    from PIL import Image

    first = np.asarray(Image.open(s.paths()[0]), dtype=np.float64)
    assert first.shape == (32, 32, 3)
    candidates = [pixels[j].transpose(1, 2, 0) for j in range(50) if labels[j] == 0]
    assert min(np.abs(first - c).mean() for c in candidates) < 8      # the JPEG of one airplane image
    again = course.real_images("cifar10", n=20, timeout_s=10)
    assert len(calls) == 1 and not again.generated                     # downloaded once, reused


def test_real_images_bad_input():
    with pytest.raises(ValueError, match="cifar10"):
        course.real_images("imagenet")
    with pytest.raises(ValueError):
        course.real_images("mnist", timeout_s=0)
    with pytest.raises(TypeError):
        course.real_images("mnist", fallback="yes")


# ---- loaders ------------------------------------------------------------------------------------
def test_torch_loader_batches_and_options(shapes):
    x, y = next(iter(course.torch_loader(shapes, 16, crop=24)))
    assert tuple(x.shape) == (16, 3, 24, 24) and str(x.dtype) == "torch.float32" and str(y.dtype) == "torch.int64"
    assert -3 < float(x.min()) < 0 < float(x.max()) < 3                       # normalised
    loader = course.torch_loader(shapes, 16, num_workers=1, persistent_workers=True, prefetch_factor=2, pin_memory=True)
    assert loader.persistent_workers and loader.prefetch_factor == 2
    import torch

    assert loader.pin_memory == torch.cuda.is_available()                     # nothing to pin for without CUDA
    assert sum(len(b[1]) for b in loader) == 64
    with pytest.raises(ValueError, match="num_workers"):
        course.torch_loader(shapes, 16, prefetch_factor=2)
    with pytest.raises(TypeError, match="ImageSet"):
        course.torch_loader(str(shapes.root))
    with pytest.raises(ValueError):
        course.torch_loader(shapes, 0)


def test_cached_loader_decodes_once_and_augments_per_image(shapes):
    import torch

    plain = course.cached_loader(shapes, 64, augment=False, shuffle=False, device="cpu")
    reference = next(iter(course.torch_loader(shapes, 64, augment=False, shuffle=False)))
    assert gl.data.check_batches(next(iter(plain)), reference).mean_abs_diff < 1e-6
    aug = course.cached_loader(shapes, 16, crop=20, device="cpu", seed=3)
    batches = list(aug)
    assert len(batches) == len(aug) == 4 and tuple(batches[0][0].shape) == (16, 3, 20, 20)
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == sorted(shapes.labels)
    twin = course.cached_loader(shapes, 16, crop=20, device="cpu", seed=3)
    assert torch.equal(next(iter(twin))[0], batches[0][0])                      # seeded
    x = batches[0][0]
    assert not torch.allclose(x[0], x[1]) and "decoded once" in repr(aug) and aug.prepare_s > 0


def test_dali_cpu_pipeline_runs_and_matches_torchvision(shapes):
    """DALI really executes here (CPU-only pipeline, device_id=None) and delivers what torchvision does."""
    pytest.importorskip("nvidia.dali")
    for crop in (32, 24):
        kw = dict(batch_size=64, crop=crop, augment=False, shuffle=False)
        a = next(iter(course.torch_loader(shapes, **kw)))
        b = next(iter(course.dali_loader(shapes, device="cpu", **kw)))
        check = gl.data.check_batches(a, b, ("torchvision", "DALI"))
        assert check.ok, check
        assert check.labels_equal and check.shapes[0] == (64, 3, crop, crop) and check.label_dtypes == ("int64",) * 2
        if crop == 32:   # same libjpeg decode, no resize: the same numbers
            assert check.max_abs_diff < 1e-5
    loader = course.dali_loader(shapes, 16, crop=20, device="cpu", num_threads=1)
    assert loader.plan == course.DaliPlan(None, "cpu", "cpu") and len(loader) == 4
    for epoch in range(2):                                                      # whole epochs, twice
        labels = [int(v) for _, y in loader for v in y]
        assert sorted(labels) == sorted(shapes.labels)
    assert "CPU only" in repr(loader)


def test_dali_plan():
    assert course.dali_plan("cpu") == course.DaliPlan(None, "cpu", "cpu") and not course.dali_plan("cpu").on_gpu
    assert course.dali_plan("cuda") == course.DaliPlan(0, "mixed", "gpu")
    assert course.dali_plan("cuda:1").device_id == 1 and "nvJPEG" in str(course.dali_plan("cuda"))
    import torch

    assert course.dali_plan(torch.device("cuda", 2)).device_id == 2
    assert course.dali_plan("mps").decoder == "cpu"
    with pytest.raises(ValueError, match="cuda"):
        course.dali_plan("tpu")


def test_dali_gpu_graph_against_a_recording_fake(shapes):
    fn, dali_types, log = fake_dali.recording_fn()
    out, labels = pipe_mod._dali_graph(fn, dali_types, course.dali_plan("cuda:0"), shapes, 24, True, True, 5)
    calls = dict((name, kw) for name, kw in log if isinstance(kw, dict))
    assert calls["decoders.image"]["device"] == "mixed"                       # nvJPEG decode
    assert calls["random_resized_crop"]["device"] == "gpu" and calls["random_resized_crop"]["size"] == [24, 24]
    cmn = calls["crop_mirror_normalize"]
    assert cmn["device"] == "gpu" and cmn["output_layout"] == "CHW" and cmn["dtype"] == "FLOAT"
    assert calls["readers.file"]["file_root"] == str(shapes.root) and calls["readers.file"]["name"] == "Reader"
    assert ("gpu", "labels") in log and labels.name == "labels.gpu()"         # labels follow to the GPU
    fn, dali_types, log = fake_dali.recording_fn()
    pipe_mod._dali_graph(fn, dali_types, course.dali_plan("cpu"), shapes, 16, False, False, 0)
    calls = dict((name, kw) for name, kw in log if isinstance(kw, dict))
    assert calls["decoders.image"]["device"] == "cpu" and calls["resize"]["device"] == "cpu"
    assert "random_resized_crop" not in calls and calls["crop_mirror_normalize"]["mirror"] == 0
    assert not [e for e in log if e[0] == "gpu"]


def test_dali_tf_dataset_is_optional_and_placed_on_its_device(shapes, monkeypatch):
    if not course.dali_tf_available():
        with pytest.raises(ImportError, match="nvidia-dali-tf-plugin"):
            course.dali_tf_dataset(shapes, 8)
    placed, made = [], {}

    class FakeTF:
        float32, int32 = "float32", "int32"

        @staticmethod
        @contextlib.contextmanager
        def device(name):
            placed.append(name)
            yield

    fake_plugin = types.SimpleNamespace(DALIDataset=lambda **kw: made.update(kw) or "dataset")
    for plan, where in ((course.dali_plan("cpu"), "/cpu:0"), (course.dali_plan("cuda:1"), "/gpu:1")):
        assert pipe_mod._dali_dataset(fake_plugin, FakeTF, "pipe", plan, 8, 3, 24) == "dataset"
        assert placed[-1] == where and made["device_id"] == plan.device_id
        assert made["output_shapes"] == ((8, 3, 24, 24), (8, 1)) and made["pipeline"] == "pipe"


def test_tf_dataset_options_deliver_the_same_data(shapes):
    if importlib.util.find_spec("tensorflow") is None:   # found, not imported (TF before Triton crashes)
        pytest.skip("tensorflow not installed")
    reference = next(iter(course.torch_loader(shapes, 64, augment=False, shuffle=False)))
    plain = next(iter(course.tf_dataset(shapes, 64, augment=False, shuffle=False, layout="NCHW")))
    assert gl.data.check_batches(reference, plain).max_abs_diff < 1e-5            # same decode (accurate IDCT)
    for kw in ({"parallel": False, "prefetch": False}, {"cache": True}, {"interleave": True}, {}):
        ds = course.tf_dataset(shapes, 16, crop=20, **kw)
        for _ in range(2):                                                    # two epochs (cache refills once)
            xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
            assert xs[0].shape == (16, 20, 20, 3) and ys[0].dtype == np.int64
            assert sorted(np.concatenate(ys).tolist()) == sorted(shapes.labels), kw
    with pytest.raises(ValueError, match="layout"):
        course.tf_dataset(shapes, 8, layout="CHW")


# ---- measuring loaders ---------------------------------------------------------------------------
class _SlowLoader:
    def __init__(self, batches=6, delay=0.02):
        self.batches, self.delay = batches, delay

    def __iter__(self):
        for i in range(self.batches):
            time.sleep(self.delay)
            yield np.zeros((8, 3)), np.zeros(8, dtype=np.int64)


class _PhaseRecorder:
    def __init__(self):
        self.names = []

    @contextlib.contextmanager
    def phase(self, name):
        self.names.append(name)
        yield


def test_measure_loader_splits_data_wait_from_compute():
    slow_data = gl.measure_loader(_SlowLoader(delay=0.03), lambda b: time.sleep(0.003), label="slow data")
    slow_step = gl.measure_loader(_SlowLoader(delay=0.003), lambda b: time.sleep(0.03), label="slow step")
    assert slow_data.batches == 5 and slow_data.items == 40 and slow_data.first_batch_s >= 0.03
    assert slow_data.data_wait_share > 0.6 > slow_step.data_wait_share
    assert slow_step.data_wait_share < 0.4 and slow_step.compute_s > slow_data.compute_s
    assert slow_data.wall_s >= slow_data.data_wait_s + slow_data.compute_s * 0.99
    assert 0 <= slow_data.cpu_util_pct <= 100 and slow_data.cores >= 1
    rec = _PhaseRecorder()
    run = gl.measure_loader(_SlowLoader(batches=4, delay=0.001), lambda b: None, monitor=rec, epochs=2)
    assert run.batches == 7 and run.epochs == 2 and rec.names.count("compute") == 7
    assert rec.names.count("data") == 7 + 3       # + starting epoch 2, + the two calls that ended the epochs
    assert len(run.starts_s) == 7 and run.starts_s == tuple(sorted(run.starts_s))
    assert "data wait" in repr(run) and "<table" in run._repr_html_()
    assert set(run.to_dict()) >= {"items_per_s", "data_wait_share", "cpu_util_pct"}


def test_measure_loader_counts_worker_processes_cpu(shapes):
    one = gl.measure_loader(course.torch_loader(shapes, 8, num_workers=1), None, label="1 worker", epochs=3)
    assert one.cpu_s > 0 and one.data_wait_share > 0.9                        # no step: all waiting


def test_measure_loader_with_a_monitor_gives_an_input_bound_verdict():
    with gl.Monitor(interval=0.02) as mon:
        run = gl.measure_loader(_SlowLoader(batches=8, delay=0.03), lambda b: time.sleep(0.002), monitor=mon)
    verdict = mon.trace.diagnose()
    assert verdict.verdict == "input-bound" and "data-wait" in verdict.codes
    fig = run.plot(mon.trace)
    assert len(fig.axes) == 2
    import matplotlib.pyplot as plt

    plt.close("all")


def test_measure_loaders_interleaves_rounds_and_merges_them():
    order = []

    class Named(_SlowLoader):
        def __init__(self, name):
            super().__init__(batches=3, delay=0.001)
            self.name = name

        def __iter__(self):
            order.append(self.name)
            return super().__iter__()

    runs = gl.data.measure_loaders({"a": Named("a"), "b": Named("b")}, lambda b: None, rounds=3)
    assert order == ["a", "b", "b", "a", "a", "b"]                         # the order rotates every round
    assert [r.label for r in runs] == ["a", "b"]
    assert runs[0].epochs == 3 and runs[0].batches == 2 + 3 + 3            # warm-up batch left out in round 1 only
    assert runs[0].items == 8 * 8 and len(runs[0].starts_s) == 8
    assert runs[0].wall_s >= runs[0].data_wait_s
    with pytest.raises(TypeError, match="mapping"):
        gl.data.measure_loaders([Named("a")])
    with pytest.raises(ValueError):
        gl.data.measure_loaders({"a": Named("a")}, rounds=0)


def test_measure_loader_bad_input():
    with pytest.raises(TypeError, match="batches must be"):
        gl.measure_loader(range(3), warmup_batches=0)
    with pytest.raises(ValueError, match="no batch left"):
        gl.measure_loader(_SlowLoader(batches=1, delay=0), warmup_batches=1)
    with pytest.raises(ValueError):
        gl.measure_loader(_SlowLoader(), epochs=0)
    with pytest.raises(TypeError, match="callable"):
        gl.measure_loader(_SlowLoader(), step="train")


def test_compare_loaders_table():
    fast = gl.measure_loader(_SlowLoader(delay=0.002), label="fast")
    slow = gl.measure_loader(_SlowLoader(delay=0.02), label="slow")
    table = gl.compare_loaders([slow, fast], limit_items_per_s=fast.items_per_s * 2,
                               published={"fast": "dali-streampetr-8gpu"})
    assert table.baseline == "slow" and table.speedup("fast") > 2 and table.fastest == "fast"
    assert table.fraction_of_limit("fast") == pytest.approx(0.5)
    text = repr(table)
    assert "images/s" in text and "A100" in text and "compute-only limit" in text
    df = table.to_dataframe()
    assert list(df.index) == ["slow", "fast"] and "fraction_of_limit" in df
    two_steps = gl.compare_loaders([slow, fast], limit_items_per_s={"slow": 1000.0, "fast": 2000.0})
    assert "1,000 images/s (slow), 2,000 images/s (fast)" in repr(two_steps)   # which row has which limit
    assert table.plot() is not None
    import matplotlib.pyplot as plt

    plt.close("all")
    with pytest.raises(ValueError, match="baseline"):
        gl.compare_loaders([fast], baseline="nope")
    with pytest.raises(ValueError, match="unique"):
        gl.compare_loaders([fast, fast])
    with pytest.raises(TypeError, match="LoaderRun"):
        gl.compare_loaders([fast, "slow"])
    with pytest.raises(ValueError, match="unknown label"):
        gl.compare_loaders([fast], published={"x": "dali-streampetr-2gpu"})
    mixed = gl.compare_loaders([slow, fast], limit_items_per_s={"fast": fast.items_per_s})   # one limit per step
    assert mixed.fraction_of_limit("fast") == pytest.approx(1.0) and mixed.fraction_of_limit("slow") is None
    assert "N/A" in repr(mixed)
    beaten = gl.compare_loaders([slow, fast], limit_items_per_s=fast.items_per_s / 2)   # a loader beat the limit
    assert beaten.fraction_of_limit("fast") == pytest.approx(1.0) and beaten.limit("slow") == fast.items_per_s
    assert "compute-only limit raised" in repr(beaten) and "'fast' ran faster than the same step" in repr(beaten)
    with pytest.raises(ValueError, match="unknown label"):
        gl.compare_loaders([fast], limit_items_per_s={"nope": 1.0})
    with pytest.raises(ValueError):
        gl.compare_loaders([fast], limit_items_per_s=-1.0)


def test_check_batches_finds_every_kind_of_difference():
    x = np.random.default_rng(0).normal(size=(4, 3, 8, 8)).astype(np.float32)
    y = np.array([0, 1, 2, 3])
    assert gl.data.check_batches((x, y), (x.copy(), y.copy())).ok
    assert not gl.data.check_batches((x, y), (x, y[::-1])).ok                                  # label mapping
    assert not gl.data.check_batches((x, y), (x.astype(np.float64), y)).ok                      # dtype
    assert not gl.data.check_batches((x, y), (x[:, :, :4], y)).ok                               # shape
    assert not gl.data.check_batches((x, y), (x * 255, y)).ok                                   # value range
    assert not gl.data.check_batches((x, y), (x, y.astype(np.int32))).ok                        # label dtype
    assert "NOT equivalent" in repr(gl.data.check_batches((x, y), (x, y[::-1]), ("torchvision", "DALI")))
