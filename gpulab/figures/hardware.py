"""Published figures on what GPUs sustain: achievable matmul rates beside datasheet peaks, clocks and power caps,
and how a card's throughput curve depends on the precision it runs."""
from __future__ import annotations

from .published import Published

_DLE_RESNET50 = ("NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch, inference performance",
                 "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5")

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
    Published("t4-fp16-sustained", "A 4096 x 4096 fp16 cuBLAS matmul repeated 100 times sustains about 24 TFLOP/s on a "
              "T4, against the datasheet's 65 TFLOP/s: the card lowers its clocks to stay within its power limit "
              "(about 70 W), as expected for continuous matrix multiplies.", 24 / 65, 24 / 65, "fraction",
              "NVIDIA T4 (70 W power limit)", "NVIDIA Developer Forums, 'About GPU peak performance'",
              "https://forums.developer.nvidia.com/t/about-gpu-peak-performance/264462", "2023",
              "About 24 of 65 TFLOP/s (37%), measured by the thread's author; the power cap as the cause is the "
              "answer of an NVIDIA moderator. The datasheet peak assumes the 1,590 MHz boost clock, which the 70 W "
              "cap does not sustain under a continuous matmul load."),
    Published("resnet50-t4-fp32-batch-1-to-256", "ResNet-50 v1.5 FP32 inference throughput on a T4 rises from "
              "98 img/s at batch 1 to 415 img/s at batch 256 (186 at 2, 325 at 4, 363 at 8, 409 at 16, 420 at 32, "
              "428 at 64, 426 at 128): flat from batch 16 on, where the mixed-precision curve of the same README "
              "still climbs to batch 32.", 4.23, 4.23, "x", "NVIDIA T4, FP32 (PyTorch 21.03 NGC container)",
              *_DLE_RESNET50, "2021", "415 / 98 img/s; mixed precision at batch 256: 1,198 img/s, 2.9x FP32."),
)
