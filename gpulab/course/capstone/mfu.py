"""Model FLOPs utilisation (MFU) of one row of an ablation, two ways twice: the model's FLOPs counted exactly or
taken as the usual 6 x parameters per sample, over the peak this machine measured or the one its datasheet prints,
each in the row's own precision (a TF32 recipe over a TF32 peak, a bf16 one over a bf16 peak).

Why both counts: "6N" (Kaplan et al. 2020: 2N forward, 4N backward per sample) assumes every layer computes the
gradient of its input. The seed MLP's first layer never does (no gradient flows into the images), and its biases
count as weights, so 6N overstates its work and its MFU. Why both peaks: a datasheet peak is what the vendor
prints; the measured one is what large matmuls reached here. MFU against the datasheet is the figure papers quote
(PaLM's 46%); against the measured peak it says what is left for this code to win.

Example:
    >>> m = MFU("final", "batch 256", 10_000.0, 1_598_000.0, 397_510, "float32", 1e11, None, "no datasheet")
    >>> round(m.mfu("counted", "measured"), 3), round(m.mfu("6N", "measured"), 3), m.mfu("counted", "datasheet")
    (0.16, 0.239, None)
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Any, Literal

from ..._format import NA, TableView, fmt_number, fmt_rate
from .ablation import Ablation

__all__ = ["MFU", "mfu_report"]

Convention = Literal["counted", "6N"]
Peak = Literal["measured", "datasheet"]
# the ceiling's precision -> (GPUSpec field, the datasheet's words for it)
_SHEET = {"float32": ("fp32_flops", "fp32 (CUDA cores)"), "tf32": ("tf32_tensor_flops", "TF32 tensor-core"),
          "bfloat16": ("bf16_tensor_flops", "bf16 tensor-core"), "float16": ("fp16_tensor_flops", "fp16 tensor-core")}
_SHORT = {"float32": "fp32", "tf32": "TF32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True, repr=False)
class MFU(TableView):
    """One recipe's achieved FLOP/s as a share of a peak: ``counted`` FLOPs per sample (torch's FLOP counter on one
    sample's step) or ``6N`` (6 x ``params``), over the ``measured`` or the ``datasheet`` peak of ``precision``
    (None where there is no such figure; ``datasheet`` says which one it is, or why there is none)."""

    label: str
    recipe: str
    samples_per_s: float
    counted_flops_per_sample: float
    params: int
    precision: str
    measured_peak_flops: float | None
    datasheet_peak_flops: float | None
    datasheet: str
    title: str = "MFU: two FLOP counts over two peaks"

    def flops_per_sample(self, convention: Convention) -> float:
        """FLOPs one training sample costs under ``convention``: "counted" or "6N"."""
        if convention not in ("counted", "6N"):
            raise ValueError(f"convention must be 'counted' or '6N', got {convention!r}")
        return self.counted_flops_per_sample if convention == "counted" else 6.0 * self.params

    def achieved_flops(self, convention: Convention) -> float:
        return self.flops_per_sample(convention) * self.samples_per_s

    def peak(self, peak: Peak) -> float | None:
        if peak not in ("measured", "datasheet"):
            raise ValueError(f"peak must be 'measured' or 'datasheet', got {peak!r}")
        return self.measured_peak_flops if peak == "measured" else self.datasheet_peak_flops

    def mfu(self, convention: Convention, peak: Peak) -> float | None:
        """Achieved FLOP/s under ``convention`` over the ``peak``; None where that peak is unknown."""
        p = self.peak(peak)
        return None if not p else self.achieved_flops(convention) / p

    @property
    def overcount(self) -> float:
        """How many times the counted FLOPs 6N assumes (above 1: 6N overstates this model's work)."""
        return 6.0 * self.params / self.counted_flops_per_sample

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        p = _SHORT.get(self.precision, self.precision)
        header = ["FLOP count", "FLOPs per sample", "achieved", f"of the measured {p} peak",
                  f"of the datasheet {p} peak"]
        rows = []
        for conv, words in (("counted", "counted (matmuls, exact)"), ("6N", f"6N (N = {self.params:,} parameters)")):
            shares = [self.mfu(conv, k) for k in ("measured", "datasheet")]
            rows.append([words, fmt_number(self.flops_per_sample(conv)), fmt_rate(self.achieved_flops(conv), "FLOP/s"),
                         *(NA if s is None else f"{s:.1%}" for s in shares)])
        foot = (f"{self.label}: {fmt_number(self.samples_per_s)} samples/s ({self.recipe}); counted: the matmul FLOPs "
                f"torch's FLOP counter finds in one sample's forward and backward (2 per multiply-add; no gradient into "
                f"the images; biases and ReLU not counted); 6N: 2N forward + 4N backward per sample (Kaplan et al. 2020, "
                f"gl.published('training-flops-6n')), which counts a "
                f"gradient into the images that is never computed ({self.overcount:.2f}x the counted FLOPs); measured "
                f"peak: {fmt_rate(self.measured_peak_flops, 'FLOP/s')}, gl.machine_limits' fastest {p} matmul here; "
                f"datasheet peak: {self.datasheet}")
        return header, rows, foot


def _params(model: Any) -> int:
    if isinstance(model, numbers.Integral) and not isinstance(model, bool):
        if model <= 0:
            raise ValueError(f"model must be a torch model or its parameter count (> 0), got {model!r}")
        return int(model)
    parameters = getattr(model, "parameters", None)
    if not callable(parameters):
        raise TypeError(f"model must be a torch model (e.g. course.seed_model()) or its parameter count, got {model!r:.60}")
    return int(sum(p.numel() for p in parameters()))


def datasheet_peak(device: str, precision: str) -> tuple[float | None, str]:
    """The datasheet's dense peak for ``precision`` ("float32", "tf32", "bfloat16", "float16") on ``device``'s GPU,
    with what it is and its source; ``(None, why)`` on a CPU, an unknown GPU or a precision the datasheet lacks.

    Example:
        >>> datasheet_peak("cpu", "float32")
        (None, 'none for a CPU: gpulab holds datasheet peaks for GPUs only (gl.gpu_specs)')
    """
    if precision not in _SHEET:
        raise ValueError(f"precision must be one of {sorted(_SHEET)}, got {precision!r}")
    if not str(device).startswith("cuda"):
        return None, "none for a CPU: gpulab holds datasheet peaks for GPUs only (gl.gpu_specs)"
    import torch

    return gpu_datasheet_peak(torch.cuda.get_device_name(torch.device(device)), precision)


def gpu_datasheet_peak(name: str, precision: str) -> tuple[float | None, str]:
    """The datasheet's dense peak for ``precision`` on the GPU called ``name`` (what ``torch.cuda.get_device_name``
    says, or a name :func:`gpulab.gpu_spec` knows), with what it is and its source; ``(None, why)`` for a card
    gpulab has no datasheet of, or a precision its datasheet lacks.

    Example:
        >>> gpu_datasheet_peak("NVIDIA H100 80GB HBM3", "bfloat16")[0] / 1e12
        989.0
    """
    if precision not in _SHEET:
        raise ValueError(f"precision must be one of {sorted(_SHEET)}, got {precision!r}")
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"name must be a GPU's name such as 'NVIDIA H100 80GB HBM3', got {name!r}")
    from ...reference import gpu_spec

    try:
        spec = gpu_spec(name)
    except KeyError:
        return None, f"none: gl.gpu_specs has no datasheet for {name!r}"
    field, words = _SHEET[precision]
    value = getattr(spec, field)
    if not value:
        return None, f"none: the {spec.name} datasheet lists no {words} peak"
    return float(value), f"{fmt_rate(value, 'FLOP/s')}, the {spec.name}'s dense {words} peak ({spec.source}, {spec.url})"


def mfu_report(table: Ablation, label: str | None = None, *, model: Any) -> MFU:
    """The :class:`MFU` of ``label``'s row of ``table`` (default: the final recipe): its samples/s, its counted FLOPs
    per sample and 6 x the parameters of ``model`` (a torch model or its parameter count), over the measured peak the
    table divided it by (the row's precision, TF32 for a TF32 recipe) and the datasheet's peak in that precision.

    Example:
        >>> from gpulab.course.capstone.ablation import Ablation, AblationStep
        >>> t = Ablation("demo", (AblationStep("seed loop", "batch 32", {}, "baseline", samples_per_s=1e4,
        ...     flops_per_sample=1.598e6, ceiling_dtype="float32", ceiling_flops=1e11),), device="cpu")
        >>> round(mfu_report(t, model=397_510).mfu("6N", "measured"), 3)
        0.239
    """
    if not isinstance(table, Ablation):
        raise TypeError(f"table must be a course ablation table (course.torch_ablation(...)), got {type(table).__name__}")
    if label is not None and (not isinstance(label, str) or label not in [s.label for s in table.steps]):
        raise KeyError(f"label={label!r} is not a row of the table: pass one of {[s.label for s in table.steps]}, or "
                       "None for the final recipe")
    step = table.final if label is None else table.step(label)
    params = _params(model)
    if not step.measured or not step.flops_per_sample:
        raise ValueError(f"step {step.label!r} was not measured ({step.decision}): pick a measured row")
    precision = step.ceiling_dtype or "float32"
    sheet, words = datasheet_peak(table.device or "cpu", precision) if precision in _SHEET else (None, "none")
    return MFU(step.label, step.recipe, float(step.samples_per_s), float(step.flops_per_sample), params, precision,
               table.ceiling(step.label), sheet, words)
