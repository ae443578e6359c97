"""Published figures on multi-GPU scaling and interconnects (lesson 07)."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
    Published("ddp-resnet50-dgxa100-tf32", "ResNet-50 v1.5 training with PyTorch DDP, 1 -> 8 GPUs at the same batch "
              "per GPU: 938 -> 7,248 img/s in TF32 ('strong scaling' 7.72x).", 7.72, 7.72, "x",
              "8x NVIDIA A100 80GB (DGX A100, NVLink), TF32, PyTorch 21.03 NGC container",
              "NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch, training performance",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021", "7248 / 938 img/s on 8 GPUs: 96.5% scaling efficiency."),
    Published("ddp-resnet50-dgxa100-amp", "The same run in mixed precision: 2,470 -> 16,621 img/s, 6.72x on 8 GPUs. "
              "Faster GPUs leave less compute to hide the all-reduce behind, so scaling efficiency falls.",
              6.72, 6.72, "x", "8x NVIDIA A100 80GB (DGX A100, NVLink), mixed precision, PyTorch 21.03 NGC container",
              "NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch, training performance",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021", "16621 / 2470 img/s on 8 GPUs: 84% scaling efficiency."),
    Published("ddp-resnet50-dgx1-v100-fp32", "ResNet-50 v1.5 training with PyTorch DDP, 1 -> 8 V100 16GB in FP32: "
              "367 -> 2,855 img/s (7.76x).", 7.76, 7.76, "x",
              "8x NVIDIA V100 16GB (DGX-1, NVLink), FP32, PyTorch 21.03 NGC container",
              "NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch, training performance",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021", "2855 / 367 img/s on 8 GPUs: 97% scaling efficiency."),
    Published("goyal-scaling-efficiency", "Data-parallel ResNet-50 training on commodity hardware achieves ~90% "
              "scaling efficiency when moving from 8 to 256 GPUs.", 90, 90, "% scaling efficiency",
              "256 NVIDIA Tesla P100 GPUs",
              "Goyal et al., 'Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour'",
              "https://arxiv.org/abs/1706.02677", "2017-06", "From the abstract; efficiency relative to 8 GPUs."),
    Published("nvlink-a100", "One A100 supports up to 12 third-generation NVLink connections: 600 GB/s in total "
              "(both directions together, ~300 GB/s each way), 10 times the bandwidth of PCIe Gen4.", 600, 600,
              " GB/s", "NVIDIA A100 (SXM, NVLink 3)", "NVIDIA NVLink product page",
              "https://www.nvidia.com/de-de/data-center/nvlink/", "2026-11", "Date: when checked."),
    Published("nccl-allreduce-a100", "NCCL's all-reduce among 8 A100s over NVLink reaches a bus bandwidth of about "
              "230 GB/s (nccl-tests' busbw, buffers of gigabytes): each NVLink's 25 GB/s line rate per direction gives "
              "about 20 GB/s with the 128-byte payloads of NCCL's kernels, 240 GB/s over 12 links, and other "
              "bottlenecks on the GPU hold it near 230.", 230, 230, " GB/s",
              "8x NVIDIA A100 SXM (NVLink 3, NVSwitch)",
              "NCCL developer S. Jeaugey in NVIDIA/nccl-tests issue #149, 'Expected bandwidth results? A100 GPUs over "
              "NVLink'", "https://github.com/NVIDIA/nccl-tests/issues/149", "2023-07",
              "What all-reduce reaches; the 300 GB/s per direction of the NVLink page (nvlink-a100) is the theoretical "
              "line rate."),
    Published("zero-communication", "ZeRO's communication per step, in volumes of the model's parameters (Psi): "
              "data parallelism's all-reduce moves 2 Psi per GPU, ZeRO stages 1 and 2 the same 2 Psi (a reduce-scatter "
              "of the gradients, an all-gather of the updated parameters), stage 3 3 Psi (the parameters are "
              "all-gathered again for backward): 1.5x data parallelism's.", 1.5, 1.5, "x data parallelism's",
              "any data-parallel training (an analysis of the collectives, not a measurement)",
              "Rajbhandari, Rasley, Ruwase, He, 'ZeRO: Memory Optimizations Toward Training Trillion Parameter "
              "Models' (SC20), section 7", "https://arxiv.org/abs/1910.02054", "2020-11"),
)
