"""Published figures on input pipelines (lesson 06)."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
    Published("dali-streampetr-2gpu", "Replacing a PyTorch Dataset + DataLoader by a DALI pipeline for StreamPETR "
              "training on NuScenes mini (1024x372 images, batch 8 per GPU): 935 -> 829 ms per batch on 2 GPUs, "
              "while the CPU usage fell from 3.3% to 1.5%.", 1.13, 1.13, "x",
              "2 of 8 NVIDIA A100-SXM4-80GB, 2x AMD EPYC 7742 (128 cores)",
              "NVIDIA ACCV-Lab, DALI Pipeline Framework evaluation",
              "https://nvidia.github.io/ACCV-Lab/_sources/contained_package_docs_mirror/dali_pipeline_framework/"
              "docs/evaluation.rst.txt", "2026-11",
              "935 / 829 ms per batch after warm-up; CPU usage saving 55%. Date: when checked."),
    Published("dali-streampetr-8gpu", "The same DALI pipeline on 8 GPUs: 1,110 -> 868 ms per batch, CPU usage 12.3% "
              "-> 5.4%: the more GPUs share the host's CPUs, the more moving the preprocessing off them pays.",
              1.28, 1.28, "x", "8x NVIDIA A100-SXM4-80GB, 2x AMD EPYC 7742 (128 cores)",
              "NVIDIA ACCV-Lab, DALI Pipeline Framework evaluation",
              "https://nvidia.github.io/ACCV-Lab/_sources/contained_package_docs_mirror/dali_pipeline_framework/"
              "docs/evaluation.rst.txt", "2026-11",
              "1110 / 868 ms per batch after warm-up; CPU usage saving 56%. Date: when checked."),
)
