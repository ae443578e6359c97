"""MFU told like for like (lesson 13): a training run's model FLOPs per second over the card's **datasheet** dense
peak in the precision it trains in, the figure PaLM, Llama 3 and nanoGPT quote (nanoGPT's ``estimate_mfu`` divides by
the A100's 312 TFLOP/s, Llama 3 by the H100's 989), with the share of the peak **measured** on this card beside it:
what this card sustains, and so what is left for the code to win. A CPU has no datasheet peak in gpulab: there the
measured peak is the only one, and the result says so.

Example:
    >>> m = gpt_mfu(855e6, 150_000, precision="bfloat16", measured_peak_flops=250e12, gpu="A100 40GB SXM")
    >>> round(m.headline, 3), m.headline_peak, round(m.of_measured, 3)
    (0.411, 'datasheet', 0.513)
    >>> gpt_mfu(1e6, 1e4, precision="float32", measured_peak_flops=1e11, device="cpu").headline_peak
    'measured'
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Literal, Sequence

from ..._check import device_arg, text
from ..._format import NA, TableView, fmt_number, fmt_rate
from ..capstone.mfu import _SHEET, _SHORT, gpu_datasheet_peak
from ..lesson.published import Cited, Measured, measured

__all__ = ["GPTMFU", "gpt_mfu"]

_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "float32": "float32", "tf32": "tf32",
            "bfloat16": "bfloat16", "float16": "float16"}
CPU_WHY = "none for a CPU: gpulab holds datasheet peaks for GPUs only (gl.gpu_specs)"


@dataclass(frozen=True, repr=False)
class GPTMFU(TableView):
    """One training run's MFU (immutable): ``flops_per_token`` x ``tokens_per_s`` over the datasheet's dense peak of
    ``precision`` (``of_datasheet``, None without one: a CPU, or a card gpulab has no datasheet of) and over the peak
    measured on this device (``of_measured``: the share of what it sustains). ``headline`` is the datasheet share where
    there is one, else the measured one (``headline_peak`` says which); ``datasheet`` says what that peak is, or why
    there is none."""

    label: str
    flops_per_token: float
    tokens_per_s: float
    precision: str
    measured_peak_flops: float | None
    datasheet_peak_flops: float | None
    datasheet: str
    gpu: str | None

    @property
    def title(self) -> str:  # type: ignore[override]
        if self.datasheet_peak_flops:
            return "MFU against the datasheet peak (as published runs quote it), and the share of what this card sustains"
        return "MFU against the measured peak only (no datasheet peak here)"

    @property
    def achieved_flops(self) -> float:
        return self.flops_per_token * self.tokens_per_s

    @property
    def of_datasheet(self) -> float | None:
        return self.achieved_flops / self.datasheet_peak_flops if self.datasheet_peak_flops else None

    @property
    def of_measured(self) -> float | None:
        return self.achieved_flops / self.measured_peak_flops if self.measured_peak_flops else None

    @property
    def headline_peak(self) -> Literal["datasheet", "measured"]:
        return "datasheet" if self.datasheet_peak_flops else "measured"

    @property
    def headline(self) -> float | None:
        """The MFU to quote: of the datasheet peak where there is one (PaLM's, Llama 3's and nanoGPT's convention),
        else of the measured peak."""
        return self.of_datasheet if self.datasheet_peak_flops else self.of_measured

    @property
    def short(self) -> str:
        return _SHORT.get(self.precision, self.precision)

    def describe(self) -> str:
        """One line: the headline MFU, with the measured share beside it (or why there is no datasheet share)."""
        p = self.short
        if self.datasheet_peak_flops:
            return (f"{_pct(self.of_datasheet)} MFU of the {self.gpu or 'card'}'s datasheet {p} peak "
                    f"({fmt_rate(self.datasheet_peak_flops, 'FLOP/s')}); {_pct(self.of_measured)} of the {p} peak "
                    f"measured here ({fmt_rate(self.measured_peak_flops, 'FLOP/s')}): what this card sustains")
        return (f"{_pct(self.of_measured)} of the {p} peak measured here ({fmt_rate(self.measured_peak_flops, 'FLOP/s')});"
                f" the measured peak only (datasheet peak: {self.datasheet})")

    def rows(self, *, vs: Sequence[str | Cited] = (), measured_vs: Sequence[str | Cited] = (),
             note: str = "") -> list[Measured]:
        """Rows for :func:`gpulab.course.your_numbers`: the headline MFU beside the published runs ``vs`` (against
        the datasheet peak, as they are), then the share of the measured peak beside ``measured_vs``; on a device
        without a datasheet peak, one row of the measured share, which says so.

        Example:
            >>> m = gpt_mfu(1e6, 1e4, precision="float32", measured_peak_flops=1e11, device="cpu")
            >>> [r.quantity for r in m.rows(vs=["palm-mfu"])]
            ['MFU of run (measured fp32 peak: no datasheet peak for this device)']
        """
        text("note", note)
        p, name = self.short, self.label
        if self.datasheet_peak_flops:
            return [measured(f"MFU of {name} (datasheet {p} peak)", self.of_datasheet, "fraction", vs=list(vs),
                             note="; ".join(filter(None, [note, f"{self.gpu}: {fmt_rate(self.datasheet_peak_flops, 'FLOP/s')}, "
                                                               "the dense peak published runs divide by"]))),
                    measured(f"MFU of {name}: share of what this card sustains (measured {p} peak)", self.of_measured,
                             "fraction", vs=list(measured_vs),
                             note=f"{fmt_rate(self.measured_peak_flops, 'FLOP/s')} measured by gl.machine_limits")]
        why = "a CPU has no datasheet peak" if self.gpu is None else f"no datasheet for {self.gpu}"
        return [measured(f"MFU of {name} (measured {p} peak: no datasheet peak for this device)", self.of_measured,
                         "fraction", vs=list(vs),
                         note="; ".join(filter(None, [note, f"the measured peak only ({why}); the published runs "
                                                           "divide by their chips' datasheet peaks"])))]

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        p = self.short
        head = ["run", "FLOPs per token", "tokens/s", "achieved"]
        row = [self.label, fmt_number(self.flops_per_token), fmt_number(self.tokens_per_s),
               fmt_rate(self.achieved_flops, "FLOP/s")]
        measured_peak = fmt_rate(self.measured_peak_flops, "FLOP/s") if self.measured_peak_flops else "not measured"
        if self.datasheet_peak_flops:
            head += [f"MFU (datasheet {p} peak)", f"share of what this card sustains (measured {p} peak)"]
            row += [_pct(self.of_datasheet), _pct(self.of_measured)]
            foot = (f"datasheet peak: {self.datasheet}; measured peak: {measured_peak}, gl.machine_limits' fastest {p} "
                    f"matmul on this card. Published MFU (PaLM, Llama 3, nanoGPT) divides by the datasheet's.")
        else:
            head += [f"MFU (measured {p} peak)"]
            row += [_pct(self.of_measured)]
            foot = (f"the measured peak only: {measured_peak}, gl.machine_limits' fastest {p} matmul here; datasheet "
                    f"peak: {self.datasheet}. Published MFU divides by a GPU's datasheet peak: not like for like.")
        return head, [row], foot


def _pct(x: float | None) -> str:
    return NA if x is None else f"{x:.1%}"


def _number(name: str, value: Any, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a positive finite number{' or None' if optional else ''}, got {value!r}")
    return float(value)


def _precision(value: Any) -> str:
    name = str(value).replace("torch.", "") if value is not None else ""
    if name not in _ALIASES:
        raise ValueError(f"precision must be one of {sorted(_SHEET)} (or fp32, bf16, fp16, a torch dtype): the "
                         f"precision the run trains in, got {value!r}")
    return _ALIASES[name]


def gpt_mfu(flops_per_token: float, tokens_per_s: float, *, precision: Any, measured_peak_flops: float | None,
            device: Any = None, gpu: str | None = None, label: str = "run") -> GPTMFU:
    """A training run's :class:`GPTMFU`: ``flops_per_token`` (6N + 12LdT, ``TransformerShape.flops_per_token``) x
    ``tokens_per_s`` over the datasheet's dense peak of ``precision`` ("float32", "tf32", "bfloat16", "float16") on
    the run's GPU, and over ``measured_peak_flops`` (``gl.machine_limits(...).peak_flops(precision)``, or the ablation
    row's ``ceiling_flops``). The GPU is ``gpu`` (a name ``gl.gpu_spec`` knows) or, by default, ``device``'s when it
    is a CUDA device (default: this process's device); on a CPU there is no datasheet peak.

    Example:
        >>> m = gpt_mfu(855e6, 150_000, precision="bf16", measured_peak_flops=None, gpu="NVIDIA H100 80GB HBM3")
        >>> round(m.headline, 3), m.of_measured
        (0.13, None)
    """
    fpt, tps = _number("flops_per_token", flops_per_token), _number("tokens_per_s", tokens_per_s)
    peak = _number("measured_peak_flops", measured_peak_flops, optional=True)
    precision = _precision(precision)
    label = text("label", label, empty=False)
    if gpu is not None and (not isinstance(gpu, str) or not gpu.strip()):
        raise TypeError(f"gpu must be a GPU's name such as 'NVIDIA H100 80GB HBM3' (or None: the device's), got {gpu!r}")
    if gpu is None:
        device_arg("device", device)
        gpu = _device_gpu(device)
    sheet, why = gpu_datasheet_peak(gpu, precision) if gpu is not None else (None, CPU_WHY)
    return GPTMFU(label, fpt, tps, precision, peak, sheet, why, gpu)


def _device_gpu(device: Any) -> str | None:
    """The name of ``device``'s GPU (None on a CPU, or without torch or CUDA)."""
    try:
        import torch
    except ImportError:
        return None
    if device is None:
        if not torch.cuda.is_available():
            return None
        device = "cuda"
    dev = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else None
