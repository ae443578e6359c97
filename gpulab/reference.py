"""Published figures the course cites, as data with provenance (figure, hardware, source, date).

Datasheet peaks are what vendors print; "achievable" figures are what careful measurements reach.
Lessons show both beside the learner's own measurement.

Example:
    >>> import gpulab as gl
    >>> gl.published("amp-pytorch").hardware
    'NVIDIA Volta, Turing, Ampere GPUs'
    >>> round(gl.gpu_spec("Tesla T4").bandwidth_bytes_per_s / 1e9)
    320
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


__all__ = ["Published", "GPUSpec", "published", "references", "gpu_spec", "gpu_specs", "PUBLISHED", "GPU_SPECS"]


@dataclass(frozen=True)
class Published:
    """One published claim. ``low``/``high`` bound the figure (equal for a single value)."""

    key: str
    claim: str
    low: float
    high: float
    unit: str            # "x" for a speedup ratio, "fraction" for a share of peak, ...
    hardware: str
    source: str
    url: str
    date: str            # when the source was published or last checked (YYYY or YYYY-MM)
    note: str = ""

    @property
    def figure(self) -> str:
        """The figure as text, e.g. ``'2-3x'`` or ``'80-86% of peak'``."""
        if self.unit == "fraction":
            lo, hi = f"{self.low:.0%}", f"{self.high:.0%}"
            return (lo if self.low == self.high else f"{lo[:-1]}-{hi}") + " of peak"
        lo, hi = f"{self.low:g}", f"{self.high:g}"
        return (lo if self.low == self.high else f"{lo}-{hi}") + self.unit

    def __str__(self) -> str:
        return f"{self.figure} on {self.hardware} ({self.source}, {self.date})"

    def __repr__(self) -> str:
        return f"{self}: {self.claim} {self.url}"

    def _repr_html_(self) -> str:
        return (f'<b>{self.figure}</b> on {self.hardware} - <a href="{self.url}" target="_blank">{self.source}</a>'
                f" ({self.date}). {self.claim}")


PUBLISHED: dict[str, Published] = {p.key: p for p in (
    Published("amp-pytorch", "Automatic mixed precision (fp16 autocast + GradScaler) speeds up training "
              "on tensor-core GPUs.", 2, 3, "x", "NVIDIA Volta, Turing, Ampere GPUs",
              "PyTorch AMP recipe", "https://pytorch.org/tutorials/recipes/recipes/amp_recipe.html", "2020",
              "Earlier architectures (Kepler, Maxwell, Pascal) see a modest speedup."),
    Published("amp-tensorflow-gpu", "The Keras mixed precision API improves performance on modern GPUs.",
              3, 3, "x", "modern NVIDIA GPUs", "TensorFlow mixed precision guide",
              "https://www.tensorflow.org/guide/mixed_precision", "2024", "Stated as 'more than 3 times'."),
    Published("amp-tensorflow-cpu", "bfloat16 mixed precision on recent Intel CPUs (AMX).", 2, 2, "x",
              "latest Intel CPUs", "TensorFlow mixed precision guide",
              "https://www.tensorflow.org/guide/mixed_precision", "2024", "Stated as 'more than 2 times'."),
    Published("amp-tpu", "bfloat16 mixed precision on TPUs.", 1.6, 1.6, "x", "Google TPUs",
              "TensorFlow mixed precision guide", "https://www.tensorflow.org/guide/mixed_precision", "2024",
              "Stated as '60%'."),
    Published("mamf-a100", "Maximum achievable bf16 matmul throughput vs the datasheet's 312 TFLOP/s.",
              0.859, 0.859, "fraction", "NVIDIA A100 SXM (CUDA 12.1)", "ml-engineering, MAMF table",
              "https://github.com/stas00/ml-engineering/tree/master/compute/accelerator", "2024",
              "267.9 of 312 TFLOP/s; A100 PCIe reached 82.2%."),
    Published("mamf-h100", "Maximum achievable bf16 matmul throughput vs the datasheet's 989 TFLOP/s.",
              0.801, 0.801, "fraction", "NVIDIA H100 SXM (CUDA 12.1)", "ml-engineering, MAMF table",
              "https://github.com/stas00/ml-engineering/tree/master/compute/accelerator", "2024",
              "792.1 of 989 TFLOP/s."),
    Published("mamf-range", "Large aligned matmuls reach 80-86% of the datasheet bf16 peak on NVIDIA data-centre GPUs.",
              0.80, 0.86, "fraction", "NVIDIA A100 / GH200 / H100 SXM", "ml-engineering, MAMF table",
              "https://github.com/stas00/ml-engineering/tree/master/compute/accelerator", "2024"),
)}


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet peaks of one GPU (dense, no sparsity). Rates are per second."""

    name: str
    architecture: str
    compute_capability: tuple[int, int]
    memory_bytes: int
    bandwidth_bytes_per_s: float
    fp32_flops: float
    fp16_tensor_flops: float       # dense fp16 tensor-core peak
    bf16_tensor_flops: float | None
    tf32_tensor_flops: float | None
    tdp_w: float
    source: str
    url: str
    aliases: tuple[str, ...] = ()

    def ridge_point(self, dtype: str = "fp16") -> float:
        """FLOPs per byte above which a kernel is compute-bound on this GPU."""
        peak = self.fp32_flops if dtype == "fp32" else self.fp16_tensor_flops
        return peak / self.bandwidth_bytes_per_s


_GB = 10**9
_GIB = 2**30
GPU_SPECS: dict[str, GPUSpec] = {s.name: s for s in (
    GPUSpec("T4", "Turing", (7, 5), 16 * _GIB, 320 * _GB, 8.1e12, 65e12, None, None, 70,
            "NVIDIA T4 datasheet", "https://www.nvidia.com/en-us/data-center/tesla-t4/", ("tesla t4",)),
    GPUSpec("V100 SXM2", "Volta", (7, 0), 16 * _GIB, 900 * _GB, 15.7e12, 125e12, None, None, 300,
            "NVIDIA V100 datasheet", "https://www.nvidia.com/en-us/data-center/v100/", ("v100",)),
    GPUSpec("L4", "Ada Lovelace", (8, 9), 24 * _GIB, 300 * _GB, 30.3e12, 121e12, 121e12, 60e12, 72,
            "NVIDIA L4 datasheet", "https://www.nvidia.com/en-us/data-center/l4/", ("nvidia l4",)),
    GPUSpec("A100 40GB SXM", "Ampere", (8, 0), 40 * _GIB, 1555 * _GB, 19.5e12, 312e12, 312e12, 156e12, 400,
            "NVIDIA A100 datasheet", "https://www.nvidia.com/en-us/data-center/a100/",
            ("a100-sxm4-40gb", "a100-pcie-40gb", "a100 40gb")),
    GPUSpec("A100 80GB SXM", "Ampere", (8, 0), 80 * _GIB, 2039 * _GB, 19.5e12, 312e12, 312e12, 156e12, 400,
            "NVIDIA A100 datasheet", "https://www.nvidia.com/en-us/data-center/a100/",
            ("a100-sxm4-80gb", "a100 80gb")),
    GPUSpec("H100 SXM", "Hopper", (9, 0), 80 * _GIB, 3350 * _GB, 67e12, 989e12, 989e12, 494.5e12, 700,
            "NVIDIA H100 datasheet", "https://www.nvidia.com/en-us/data-center/h100/", ("h100 80gb hbm3", "h100-sxm")),
)}


def published(key: str) -> Published:
    """The :class:`Published` figure called ``key`` (see :func:`references` for all keys)."""
    try:
        return PUBLISHED[key]
    except KeyError:
        raise KeyError(f"no published figure {key!r}; known: {', '.join(sorted(PUBLISHED))}") from None


def gpu_spec(name: str) -> GPUSpec:
    """Datasheet figures for a GPU, matched loosely: ``"T4"``, ``"Tesla T4"``, ``"NVIDIA A100-SXM4-40GB"``."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("gpu_spec needs a GPU name such as 'T4' or torch.cuda.get_device_name()")
    n = name.lower().replace("nvidia", "").strip()
    for spec in GPU_SPECS.values():
        if n == spec.name.lower() or any(a in n for a in spec.aliases):
            return spec
    raise KeyError(f"no datasheet figures for {name!r}; known GPUs: {', '.join(GPU_SPECS)}")


def references() -> Any:
    """All published figures as a pandas DataFrame (key, figure, hardware, source, date, url)."""
    import pandas as pd

    return pd.DataFrame([{"key": p.key, "figure": p.figure, "hardware": p.hardware, "source": p.source,
                          "date": p.date, "claim": p.claim, "url": p.url} for p in PUBLISHED.values()])


def gpu_specs() -> Any:
    """Datasheet peaks of the GPUs the course compares with, as a DataFrame (TFLOP/s, GB/s, GB)."""
    import pandas as pd

    rows = []
    for s in GPU_SPECS.values():
        d = asdict(s)
        rows.append({"gpu": s.name, "architecture": s.architecture,
                     "fp32 TFLOP/s": s.fp32_flops / 1e12, "fp16 tensor TFLOP/s": s.fp16_tensor_flops / 1e12,
                     "bandwidth GB/s": s.bandwidth_bytes_per_s / 1e9, "memory GiB": s.memory_bytes / _GIB,
                     "TDP W": s.tdp_w, "source": d["source"]})
    return pd.DataFrame(rows)

