"""gpulab.system.tf32_state / tf32_switched: PyTorch's TF32 switches read and set through the API the installed
torch prefers, against fakes of both torch surfaces (the ``fp32_precision`` one of torch 2.7+, which raises
when the older switches are read after the new ones were set, as torch 2.9+ does; the ``allow_tf32`` one of
torch 2.5/2.6) and against the installed torch on this CPU. Nothing else in gpulab touches the switches."""
from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace as NS

import pytest
import torch

import gpulab as gl
from gpulab._tf32 import tf32_off
from gpulab.system import TF32State, tf32_state, tf32_switched

ROOT = Path(__file__).resolve().parents[2]
MIXED = "you have used mix of the legacy and new APIs"


class FakeContext:
    """at::Context's fp32 precision table as torch 2.9+ keeps it: a (backend, op) setting of "none" defers to
    (backend, "all"), then to ("generic", "all"); the older switches live beside it and must agree when read."""

    def __init__(self):
        self.table = {("generic", "all"): "none", ("cuda", "all"): "none", ("cuda", "matmul"): "none",
                      ("cuda", "conv"): "tf32", ("cuda", "rnn"): "tf32"}
        self.legacy_matmul, self.legacy_cudnn = "highest", True
        self.legacy_reads = 0

    def get(self, backend, op):
        p = self.table[(backend, op)]
        p = self.table[(backend, "all")] if p == "none" else p
        return self.table[("generic", "all")] if p == "none" else p

    def set(self, backend, op, p):
        if p not in ("none", "ieee", "tf32", "bf16") or (backend == "cuda" and p == "bf16"):
            raise RuntimeError(f"backend {backend!r} does not support precision {p!r}")
        self.table[(backend, op)] = p

    # the older API, as torch 2.9+ implements it on top of the table
    def allow_tf32_cublas(self):
        self.legacy_reads += 1
        if (self.legacy_matmul != "highest") != (self.get("cuda", "matmul") == "tf32"):
            raise RuntimeError(f"TF32 status for cublas matmul: {MIXED}")
        return self.legacy_matmul != "highest"

    def allow_tf32_cudnn(self):
        self.legacy_reads += 1
        conv, rnn = self.get("cuda", "conv") == "tf32", self.get("cuda", "rnn") == "tf32"
        if not conv == rnn == self.legacy_cudnn:
            raise RuntimeError(f"cuDNN conv and RNN flags: {MIXED}")
        return self.legacy_cudnn


class _Switch:
    """An ``fp32_precision`` switch (torch.backends' _FP32Precision): only that attribute exists."""

    def __init__(self, ctx, backend, op):
        object.__setattr__(self, "_where", (ctx, backend, op))

    def __getattr__(self, name):
        if name != "fp32_precision":
            raise AttributeError("Unknown attribute " + name)
        ctx, backend, op = self._where
        return ctx.get(backend, op)

    def __setattr__(self, name, value):
        if name != "fp32_precision":
            raise AttributeError("Unknown attribute " + name)
        ctx, backend, op = self._where
        ctx.set(backend, op, value)


def new_torch():
    """torch 2.9+'s surface: fp32_precision switches, and the older ones still there but refusing a mix."""
    ctx = FakeContext()

    class CuBLAS:
        def __getattr__(self, name):
            if name == "allow_tf32":
                return ctx.allow_tf32_cublas()
            if name == "fp32_precision":
                return ctx.get("cuda", "matmul")
            raise AttributeError("Unknown attribute " + name)

        def __setattr__(self, name, value):
            if name == "allow_tf32":
                ctx.legacy_matmul = "high" if value else "highest"
                ctx.set("cuda", "matmul", "tf32" if value else "ieee")
            elif name == "fp32_precision":
                ctx.set("cuda", "matmul", value)
            else:
                raise AttributeError("Unknown attribute " + name)

    class CuDNN:
        benchmark = False
        conv, rnn = _Switch(ctx, "cuda", "conv"), _Switch(ctx, "cuda", "rnn")

        @property
        def allow_tf32(self):
            return ctx.allow_tf32_cudnn()

        @allow_tf32.setter
        def allow_tf32(self, value):
            ctx.set("cuda", "conv", "tf32" if value else "none")
            ctx.set("cuda", "rnn", "tf32" if value else "none")
            ctx.legacy_cudnn = value

    def get_precision():
        ctx.legacy_reads += 1
        if ctx.get("cuda", "matmul") == "tf32" and ctx.legacy_matmul == "highest":
            raise RuntimeError(f"the matmul precision: {MIXED}")
        return ctx.legacy_matmul

    def set_precision(p):
        ctx.legacy_matmul = p
        ctx.set("cuda", "matmul", "ieee" if p == "highest" else "tf32")

    return NS(backends=NS(cuda=NS(matmul=CuBLAS()), cudnn=CuDNN()), get_float32_matmul_precision=get_precision,
              set_float32_matmul_precision=set_precision, ctx=ctx)


def old_torch():
    """torch 2.5/2.6's surface: allow_tf32 and the matmul precision only (no fp32_precision, no cudnn.conv)."""
    state = {"precision": "highest", "cudnn": True}

    class CuBLAS:
        def __getattr__(self, name):
            if name == "allow_tf32":
                return state["precision"] != "highest"
            raise AttributeError("Unknown attribute " + name)

        def __setattr__(self, name, value):
            if name != "allow_tf32":
                raise AttributeError("Unknown attribute " + name)
            state["precision"] = "high" if value else "highest"

    class CuDNN:
        benchmark = False

        @property
        def allow_tf32(self):
            return state["cudnn"]

        @allow_tf32.setter
        def allow_tf32(self, value):
            state["cudnn"] = bool(value)

    def set_precision(p):
        state["precision"] = p

    return NS(backends=NS(cuda=NS(matmul=CuBLAS()), cudnn=CuDNN()),
              get_float32_matmul_precision=lambda: state["precision"], set_float32_matmul_precision=set_precision,
              state=state)


# ---- the fp32_precision surface (torch 2.7+; the only undeprecated one from 2.9) --------------------------------
def test_new_api_read_and_set_without_touching_the_old_switches():
    t = new_torch()
    assert tf32_state(t) == TF32State(matmul=False, cudnn=True, api="fp32_precision", matmul_setting="none")
    with tf32_switched(matmul=True, cudnn=False, torch_module=t) as on:
        assert on == TF32State(True, False, "fp32_precision", "tf32")
        assert t.ctx.table[("cuda", "matmul")] == "tf32"
        assert t.ctx.table[("cuda", "conv")] == t.ctx.table[("cuda", "rnn")] == "none"
        with pytest.raises(RuntimeError, match="mix"):    # the older switches now refuse: a mix of the two APIs
            t.get_float32_matmul_precision()
        assert tf32_state(t).matmul is True                # gpulab's reading does not
        assert t.backends.cudnn.allow_tf32 is False        # torch.export and Dynamo read this one: still readable
    assert t.ctx.legacy_reads == 2                         # only the test's own reads
    assert t.backends.cudnn.allow_tf32 is True
    assert tf32_state(t) == TF32State(False, True, "fp32_precision", "none")
    assert t.get_float32_matmul_precision() == "highest"   # consistent again after the block


def test_new_api_restores_after_an_error_and_reads_parents():
    t = new_torch()
    t.ctx.set("generic", "all", "tf32")                    # set above the leaves: the leaves defer to it
    assert tf32_state(t).matmul is True
    with pytest.raises(KeyError):
        with tf32_switched(matmul=False, torch_module=t) as off:
            assert off.matmul is False and off.cudnn is True    # cudnn=None: left as it was
            raise KeyError("boom")
    assert tf32_state(t).matmul is True and t.ctx.get("cuda", "matmul") == "tf32"


# ---- the allow_tf32 surface (torch 2.5, the oldest gpulab supports) ---------------------------------------------
def test_old_api_read_set_and_restore_exactly():
    t = old_torch()
    t.state["precision"] = "medium"
    assert tf32_state(t) == TF32State(True, True, "allow_tf32", "medium")
    with tf32_switched(matmul=False, cudnn=False, torch_module=t) as off:
        assert off == TF32State(False, False, "allow_tf32", "highest")
    assert t.state == {"precision": "medium", "cudnn": True}   # "medium", not just "on"
    with tf32_switched(matmul=True, torch_module=t) as on:
        assert on.matmul and t.state["precision"] == "high" and on.cudnn


def test_bad_switch_values_are_refused_before_anything_changes():
    t = old_torch()
    with pytest.raises(TypeError, match="matmul must be True or False"):
        with tf32_switched(matmul="yes", torch_module=t):
            pass
    assert t.state == {"precision": "highest", "cudnn": True}


# ---- the installed torch ----------------------------------------------------------------------------------------
def test_installed_torch_switches_and_restores_on_this_cpu():
    before = tf32_state()
    api = "fp32_precision" if hasattr(torch.backends.cuda.matmul, "fp32_precision") else "allow_tf32"
    assert before.api == api
    with tf32_switched(matmul=True, cudnn=False) as on:
        assert (on.matmul, on.cudnn) == (True, False)
        if api == "fp32_precision":
            assert torch.backends.cuda.matmul.fp32_precision == "tf32"
            assert torch.backends.cudnn.conv.fp32_precision != "tf32"
        assert torch.backends.cudnn.allow_tf32 is False       # torch.export and Dynamo read this one
        if api == "allow_tf32":
            assert torch.get_float32_matmul_precision() != "highest"
    assert tf32_state() == before
    assert torch.backends.cudnn.allow_tf32 == before.cudnn     # torch's own reads of the old flag still work
    assert torch.get_float32_matmul_precision() in ("highest", "high", "medium")   # no mix left behind


def test_tf32_off_leaves_torch_export_working():
    """A T4 rehearsal switches TF32 off for the process; torch.export (and Dynamo) read cuDNN's old flag, which
    torch 2.9+ refuses to read once cudnn.conv/rnn.fp32_precision were set: gpulab sets cuDNN the readable way."""
    with tf32_switched():                                  # restored after the test
        off = tf32_off()
        assert (off.matmul, off.cudnn) == (False, False)
        assert torch.backends.cudnn.allow_tf32 is False
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
        exported = gl.compiling.export(model, torch.randn(4, 8))
        assert exported.program is not None, exported


def test_system_info_reads_a_mixed_state_without_raising():
    """The learner set the new switch by hand while the old one says otherwise (torch 2.9+ refuses the old read)."""
    if not hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        pytest.skip("this torch has only the allow_tf32 switches")
    saved = torch.backends.cuda.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        detail = gl.system_info(frameworks=("torch",)).framework("torch").detail
        assert detail["matmul_tf32"] is True and detail["float32_matmul_precision"] == "high"
        assert detail["tf32_api"] == "fp32_precision"
    finally:
        torch.backends.cuda.matmul.fp32_precision = saved


def test_course_tf32_uses_the_one_helper():
    from gpulab import course

    before = course.tf32_flags()
    with course.tf32(True, convolutions=False) as flags:
        assert flags["matmul"] and not flags["cudnn"] and flags["api"] == tf32_state().api
    assert course.tf32_flags() == before


def test_only_one_module_touches_the_switches():
    """Every read and write of the TF32 switches goes through gpulab._tf32 (re-exported by gpulab.system: one place
    that knows both APIs)."""
    names = {"allow_tf32", "fp32_precision", "get_float32_matmul_precision", "set_float32_matmul_precision"}
    found = []
    for path in sorted((ROOT / "gpulab").rglob("*.py")):
        if path.name == "_tf32.py" and path.parent.name == "gpulab":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "getattr", "setattr", "hasattr") and len(node.args) >= 2 and \
                    isinstance(node.args[1], ast.Constant) and node.args[1].value in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    assert found == []


def test_the_lessons_name_the_torch_release_that_brought_fp32_precision():
    """torch.backends.cuda.matmul.fp32_precision arrived in torch 2.9 (2.7.1 and 2.8 raise AttributeError): every
    sentence about it says so, and the installed torch agrees."""
    from pathlib import Path

    import torch

    root = Path(__file__).resolve().parents[2]
    texts = {p: p.read_text() for p in [root / "notebooks" / "04_mixed_precision.ipynb", root / "gpulab" / "_tf32.py",
                                        root / "gpulab" / "course" / "machine" / "tf32.py"]}
    for path, text in texts.items():
        assert "torch 2.7" not in text and "2.7+" not in text, f"{path.name} dates fp32_precision to torch 2.7"
    assert "before torch 2.9" in texts[root / "notebooks" / "04_mixed_precision.ipynb"]
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert hasattr(torch.backends.cuda.matmul, "fp32_precision") == ((major, minor) >= (2, 9))
