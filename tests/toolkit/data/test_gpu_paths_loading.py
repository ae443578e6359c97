"""GPU-only paths of gpulab.loading and gpulab.pipelines, checked on a machine without a GPU.

- measure_loader waits for batches that live on a CUDA device (DALI "mixed"/"gpu" pipelines hand out
  tensors whose data is still being produced) before it stops the data clock; the fakes are checked
  against the real torch (Tensor attributes, torch.cuda.synchronize's signature).
- every DALI operator, keyword argument, device and constant the pipelines use exists in the installed
  DALI: the real DALI builds the GPU graph (argument names and device placement are validated when the
  graph is defined, which needs no GPU), and each call is checked against the operator's schema.
"""
from __future__ import annotations

import inspect
import time
import types

import pytest
import torch

import gpulab as gl
from gpulab import course
from gpulab.data import measure as loading
from gpulab.course.data import dali as pipe_mod


# ---- measure_loader and CUDA batches ---------------------------------------------------------------
class _CudaTensor:
    """What measure_loader reads of a CUDA tensor: is_cuda, device, shape."""

    def __init__(self, n, device=0):
        self.is_cuda, self.device, self.shape = True, torch.device("cuda", device), (n, 3, 8, 8)


def test_fake_tensor_and_fake_sync_are_shaped_like_torch():
    real = torch.zeros(2)
    assert all(hasattr(real, a) for a in vars(_CudaTensor(1)))
    assert real.is_cuda is False and isinstance(real.device, torch.device)
    assert "device" in inspect.signature(torch.cuda.synchronize).parameters


class _GpuLoader:
    """Batches on cuda:0 whose data is 'not ready' until the device is synchronised (as DALI's are)."""

    def __init__(self, log, batches=4, n=8):
        self.log, self.batches, self.n = log, batches, n

    def __iter__(self):
        for i in range(self.batches):
            self.log.append(("batch", i))
            yield _CudaTensor(self.n), _CudaTensor(self.n)


def test_data_clock_waits_for_cuda_batches(monkeypatch, pretend_gpus):
    log = []
    gpu_work_s = 0.02            # DALI's decoding/augmentation still running on the GPU when next() returns

    def synchronize(device=None):
        log.append(("sync", str(device)))
        time.sleep(gpu_work_s)

    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    run = gl.measure_loader(_GpuLoader(log), lambda b: log.append(("step", None)), label="dali gpu",
                            warmup_batches=0)
    # every batch: handed out, waited for on its device, then given to the step
    assert [e[0] for e in log] == ["batch", "sync", "step"] * 4
    assert {e[1] for e in log if e[0] == "sync"} == {"cuda:0"}
    assert run.data_wait_s >= 4 * gpu_work_s * 0.9           # DALI's GPU time is data time ...
    assert run.compute_s < 4 * gpu_work_s * 0.5              # ... not the step's


def test_each_cuda_device_of_a_batch_is_waited_for_once(monkeypatch, pretend_gpus):
    synced = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: synced.append(str(device)))
    # DALIGenericIterator's own output: one {name: tensor} dict per pipeline
    batch = [{"images": _CudaTensor(8, 0), "labels": _CudaTensor(8, 0)}, {"images": _CudaTensor(8, 1)}]
    loading._wait_for_batch(batch)
    assert synced == ["cuda:0", "cuda:1"]
    assert loading._count(batch) == 16


def test_cpu_batches_are_never_synchronised(monkeypatch):
    def boom(device=None):
        raise AssertionError("a CPU batch must not synchronise a device")

    monkeypatch.setattr(torch.cuda, "synchronize", boom)
    batches = [(torch.zeros(4, 3), torch.zeros(4)), [torch.zeros(4, 3)], {"x": torch.zeros(4, 3)}, ([0.0] * 4, [0] * 4)]
    run = gl.measure_loader(batches, lambda b: None, warmup_batches=0)
    assert run.items == 16


def test_dali_iterator_output_shape_is_what_count_reads():
    """The structure _count and _cuda_devices walk is DALIGenericIterator's declared output type."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    ret = inspect.signature(DALIGenericIterator.__next__).return_annotation
    assert "List[typing.Dict[str, torch.Tensor]]" in str(ret)
    assert loading._count([{"images": torch.zeros(5, 3, 2, 2), "labels": torch.zeros(5, 1)}]) == 5


# ---- DALI graphs against the installed DALI --------------------------------------------------------
def _recording_fn():
    """A stand-in for nvidia.dali.fn that records every call as (dotted name, kwargs)."""
    log: list = []

    class Node:
        def __init__(self, name):
            self.name = name

        def gpu(self):
            log.append(("gpu()", {}))
            return Node(self.name + ".gpu()")

    class Namespace:
        def __init__(self, prefix=""):
            self.prefix = prefix

        def __getattr__(self, attr):
            name = self.prefix + attr
            if attr in ("readers", "decoders", "random"):
                return Namespace(name + ".")

            def call(*args, **kwargs):
                log.append((name, kwargs))
                return (Node("jpegs"), Node("labels")) if name == "readers.file" else Node(name)
            return call

    return Namespace(), Node, log


def _real_fn(dotted):
    from nvidia.dali import fn

    obj = fn
    for part in dotted.split("."):
        obj = getattr(obj, part)          # AttributeError: no such operator in the installed DALI
    return obj


def _graph_calls(images, plan, augment, crop):
    from nvidia.dali import types as dali_types

    fake_fn, node, log = _recording_fn()
    pipe_mod._dali_graph(fake_fn, dali_types, plan, images, crop, augment, True, 0)
    return node, log


@pytest.fixture(scope="module")
def sets(tmp_path_factory):
    root = tmp_path_factory.mktemp("sets")
    return [course.synthetic_images(root / "rgb", n=8, classes=2, size=16),
            course.synthetic_images(root / "grey", n=8, classes=2, size=16, channels=1)]


PLANS = ("cuda:0", "cpu")


@pytest.mark.parametrize("device", PLANS)
@pytest.mark.parametrize("augment", (True, False))
def test_every_operator_argument_and_device_exists_in_installed_dali(sets, device, augment):
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import backend
    from nvidia.dali.data_node import DataNode

    plan = course.dali_plan(device)
    seen = set()
    for images in sets:
        for crop in (images.size, 12):
            node, log = _graph_calls(images, plan, augment, crop)
            for name, kwargs in log:
                if name == "gpu()":
                    assert callable(getattr(DataNode, "gpu", None))
                    continue
                real = _real_fn(name)
                schema = backend.GetSchema(real._schema_name)
                assert not schema.IsDeprecated(), name
                wrapper_args = set(inspect.signature(real).parameters)   # device, name + the schema's
                for arg, value in kwargs.items():
                    if arg in ("device", "name"):       # handled by DALI's Python wrapper, not the schema
                        assert arg in wrapper_args, (name, arg)
                        continue
                    assert schema.HasArgument(arg), f"fn.{name} has no argument {arg!r} in DALI"
                    assert not schema.IsDeprecatedArg(arg), (name, arg)
                    if isinstance(value, node):        # a per-sample argument input (e.g. mirror=coin_flip)
                        assert schema.IsTensorArgument(arg), (name, arg)
                dev = kwargs.get("device", "cpu")
                assert dev in schema.GetSupportedBackends(), f"fn.{name} cannot run on {dev!r}"
                seen.add((name, dev))
    if plan.on_gpu:
        assert ("decoders.image", "mixed") in seen and ("crop_mirror_normalize", "gpu") in seen


def test_mixed_decoder_uses_the_hardware_jpeg_decoder_by_default():
    """DaliPlan's docstring promises the A100/H100 hardware JPEG decoder: DALI routes a share
    ``hw_decoder_load`` of the images to it when present (default 0.65), and the graph does not turn it off."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import backend

    schema = backend.GetSchema("decoders__Image")
    assert "mixed" in schema.GetSupportedBackends()
    assert float(schema.GetArgumentDefaultValueString("hw_decoder_load")) > 0


@pytest.mark.parametrize("augment", (True, False))
def test_real_dali_defines_the_gpu_pipeline(sets, augment):
    """Defining the pipeline (not building it) runs DALI's own checks: unknown arguments raise KeyError and
    a GPU operator fed from the CPU raises, with no GPU needed."""
    pytest.importorskip("nvidia.dali")
    for images in sets:
        pipe = pipe_mod._dali_pipeline(images, 4, 12, augment, course.dali_plan("cuda:0"), 1, True, 0, 2, build=False)
        assert pipe.device_id == 0


def test_dali_catches_what_the_schema_check_guards_against(sets):
    """The checks above are not vacuous: DALI itself rejects a wrong argument and a wrong device here."""
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import fn, pipeline_def

    root = str(sets[0].root)

    @pipeline_def
    def bad_arg():
        jpegs, labels = fn.readers.file(file_root=root, name="Reader")
        return fn.decoders.image(jpegs, device="mixed", no_such_argument=1), labels

    with pytest.raises(KeyError, match="no_such_argument"):
        bad_arg(batch_size=2, num_threads=1, device_id=0)


def test_iterator_and_pipeline_keywords_exist():
    pytest.importorskip("nvidia.dali")
    import nvidia.dali as dali
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    src = inspect.getsource(pipe_mod.DaliLoader.__init__) + inspect.getsource(pipe_mod._dali_pipeline)
    iterator_kw = set(inspect.signature(DALIGenericIterator.__init__).parameters)
    assert {"reader_name", "last_batch_policy", "auto_reset"} <= iterator_kw
    assert all(f"{k}=" in src for k in ("reader_name", "last_batch_policy", "auto_reset"))
    assert LastBatchPolicy.PARTIAL is not None
    pipeline_kw = set(inspect.signature(dali.Pipeline.__init__).parameters)
    assert {"batch_size", "num_threads", "device_id", "seed", "prefetch_queue_depth"} <= pipeline_kw


def test_dali_tf_dataset_keywords_exist_when_the_plugin_is_installed():
    if not course.dali_tf_available():
        pytest.skip("DALI's TensorFlow plugin is not installed (not part of the pinned stack)")
    import nvidia.dali.plugin.tf as dali_tf

    params = set(inspect.signature(dali_tf.DALIDataset).parameters)
    assert {"pipeline", "batch_size", "output_shapes", "output_dtypes", "device_id"} <= params
