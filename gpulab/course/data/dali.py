"""The lesson's pipeline in NVIDIA DALI: where each stage runs on this machine (dali_plan), as a PyTorch iterator or a tf.data.Dataset."""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any, Iterator, Literal

from ..._check import checked, flag, whole
from .images import ImageSet
from .pipelines import AREA, ASPECT, _check_set, _crop, _norm

__all__ = ['DaliPlan', 'dali_plan', 'DaliLoader', 'dali_available', 'dali_tf_available', 'dali_loader', 'dali_tf_dataset',
           'dali_tolerance', 'check_dali', 'CPU_ATOL', 'GPU_ATOL', 'HW_DECODER_LOAD', 'has_hardware_jpeg_decoder']

# Mean |difference| allowed between one unaugmented DALI batch and torchvision's, in normalised units (one grey
# level of 255 is about 0.017 after dividing by the std). The CPU pipeline decodes with libjpeg-turbo like PIL:
# only the resize filters differ. The GPU pipeline decodes with nvJPEG (another IDCT and chroma upsampling, so
# pixels differ by a level or two) and resizes on the GPU: it gets a looser tolerance of its own.
CPU_ATOL = 0.02
GPU_ATOL = 0.06

# fn.decoders.image(device="mixed", hw_decoder_load=...): the share of the JPEG images sent to the GPU's hardware
# JPEG decoder (NVJPG) where the GPU has one; the rest are decoded by nvJPEG's CUDA path. The default of DALI 2.4, the
# release the course pins; DALI's documentation says the best share depends on the pipeline's threads and is found by
# measuring.
HW_DECODER_LOAD = 0.65
# the GPUs with a hardware JPEG decoder: the GA100 chip (A100, A30, A800) and the GH100 chip (H100, H800, H200, GH200)
_HW_JPEG = re.compile(r"\b(A100|A30|A800|H100|H800|H200|GH200)\b", re.IGNORECASE)


def has_hardware_jpeg_decoder(gpu_name: str | None) -> bool:
    """Whether the GPU named ``gpu_name`` (``torch.cuda.get_device_name()``) has a hardware JPEG decoder that
    DALI's ``"mixed"`` decoder can use: the A100, A30, H100 and H200 have one (NVIDIA's nvJPEG documentation lists
    its hardware backend for these chips); a T4 has none, and a name not on this list or ``None`` (no GPU) counts
    as none.

    Example:
        >>> has_hardware_jpeg_decoder("NVIDIA A100-SXM4-40GB"), has_hardware_jpeg_decoder("Tesla T4")
        (True, False)
    """
    if gpu_name is not None and not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a GPU's name (torch.cuda.get_device_name()) or None, got {gpu_name!r}")
    return bool(gpu_name and _HW_JPEG.search(gpu_name))


# ----------------------------------------------------------------------------------------------
# NVIDIA DALI
@dataclass(frozen=True)
class DaliPlan:
    """Where each stage of a DALI pipeline runs: ``decoder`` ("cpu" = libjpeg-turbo on CPU threads, or
    "mixed" = nvJPEG: Huffman decoding on the CPU, the rest on the GPU, using the A100/H100 hardware JPEG
    decoder when present), ``ops`` for augmentation ("cpu" or "gpu"), the pipeline's ``device_id``
    (``None``: a CPU-only pipeline that needs no GPU at all), and ``hw_decoder_load``: the share of the images
    the "mixed" decoder sends to the GPU's hardware JPEG decoder, set only where the GPU has one (``None``
    elsewhere: every image is decoded by nvJPEG's CUDA path, or on the CPU)."""

    device_id: int | None
    decoder: Literal["cpu", "mixed"]
    ops: Literal["cpu", "gpu"]
    hw_decoder_load: float | None = None

    @property
    def on_gpu(self) -> bool:
        return self.device_id is not None

    def __str__(self) -> str:
        if self.on_gpu and self.hw_decoder_load is not None:
            return (f"DALI on GPU {self.device_id}: decoder 'mixed' ({self.hw_decoder_load:.0%} of the JPEGs to the "
                    "hardware JPEG decoder, the rest to nvJPEG's CUDA path), augmentation on the GPU")
        if self.on_gpu:
            return f"DALI on GPU {self.device_id}: decoder 'mixed' (nvJPEG), augmentation on the GPU"
        return "DALI on the CPU only (device_id=None): decoder 'cpu' (libjpeg-turbo), augmentation on CPU threads"


def _gpu_name(index: int) -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(index) if torch.cuda.is_available() else None
    except (ImportError, RuntimeError, AssertionError):
        return None


@checked(device="devspec")
def dali_plan(device: Any = None, *, gpu_name: str | None = None) -> DaliPlan:
    """The :class:`DaliPlan` for ``device`` ("cuda", "cuda:1", "cpu"; default: the course device). On a GPU
    with a hardware JPEG decoder (:func:`has_hardware_jpeg_decoder`; ``gpu_name`` defaults to the device's own
    name) the plan sends :data:`HW_DECODER_LOAD` of the images to it.

    Example:
        >>> dali_plan("cpu").decoder, dali_plan("cuda:1").device_id
        ('cpu', 1)
        >>> [dali_plan("cuda", gpu_name=name).hw_decoder_load for name in ("NVIDIA H100 80GB HBM3", "Tesla T4")]
        [0.65, None]
    """
    if gpu_name is not None and not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a GPU's name (torch.cuda.get_device_name()) or None, got {gpu_name!r}")
    if device is None:
        from ...system import device_kind

        device = device_kind()
    kind, _, index = str(device).partition(":")
    if kind == "cuda":
        explicit = None if isinstance(device, str) else getattr(device, "index", None)   # torch.device("cuda", 1)
        device_id = int(explicit if explicit is not None else (index or 0))
        name = gpu_name if gpu_name is not None else _gpu_name(device_id)
        return DaliPlan(device_id, "mixed", "gpu", HW_DECODER_LOAD if has_hardware_jpeg_decoder(name) else None)
    if kind not in ("cpu", "mps"):
        raise ValueError(f"device must be 'cpu' or 'cuda[:index]', got {device!r}")
    return DaliPlan(None, "cpu", "cpu")


def _dali_graph(fn: Any, types: Any, plan: DaliPlan, images: ImageSet, crop: int, augment: bool, shuffle: bool,
                seed: int) -> tuple[Any, Any]:
    """The pipeline's operators, written against the ``fn`` and ``types`` modules passed in (tests pass
    recording fakes with the same shape to check the GPU graph on a machine without a GPU)."""
    # the listed files (relative to file_root) with their labels: no folder scan, so stray files are never read
    jpegs, labels = fn.readers.file(file_root=str(images.root), files=list(images.files), labels=list(images.labels),
                                    random_shuffle=shuffle, seed=seed, name="Reader")
    # hw_decoder_load only where the GPU has a hardware JPEG decoder (the argument does nothing elsewhere)
    hardware = ({"hw_decoder_load": plan.hw_decoder_load}
                if plan.decoder == "mixed" and plan.hw_decoder_load is not None else {})
    decoded = fn.decoders.image(jpegs, device=plan.decoder,
                                output_type=types.RGB if images.channels == 3 else types.GRAY, **hardware)
    mean, std = _norm(images.channels)
    mirror: Any = 0
    if augment:
        decoded = fn.random_resized_crop(decoded, device=plan.ops, size=[crop, crop], random_area=list(AREA),
                                         random_aspect_ratio=list(ASPECT))
        mirror = fn.random.coin_flip(probability=0.5)
    elif crop != images.size:
        decoded = fn.resize(decoded, device=plan.ops, resize_x=crop, resize_y=crop, antialias=True)
    out = fn.crop_mirror_normalize(decoded, device=plan.ops, dtype=types.FLOAT, output_layout="CHW",
                                   mean=[m * 255 for m in mean], std=[s * 255 for s in std], mirror=mirror)
    if plan.on_gpu:
        labels = labels.gpu()
    return out, labels


def _dali_pipeline(images: ImageSet, batch_size: int, crop: int, augment: bool, plan: DaliPlan, num_threads: int,
                   shuffle: bool, seed: int, prefetch_queue_depth: int, build: bool = True) -> Any:
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def
    def pipeline() -> Any:
        return _dali_graph(fn, types, plan, images, crop, augment, shuffle, seed)

    pipe = pipeline(batch_size=batch_size, num_threads=num_threads, device_id=plan.device_id, seed=seed,
                    prefetch_queue_depth=prefetch_queue_depth)
    if build:   # DALIDataset builds the pipeline itself
        pipe.build()
    return pipe


def _threads(num_threads: Any) -> int:
    if num_threads is None:
        import os

        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    return whole("num_threads", num_threads)


class DaliLoader:
    """A DALI pipeline with PyTorch's iterator (``DALIGenericIterator``): iterating gives one epoch of
    ``(images, labels)`` torch tensors - on the GPU for a GPU plan, on the CPU otherwise. Iterate whole
    epochs: DALI's iterator cannot restart an unfinished epoch."""

    def __init__(self, images: ImageSet, batch_size: int, crop: int, augment: bool, plan: DaliPlan, num_threads: int,
                 shuffle: bool, seed: int, prefetch_queue_depth: int) -> None:
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        self.plan, self.batch_size, self.num_threads, self.n = plan, batch_size, num_threads, images.n
        self.pipeline = _dali_pipeline(images, batch_size, crop, augment, plan, num_threads, shuffle, seed,
                                       prefetch_queue_depth)
        self._iterator = DALIGenericIterator(self.pipeline, ["images", "labels"], reader_name="Reader",
                                             last_batch_policy=LastBatchPolicy.PARTIAL, auto_reset=True)

    def __len__(self) -> int:
        return math.ceil(self.n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        for out in self._iterator:
            batch = out[0]
            yield batch["images"], batch["labels"].reshape(-1).long()

    def __repr__(self) -> str:
        return f"DaliLoader({self.n} images, batch {self.batch_size}, {self.num_threads} threads; {self.plan})"


def dali_available() -> bool:
    """True when NVIDIA DALI (``nvidia.dali``) can be imported."""
    import importlib.util

    return importlib.util.find_spec("nvidia") is not None and importlib.util.find_spec("nvidia.dali") is not None


def dali_tf_available() -> bool:
    """True when DALI's TensorFlow plugin (package ``nvidia-dali-tf-plugin-*``, module
    ``nvidia.dali_tf_plugin``) is installed. Checked without importing TensorFlow."""
    import importlib.util

    return dali_available() and importlib.util.find_spec("nvidia.dali_tf_plugin") is not None


@checked(device="devspec")
def dali_loader(images: ImageSet, batch_size: int = 64, *, crop: int | None = None, augment: bool = True,
                device: Any = None, num_threads: int | None = None, shuffle: bool = True, seed: int = 0,
                prefetch_queue_depth: int = 2, hw_decoder_load: float | None = None) -> DaliLoader:
    """A DALI pipeline over ``images.root`` feeding PyTorch (see :class:`DaliLoader` and :func:`dali_plan`).

    ``num_threads`` CPU threads decode and augment (default: all cores of this process);
    ``prefetch_queue_depth`` batches are prepared ahead. ``hw_decoder_load`` (0 to 1) replaces the plan's share of
    images for the hardware JPEG decoder; it needs a GPU that has one (``dali_plan(device).hw_decoder_load`` is
    not None). ``fn.readers.file`` reads exactly the files the set
    lists, with their labels (``files=``, ``labels=``), in the order :func:`~gpulab.course.torch_loader` uses;
    a listed file that is missing or changed raises :class:`~gpulab.course.CorruptDataError` here, not a
    "Critical error in pipeline" later.

    Example:
        >>> import tempfile, gpulab as gl
        >>> from gpulab import course
        >>> s = course.synthetic_images(tempfile.mkdtemp() + "/s", n=8, classes=2, size=16)
        >>> x, y = next(iter(course.dali_loader(s, batch_size=8, device="cpu")))
        >>> tuple(x.shape), str(y.dtype)
        ((8, 3, 16, 16), 'torch.int64')
    """
    _check_set(images)
    whole("batch_size", batch_size)
    crop = _crop(images, crop)
    for name, value in (("augment", augment), ("shuffle", shuffle)):
        flag(name, value)
    whole("prefetch_queue_depth", prefetch_queue_depth)
    plan = _with_load(dali_plan(device), hw_decoder_load)
    if not dali_available():
        raise ImportError("NVIDIA DALI is not installed: pip install nvidia-dali-cuda120 (Linux x86_64/aarch64)")
    images.verify()
    return DaliLoader(images, batch_size, crop, augment, plan, _threads(num_threads), shuffle, seed,
                      prefetch_queue_depth)


def _with_load(plan: DaliPlan, hw_decoder_load: Any) -> DaliPlan:
    """``plan`` with its hardware decoder share replaced by ``hw_decoder_load`` (None: kept)."""
    if hw_decoder_load is None:
        return plan
    if isinstance(hw_decoder_load, bool) or not isinstance(hw_decoder_load, (int, float)) \
            or not 0 <= hw_decoder_load <= 1:
        raise ValueError(f"hw_decoder_load must be a share from 0 to 1 of the images for the hardware JPEG decoder, "
                         f"got {hw_decoder_load!r}")
    if plan.hw_decoder_load is None:
        raise ValueError(f"hw_decoder_load={hw_decoder_load!r} needs a GPU with a hardware JPEG decoder (A100, A30, "
                         f"H100, H200); this plan has none ({plan}): leave hw_decoder_load=None")
    return dataclasses.replace(plan, hw_decoder_load=float(hw_decoder_load))


@checked(device="devspec")
def dali_tf_dataset(images: ImageSet, batch_size: int = 64, *, crop: int | None = None, augment: bool = True,
                    device: Any = None, num_threads: int | None = None, shuffle: bool = True, seed: int = 0) -> Any:
    """The DALI pipeline of :func:`dali_loader` as a ``tf.data.Dataset`` (``DALIDataset``) of NCHW float32
    images and int32 labels, usable by ``keras.Model.fit``. Needs DALI's TensorFlow plugin, which gpulab's
    pinned stack does not include: ``pip install nvidia-dali-tf-plugin-cuda120 --no-build-isolation`` after
    TensorFlow.

    Example:
        >>> import gpulab as gl
        >>> from gpulab import course
        >>> course.dali_tf_available() in (True, False)
        True
    """
    _check_set(images)
    whole("batch_size", batch_size)
    crop = _crop(images, crop)
    if not dali_tf_available():
        raise ImportError("DALI's TensorFlow plugin is not installed: pip install nvidia-dali-tf-plugin-cuda120 "
                          "--no-build-isolation (after tensorflow; it builds against the installed TensorFlow)")
    from ..._tf import import_tensorflow

    tf = import_tensorflow()
    import nvidia.dali.plugin.tf as dali_tf

    images.verify()
    plan = dali_plan(device)
    pipe = _dali_pipeline(images, batch_size, crop, augment, plan, _threads(num_threads), shuffle, seed, 2, build=False)
    return _dali_dataset(dali_tf, tf, pipe, plan, batch_size, images.channels, crop)


def _dali_dataset(dali_tf: Any, tf: Any, pipe: Any, plan: DaliPlan, batch_size: int, channels: int, crop: int) -> Any:
    """``DALIDataset`` placed on the pipeline's device (split out so tests can pass a fake plugin)."""
    where = f"/gpu:{plan.device_id}" if plan.on_gpu else "/cpu:0"
    with tf.device(where):
        return dali_tf.DALIDataset(pipeline=pipe, batch_size=batch_size,
                                   output_shapes=((batch_size, channels, crop, crop), (batch_size, 1)),
                                   output_dtypes=(tf.float32, tf.int32), device_id=plan.device_id)


def dali_tolerance(plan: DaliPlan) -> float:
    """The mean-|difference| tolerance (normalised units) for checking ``plan``'s pipeline against torchvision:
    :data:`CPU_ATOL` for a CPU-only pipeline, :data:`GPU_ATOL` for nvJPEG + GPU resize.

    Example:
        >>> from gpulab import course
        >>> course.dali_tolerance(course.dali_plan("cpu")) < course.dali_tolerance(course.dali_plan("cuda"))
        True
    """
    if not isinstance(plan, DaliPlan):
        raise TypeError(f"plan must be a DaliPlan (course.dali_plan(device)), got {plan!r}")
    return GPU_ATOL if plan.on_gpu else CPU_ATOL


@checked(device="devspec")
def check_dali(reference: tuple[Any, Any], images: ImageSet, *, device: Any = None, batch_size: int | None = None,
               crop: int | None = None, names: tuple[str, str] | None = None) -> Any:
    """Check DALI's pipeline for ``device`` (``"cpu"``: libjpeg-turbo on CPU threads; ``"cuda"``: nvJPEG and
    GPU resize) against ``reference``, one ``(images, labels)`` batch of the same files from another loader
    (unaugmented, unshuffled): :func:`gpulab.data.check_batches` with the plan's own tolerance
    (:func:`dali_tolerance`). Returns the :class:`gpulab.data.BatchCheck`.

    Example:
        >>> import tempfile
        >>> from gpulab import course
        >>> s = course.synthetic_images(tempfile.mkdtemp() + "/s", n=8, classes=2, size=16)
        >>> tv = next(iter(course.torch_loader(s, 8, augment=False, shuffle=False)))
        >>> course.check_dali(tv, s, device="cpu").ok
        True
    """
    from ...data.compare import check_batches

    plan = dali_plan(device)
    n = int(len(reference[1])) if batch_size is None else whole("batch_size", batch_size)
    batch = next(iter(dali_loader(images, n, crop=crop, augment=False, shuffle=False, device=device)))
    where = f"DALI ({'GPU: nvJPEG' if plan.on_gpu else 'CPU'})"
    return check_batches(reference, batch, names or ("torchvision", where), atol=dali_tolerance(plan))
