"""Published figures on what GPUs sustain: achievable matmul rates beside datasheet peaks, clocks and power caps."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
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
)
