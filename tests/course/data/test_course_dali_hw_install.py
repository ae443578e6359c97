"""DALI's hardware JPEG decoder share (hw_decoder_load) in the lesson's pipeline, and installing DALI into a running
notebook (course.install_dali) without replacing torch or numpy."""
from __future__ import annotations

import pytest
import torch

from gpulab import course
from gpulab.course.data import dali as dali_mod
from gpulab.course.data import dali_install


class _Node:
    def __init__(self, log):
        self.log = log

    def gpu(self):
        return self


class _Fn:
    """A stand-in for nvidia.dali.fn recording (name, kwargs) of every call."""

    def __init__(self, prefix="", log=None):
        self.prefix, self.log = prefix, [] if log is None else log

    def __getattr__(self, attr):
        if attr in ("readers", "decoders", "random"):
            return _Fn(self.prefix + attr + ".", self.log)

        def call(*args, **kwargs):
            self.log.append((self.prefix + attr, kwargs))
            return (_Node(self.log), _Node(self.log)) if attr == "file" else _Node(self.log)
        return call


class _Types:
    RGB, GRAY, FLOAT = "RGB", "GRAY", "FLOAT"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    return course.synthetic_images(tmp_path_factory.mktemp("hw") / "s", n=8, classes=2, size=16)


def _decoder_kwargs(plan, images):
    fn = _Fn()
    dali_mod._dali_graph(fn, _Types, plan, images, 12, True, True, 0)
    return next(kw for name, kw in fn.log if name == "decoders.image")


@pytest.mark.parametrize("name, has", [("NVIDIA A100-SXM4-80GB", True), ("NVIDIA A100 80GB PCIe", True),
                                       ("NVIDIA A30", True), ("NVIDIA H100 80GB HBM3", True), ("NVIDIA H200", True),
                                       ("NVIDIA GH200 480GB", True), ("Tesla T4", False), ("NVIDIA L4", False),
                                       ("NVIDIA RTX A1000", False), ("NVIDIA GeForce RTX 4090", False), (None, False)])
def test_which_gpus_have_a_hardware_jpeg_decoder(name, has):
    assert course.has_hardware_jpeg_decoder(name) is has


def test_the_plan_sets_the_share_only_where_the_gpu_has_the_decoder(images):
    a100 = course.dali_plan("cuda", gpu_name="NVIDIA A100-SXM4-40GB")
    t4 = course.dali_plan("cuda", gpu_name="Tesla T4")
    cpu = course.dali_plan("cpu")
    assert a100.hw_decoder_load == course.HW_DECODER_LOAD and t4.hw_decoder_load is None and cpu.hw_decoder_load is None
    assert _decoder_kwargs(a100, images)["hw_decoder_load"] == course.HW_DECODER_LOAD
    assert "hw_decoder_load" not in _decoder_kwargs(t4, images)
    assert "hw_decoder_load" not in _decoder_kwargs(cpu, images)
    assert "hardware JPEG decoder" in str(a100) and "hardware" not in str(t4)


def test_without_a_gpu_the_plan_for_cuda_claims_no_hardware_decoder():
    if torch.cuda.is_available():
        pytest.skip("reads the real GPU's name here")
    assert course.dali_plan("cuda").hw_decoder_load is None


def test_the_share_can_be_set_per_loader_only_where_it_applies():
    a100 = course.dali_plan("cuda", gpu_name="NVIDIA A100-SXM4-40GB")
    assert dali_mod._with_load(a100, 0.0).hw_decoder_load == 0.0 and dali_mod._with_load(a100, None) is a100
    for bad in (1.5, -0.1, True, "half"):
        with pytest.raises(ValueError, match="hw_decoder_load"):
            dali_mod._with_load(a100, bad)
    with pytest.raises(ValueError, match="needs a GPU with a hardware JPEG decoder"):
        dali_mod._with_load(course.dali_plan("cpu"), 0.5)


def test_the_default_share_is_the_installed_dalis_and_the_argument_exists():
    pytest.importorskip("nvidia.dali")
    from nvidia.dali import backend

    schema = backend.GetSchema("decoders__Image")
    assert schema.HasArgument("hw_decoder_load") and not schema.IsDeprecatedArg("hw_decoder_load")
    default = float(schema.GetArgumentDefaultValueString("hw_decoder_load"))
    assert 0 < default <= 1 and 0 < course.HW_DECODER_LOAD <= 1
    import nvidia.dali

    if nvidia.dali.__version__.startswith(dali_install.DALI_VERSION.rsplit(".", 1)[0] + "."):   # the pinned release
        assert default == pytest.approx(course.HW_DECODER_LOAD)


def test_real_dali_defines_the_gpu_graph_with_the_share(images):
    pytest.importorskip("nvidia.dali")
    plan = course.dali_plan("cuda:0", gpu_name="NVIDIA H100 80GB HBM3")
    pipe = dali_mod._dali_pipeline(images, 4, 12, True, plan, 1, True, 0, 2, build=False)
    assert pipe.device_id == 0


# ---- installing DALI ------------------------------------------------------------------------------------
@pytest.mark.parametrize("cuda, wheel", [("12.1", "nvidia-dali-cuda120"), ("12.8", "nvidia-dali-cuda120"),
                                         ("13.0", "nvidia-dali-cuda130"), (None, "nvidia-dali-cuda120")])
def test_the_wheel_follows_the_cuda_major_version(cuda, wheel):
    args = course.dali_install_args(cuda, constraints="keep.txt")
    assert args[-1] == f"{wheel}=={dali_install.DALI_VERSION}"
    assert args[:2] == ["install", "-q"] and args[args.index("--extra-index-url") + 1] == "https://pypi.nvidia.com"
    assert args[args.index("-c") + 1] == "keep.txt"
    assert not any(a.startswith("--upgrade") or a == "-U" for a in args)
    assert not any(a.split("=")[0] in ("torch", "numpy") for a in args)


@pytest.mark.parametrize("cuda", ["11.8", "14.0", "twelve", 12])
def test_cuda_versions_without_a_wheel_are_refused(cuda):
    with pytest.raises((ValueError, TypeError), match="cuda"):
        course.dali_wheel(cuda)


def _fake_state(monkeypatch, versions_before, versions_after, imported=()):
    calls = iter([versions_before, versions_after])
    monkeypatch.setattr(dali_install, "_versions", lambda: dict(next(calls)))
    monkeypatch.setattr("gpulab.course.data.dali.dali_available", lambda: False)
    monkeypatch.setattr(dali_install, "_imported", lambda changed: any(c in imported for c in changed))


def test_install_pins_torch_and_numpy_and_needs_no_restart_when_nothing_imported_changed(monkeypatch):
    seen = {}

    def run(args):
        seen["args"] = list(args)
        seen["constraints"] = open(args[args.index("-c") + 1]).read()
        return 0, "Successfully installed nvidia-dali-cuda120-2.4.0"

    before = {"torch": "2.8.0+cu126", "numpy": "2.0.2", "six": "1.17.0"}
    _fake_state(monkeypatch, before, {**before, "nvidia-dali-cuda120": "2.4.0"})
    result = course.install_dali(cuda="12.6", run=run)
    assert "torch==2.8.0+cu126\n" in seen["constraints"] and "numpy==2.0.2\n" in seen["constraints"]
    assert seen["args"][-1] == "nvidia-dali-cuda120==2.4.0"
    assert result.ok and not result.restart and result.changed == ()
    assert "no restart needed" in repr(result) and "<torch and numpy pinned>" in result.command


def test_install_asks_for_a_restart_only_when_an_imported_package_changed(monkeypatch):
    before = {"torch": "2.8.0", "numpy": "2.0.2", "packaging": "26.5"}
    _fake_state(monkeypatch, before, {**before, "packaging": "26.3"}, imported=("packaging",))
    result = course.install_dali(cuda="12.6", run=lambda args: (0, ""))
    assert result.restart and result.changed == ("packaging",) and "restart the runtime" in repr(result)


def test_a_failed_install_says_so_and_the_lesson_goes_on(monkeypatch):
    _fake_state(monkeypatch, {"torch": "2.8.0"}, {"torch": "2.8.0"})
    result = course.install_dali(cuda="12.6", run=lambda args: (1, "ERROR: Cannot install: conflicting torch"))
    assert not result.ok and "could not install" in repr(result) and "conflicting torch" in repr(result)


def test_nothing_is_run_when_dali_is_there(monkeypatch):
    monkeypatch.setattr("gpulab.course.data.dali.dali_available", lambda: True)
    result = course.install_dali(run=lambda args: pytest.fail("pip must not run"))
    assert result.returncode is None and "already installed" in repr(result) and "<div" in result._repr_html_()


def test_imported_reads_the_modules_of_changed_distributions():
    assert dali_install._imported(["torch"]) is True          # this process imported torch
    assert dali_install._imported(["no-such-distribution"]) is False
