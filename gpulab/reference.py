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

import re
from dataclasses import asdict, dataclass, replace
from typing import Any

from ._format import TableView

__all__ = ["Published", "GPUSpec", "GPUSpecTable", "published", "references", "gpu_spec", "gpu_specs", "PUBLISHED",
           "GPU_SPECS"]


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
    Published("torch-compile-pt2-fp32", "torch.compile (TorchDynamo + Inductor) on 163 open-source models "
              "(HuggingFace, TIMM, TorchBench), training in float32: average speedup over eager.", 1.21, 1.21, "x",
              "NVIDIA A100", "PyTorch 2.0 release (pytorch.org/get-started/pytorch-2.0)",
              "https://pytorch.org/get-started/pytorch-2.0/", "2022-12",
              "Stated as 21% faster on average; the same page reports 43% for its 0.75 AMP + 0.25 fp32 mix."),
    Published("torch-compile-pt2-amp", "torch.compile on the same 163 models, training with automatic mixed "
              "precision: average speedup over eager.", 1.51, 1.51, "x", "NVIDIA A100",
              "PyTorch 2.0 release (pytorch.org/get-started/pytorch-2.0)",
              "https://pytorch.org/get-started/pytorch-2.0/", "2022-12", "Stated as 51% faster on average."),
    Published("torch-tensorrt-inference", "Torch-TensorRT (TensorRT engines from PyTorch, fp16/int8) vs PyTorch "
              "for inference.", 6, 6, "x", "NVIDIA GPUs", "NVIDIA developer blog, 'Accelerating Inference Up to "
              "6x Faster in PyTorch with Torch-TensorRT'",
              "https://developer.nvidia.com/blog/accelerating-inference-up-to-6x-faster-in-pytorch-with-torch-tensorrt/",
              "2021-12", "An upper bound ('up to 6x'), from the vendor, with reduced precision."),
    Published("triton-fused-softmax-traffic", "A row softmax written as five PyTorch operators reads 5MN + 2M and "
              "writes 3MN + 2M elements of an M x N input; one fused kernel reads and writes MN each, so a "
              "memory-bound softmax can run about 4x faster ((8MN + 4M) / 2MN).", 4, 4, "x",
              "any GPU (a count of memory traffic, not a timing)", "Triton tutorials, 'Fused Softmax'",
              "https://triton-lang.org/main/getting-started/tutorials/02-fused-softmax.html", "2026-11",
              "Fewer bytes moved, hence the expected speedup of a memory-bound kernel. Date: when checked."),
    Published("flashattention-gpt2", "FlashAttention - exact attention computed in tiles held in on-chip SRAM, so "
              "the N x N attention matrix is never written to GPU memory - trains GPT-2 up to 3x faster than the "
              "HuggingFace implementation (sequence length 1K).", 3, 3, "x", "NVIDIA A100",
              "Dao et al., 'FlashAttention: Fast and Memory-Efficient Exact Attention with IO-Awareness' (NeurIPS "
              "2022), abstract", "https://arxiv.org/abs/2205.14135", "2022",
              "End-to-end training speedup ('up to'); the kernel moves far fewer bytes than standard attention."),
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
    Published("palm-mfu", "Model FLOPs utilization (MFU: the model's counted FLOPs per second over the hardware's peak) "
              "of PaLM 540B training: 46.2%.", 0.462, 0.462, "fraction", "6,144 Google TPU v4 chips",
              "Chowdhery et al., 'PaLM: Scaling Language Modeling with Pathways'", "https://arxiv.org/abs/2204.02311",
              "2022-04", "The paper introduces MFU; GPT-3 on V100s is quoted at 21.3%, Gopher on TPU v3 at 32.5%."),
    Published("pcie-gen3-x16", "Theoretical PCIe 3.0 x16 bandwidth per direction (8 GT/s x 16 lanes, 128b/130b "
              "encoding); NVIDIA's T4 datasheet lists the interconnect as 'PCIe Gen3: 32 GB/s', both directions "
              "together.", 15.75, 16, " GB/s", "PCIe Gen3 x16 GPUs (e.g. Tesla T4)", "NVIDIA T4 datasheet",
              "https://www.nvidia.com/en-us/data-center/tesla-t4/", "2026-11",
              "Per direction; 126 Gbit/s = 15.75 GB/s after encoding. Date: when checked."),
    Published("pcie-gen4-x16", "Theoretical PCIe 4.0 x16 bandwidth per direction (16 GT/s x 16 lanes); NVIDIA's "
              "A100 datasheet lists 'PCIe Gen4: 64 GB/s', both directions together.", 31.5, 32, " GB/s",
              "PCIe Gen4 x16 GPUs (e.g. A100 PCIe, L4)", "NVIDIA A100 datasheet",
              "https://www.nvidia.com/en-us/data-center/a100/", "2026-11", "Per direction. Date: when checked."),
    Published("pcie-gen5-x16", "Theoretical PCIe 5.0 x16 bandwidth per direction (32 GT/s x 16 lanes, 128b/130b "
              "encoding); NVIDIA's H100 datasheet lists 'PCIe Gen5: 128 GB/s', both directions together.", 63, 64,
              " GB/s", "PCIe Gen5 x16 GPUs (e.g. H100 SXM and PCIe)", "NVIDIA H100 datasheet",
              "https://www.nvidia.com/en-us/data-center/h100/", "2026-11",
              "Per direction; 504 Gbit/s = 63 GB/s after encoding. Date: when checked."),
    Published("pinned-pcie-gen3", "Page-locked (pinned) host memory gives the highest host-device bandwidth: "
              "roughly 12 GB/s on PCIe x16 Gen3 cards. Pageable transfers are staged through a pinned buffer.",
              12, 12, " GB/s", "PCIe x16 Gen3 GPUs", "NVIDIA CUDA C++ Best Practices Guide, 'Pinned Memory'",
              "https://docs.nvidia.com/cuda/cuda-c-best-practices-guide/index.html#pinned-memory", "2026-11",
              "Also: batch many small transfers into one, since each transfer has a fixed overhead. Date: when "
              "checked."),
    Published("pin-on-the-fly", "tensor.pin_memory().to(device, non_blocking=True) can be up to twice as slow "
              "as a plain tensor.to(device): pinning is itself a host copy. Pin once (DataLoader pin_memory=True), "
              "then copy with non_blocking=True.", 2, 2, "x slower", "the tutorial's CUDA build machine (GPU not "
              "named)", "PyTorch tutorial 'A guide on good usage of non_blocking and pin_memory()'",
              "https://pytorch.org/tutorials/intermediate/pinmem_nonblock.html", "2024-11",
              "Also: a device-to-host copy with non_blocking=True must be synchronised before it is read."),
    Published("sync-per-kernel-v100", "Synchronising the host after every short kernel (about 2.9 us of GPU "
              "work) made each cost 9.6 us; queuing the kernels and synchronising once per step: 3.8 us "
              "(3.4 us with CUDA Graphs).", 2.5, 2.5, "x", "NVIDIA Tesla V100",
              "NVIDIA Technical Blog, 'Getting Started with CUDA Graphs' (A. Gray)",
              "https://developer.nvidia.com/blog/cuda-graphs/", "2019-09", "9.6 us / 3.8 us = 2.5x per kernel."),
    Published("data-stalls-coordl", "Across nine vision and audio models, training time was often dominated by "
              "data stalls (waiting for data to be fetched and preprocessed); removing them with the CoorDL loader "
              "cut training time by as much as 5x on one server compared with DALI.", 5, 5, "x (up to)",
              "GPU servers of a Microsoft production cluster", "Mohan, Phanishayee, Raniwala, Chidambaram, "
              "'Analyzing and Mitigating Data Stalls in DNN Training' (VLDB 2021)", "https://arxiv.org/abs/2007.06775",
              "2020-07", "Abstract: 'in many cases, DNN training time is dominated by data stall time'."),
    Published("hf-bytes-per-parameter", "A model trained in mixed precision with AdamW needs 18 bytes per parameter "
              "plus activations: 6 for weights (fp32 + fp16 copy), 8 for Adam's two states, 4 for fp32 gradients; "
              "fp32 training: 4 + 8 + 4 = 16.", 18, 18, " bytes/parameter", "any GPU (a count, not a measurement)",
              "Hugging Face Transformers docs, 'Model training anatomy'",
              "https://huggingface.co/docs/transformers/model_memory_anatomy", "2023"),
    Published("cuda-context-v100", "Loading a 1x1 tensor to the GPU (CUDA context and kernels) already occupied "
              "1,343 MB as nvidia-smi counts it, before any model.", 1.3, 1.3, " GB", "NVIDIA Tesla V100-SXM2 16GB",
              "Hugging Face Transformers docs, 'Model training anatomy'",
              "https://huggingface.co/docs/transformers/model_memory_anatomy", "2023",
              "'the kernels alone take up 1.3GB of GPU memory'; the size depends on GPU, driver and CUDA version."),
    Published("goyal-large-minibatch", "Linear scaling rule (multiply the learning rate by k when the minibatch "
              "grows k times) plus a gradual warm-up over the first 5 epochs: ResNet-50 trained on ImageNet with "
              "minibatch 8192 in one hour, matching small-minibatch accuracy.", 8192, 8192, " images/batch",
              "256 NVIDIA Tesla P100 GPUs", "Goyal et al., 'Accurate, Large Minibatch SGD: Training ImageNet in "
              "1 Hour'", "https://arxiv.org/abs/1706.02677", "2017-06",
              "Abstract: 'no loss of accuracy ... up to 8192 images'; about 90% scaling efficiency from 8 to 256 GPUs."),
    Published("lars-large-batch", "LARS (layer-wise adaptive rate scaling: one learning rate per layer from the "
              "ratio of weight and gradient norms) trained ResNet-50 with batch 32K and AlexNet with 8K without "
              "loss in accuracy, where linear scaling with warm-up diverged.", 32768, 32768, " images/batch",
              "ImageNet-1k, data-parallel GPU training (an accuracy result, not a speed figure)",
              "You, Gitman, Ginsburg, 'Large Batch Training of Convolutional Networks'",
              "https://arxiv.org/abs/1708.03888", "2017-08"),
    Published("resnet50-t4-batch-1-to-256", "ResNet-50 v1.5 inference throughput rises from 79 img/s at batch 1 "
              "to 1,198 img/s at batch 256 (652 at 8, 1,050 at 16, 1,128 at 32, 1,165 at 64, 1,190 at 128).",
              15.2, 15.2, "x", "NVIDIA T4, mixed precision (PyTorch 21.03 NGC container)",
              "NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch, inference performance",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021", "1198 / 79 img/s."),
    Published("resnet50-t4-batch-32-to-256", "Past batch 32 the same T4 curve is flat: batch 256 gives 1,198 "
              "img/s against 1,128 at batch 32, for 8x the activation memory.", 1.06, 1.06, "x",
              "NVIDIA T4, mixed precision (PyTorch 21.03 NGC container)",
              "NVIDIA DeepLearningExamples, ResNet-50 v1.5 for PyTorch, inference performance",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021", "1198 / 1128 img/s."),
    Published("amp-hf-v100", "Hugging Face Trainer with fp16=True: 18.64 vs 8.86 samples/s for fp32 when "
              "fine-tuning bert-large-uncased (batch 4, sequence 512) - 'almost twice as fast'.", 2.1, 2.1, "x",
              "NVIDIA Tesla V100-SXM2 16GB", "Hugging Face Transformers docs, 'Efficient Training on a Single GPU' "
              "(v4.21)", "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "18.64 / 8.86 samples/s."),
    Published("amp-hf-v100-memory", "The same fp16 run held 13,939 MB of GPU memory vs 14,949 MB in fp32 "
              "(nvidia-smi): mixed precision keeps fp32 weights besides 16-bit copies, so memory does not halve.",
              0.93, 0.93, "x memory", "NVIDIA Tesla V100-SXM2 16GB",
              "Hugging Face Transformers docs, 'Efficient Training on a Single GPU' (v4.21)",
              "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "13939 / 14949 MB, including about 1.3 GB of CUDA context and kernels."),
    Published("tensor-core-shapes", "Tensor cores are used most efficiently when matrix dimensions are multiples "
              "of 8 fp16 elements (16 bytes) - of 64 on an A100 (128 bytes).", 8, 64, " elements",
              "NVIDIA tensor-core GPUs (64: A100)",
              "Hugging Face perf guide, citing NVIDIA's 'Matrix Multiplication Background' guide",
              "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "NVIDIA's guide (https://docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication/) "
              "adds that before cuBLAS 11.0 / cuDNN 7.6.3 aligned sizes were required to use tensor cores at all."),
    Published("accumulation-hf-v100", "Gradient accumulation (batch 1 x 4 steps) instead of batch 4: 7.75 vs "
              "8.86 samples/s for bert-large-uncased - 'only slightly slower'.", 0.87, 0.87, "x",
              "NVIDIA Tesla V100-SXM2 16GB", "Hugging Face Transformers docs, 'Efficient Training on a Single GPU' "
              "(v4.21)", "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "7.75 / 8.86 samples/s (throughput ratio)."),
    Published("accumulation-hf-v100-memory", "The same accumulation run held 8,681 MB of GPU memory vs 14,949 MB "
              "at batch 4 (nvidia-smi).", 0.58, 0.58, "x memory", "NVIDIA Tesla V100-SXM2 16GB",
              "Hugging Face Transformers docs, 'Efficient Training on a Single GPU' (v4.21)",
              "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "8681 / 14949 MB, including about 1.3 GB of CUDA context and kernels."),
    Published("checkpointing-hf-v100", "Adding gradient checkpointing to the accumulation run: 5.99 vs 7.75 "
              "samples/s and 6,775 vs 8,681 MB; 'a general rule of thumb is that gradient checkpointing slows "
              "down training by about 20%'.", 0.77, 0.77, "x", "NVIDIA Tesla V100-SXM2 16GB",
              "Hugging Face Transformers docs, 'Efficient Training on a Single GPU' (v4.21)",
              "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "5.99 / 7.75 samples/s (throughput ratio); memory 6775 / 8681 MB = 0.78x."),
    Published("checkpointing-chen2016-memory", "Sublinear-memory training (gradient checkpointing, O(sqrt n) memory "
              "for an extra forward pass): a 1,000-layer residual network on ImageNet from 48 GB to 7 GB.",
              0.15, 0.15, "x memory", "GPU training, 1,000-layer ResNet on ImageNet",
              "Chen, Xu, Zhang, Guestrin, 'Training Deep Nets with Sublinear Memory Cost'",
              "https://arxiv.org/abs/1604.06174", "2016-04", "7 / 48 GB."),
    Published("checkpointing-chen2016-time", "The same memory saving cost 30 percent additional running time.",
              30, 30, "% more time", "GPU training, 1,000-layer ResNet on ImageNet",
              "Chen, Xu, Zhang, Guestrin, 'Training Deep Nets with Sublinear Memory Cost'",
              "https://arxiv.org/abs/1604.06174", "2016-04"),
    Published("combined-hf-v100", "Accumulation (batch 1 x 4) + gradient checkpointing + fp16 together: 10.09 "
              "samples/s in 7,275 MB, against 8.86 samples/s in 14,949 MB for plain fp32 at batch 4 - 'about half "
              "the GPU memory ... while also being slightly faster'.", 1.14, 1.14, "x", "NVIDIA Tesla V100-SXM2 16GB",
              "Hugging Face Transformers docs, 'Efficient Training on a Single GPU' (v4.21)",
              "https://huggingface.co/docs/transformers/v4.21.0/perf_train_gpu_one", "2022",
              "10.09 / 8.86 samples/s (throughput ratio); memory 7275 / 14949 MB = 0.49x."),
    # input pipelines (lesson 06)
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
    # multi-GPU scaling (lesson 07)
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
)}


@dataclass(frozen=True)
class GPUSpec:
    """Datasheet peaks of one GPU (dense, no sparsity). Rates are per second.

    ``aliases``: the exact names the card reports (``torch.cuda.get_device_name()`` and ``nvidia-smi``
    print the same string) and accepted short names; :func:`gpu_spec` matches them exactly.
    ``mig_slices``: compute slices of a card that supports Multi-Instance GPU (7 on A100 and H100).
    For a MIG slice (see :func:`gpu_spec`), ``parent`` is the whole card's name and ``mig_profile`` the
    profile (``"1g.5gb"``); its compute and memory figures are the slice's share, ``tdp_w`` the whole card's
    (power is not partitioned). ``memory_bytes`` is the memory as ``nvidia-smi`` shows it, what fitting estimates
    use; ``datasheet_memory_bytes`` the datasheet's larger figure where they differ (a T4: 16 GB of GDDR6, of
    which ECC, on by default, keeps 6.25%, so ``nvidia-smi`` shows 15360 MiB; CUDA C++ Best Practices Guide, "ECC").
    """

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
    mig_slices: int | None = None
    parent: str | None = None
    mig_profile: str | None = None
    datasheet_memory_bytes: int | None = None

    def ridge_point(self, dtype: str = "fp16") -> float:
        """FLOPs per byte above which a kernel is compute-bound on this GPU."""
        peak = self.fp32_flops if dtype == "fp32" else self.fp16_tensor_flops
        return peak / self.bandwidth_bytes_per_s


_GB = 10**9
_GIB, _MIB = 2**30, 2**20
_V100 = ("NVIDIA V100 datasheet", "https://www.nvidia.com/en-us/data-center/v100/")
_A100 = ("NVIDIA A100 datasheet", "https://www.nvidia.com/en-us/data-center/a100/")
_H100 = ("NVIDIA H100 datasheet", "https://www.nvidia.com/en-us/data-center/h100/")
# Aliases: the exact device names (torch.cuda.get_device_name() / nvidia-smi; drivers before R460 print the
# A100's without "NVIDIA ", which gpu_spec accepts for every card) and accepted short names.
GPU_SPECS: dict[str, GPUSpec] = {s.name: s for s in (
    GPUSpec("T4", "Turing", (7, 5), 15360 * _MIB, 320 * _GB, 8.1e12, 65e12, None, None, 70,
            "NVIDIA T4 datasheet", "https://www.nvidia.com/en-us/data-center/tesla-t4/", ("Tesla T4",),
            datasheet_memory_bytes=16 * _GIB),
    GPUSpec("V100 SXM2", "Volta", (7, 0), 16 * _GIB, 900 * _GB, 15.7e12, 125e12, None, None, 300, *_V100,
            ("Tesla V100-SXM2-16GB", "V100 SXM2 16GB")),
    GPUSpec("V100 SXM2 32GB", "Volta", (7, 0), 32 * _GIB, 900 * _GB, 15.7e12, 125e12, None, None, 300, *_V100,
            ("Tesla V100-SXM2-32GB",)),
    GPUSpec("V100 PCIe 16GB", "Volta", (7, 0), 16 * _GIB, 900 * _GB, 14e12, 112e12, None, None, 250, *_V100,
            ("Tesla V100-PCIE-16GB",)),
    GPUSpec("V100 PCIe 32GB", "Volta", (7, 0), 32 * _GIB, 900 * _GB, 14e12, 112e12, None, None, 250, *_V100,
            ("Tesla V100-PCIE-32GB",)),
    GPUSpec("L4", "Ada Lovelace", (8, 9), 24 * _GIB, 300 * _GB, 30.3e12, 121e12, 121e12, 60e12, 72,
            "NVIDIA L4 datasheet", "https://www.nvidia.com/en-us/data-center/l4/", ("NVIDIA L4",)),
    GPUSpec("A100 40GB SXM", "Ampere", (8, 0), 40 * _GIB, 1555 * _GB, 19.5e12, 312e12, 312e12, 156e12, 400, *_A100,
            ("NVIDIA A100-SXM4-40GB",), mig_slices=7),
    GPUSpec("A100 40GB PCIe", "Ampere", (8, 0), 40 * _GIB, 1555 * _GB, 19.5e12, 312e12, 312e12, 156e12, 250, *_A100,
            ("NVIDIA A100-PCIE-40GB",), mig_slices=7),
    GPUSpec("A100 80GB SXM", "Ampere", (8, 0), 80 * _GIB, 2039 * _GB, 19.5e12, 312e12, 312e12, 156e12, 400, *_A100,
            ("NVIDIA A100-SXM4-80GB",), mig_slices=7),
    GPUSpec("A100 80GB PCIe", "Ampere", (8, 0), 80 * _GIB, 1935 * _GB, 19.5e12, 312e12, 312e12, 156e12, 300, *_A100,
            ("NVIDIA A100 80GB PCIe",), mig_slices=7),
    GPUSpec("H100 SXM", "Hopper", (9, 0), 80 * _GIB, 3350 * _GB, 67e12, 989e12, 989e12, 494.5e12, 700, *_H100,
            ("NVIDIA H100 80GB HBM3",), mig_slices=7),
    GPUSpec("H100 PCIe", "Hopper", (9, 0), 80 * _GIB, 2000 * _GB, 51e12, 756.5e12, 756.5e12, 378e12, 350, *_H100,
            ("NVIDIA H100 PCIe",), mig_slices=7),
)}
MIG_GUIDE = "https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html"


def published(key: str) -> Published:
    """The :class:`Published` figure called ``key`` (see :func:`references` for all keys)."""
    try:
        return PUBLISHED[key]
    except KeyError:
        raise KeyError(f"no published figure key={key!r}; known: {', '.join(sorted(PUBLISHED))}") from None


def _norm(name: str) -> str:
    """Case, spacing and a leading "NVIDIA " do not matter; everything else must match exactly."""
    n = " ".join(name.split()).casefold()
    return n[len("nvidia "):] if n.startswith("nvidia ") else n


def _lookup() -> dict[str, GPUSpec]:
    table: dict[str, GPUSpec] = {}
    for spec in GPU_SPECS.values():
        for key in (spec.name, *spec.aliases):
            if table.setdefault(_norm(key), spec) is not spec:   # pragma: no cover - a data error
                raise RuntimeError(f"GPU name {key!r} is given to both {table[_norm(key)].name} and {spec.name}")
    return table


_MIG = re.compile(r"^(?P<parent>.+?)\s+MIG\s+(?P<g>\d+)g\.(?P<mem>\d+)gb(?P<ext>(?:[+-][a-z.]+)*)$", re.IGNORECASE)


def _unknown(name: str) -> KeyError:
    words = {w for w in re.split(r"[\s-]+", _norm(name)) if len(w) >= 2} - {"tesla", "pcie", "sxm", "gb"}
    near = [s.name for s in GPU_SPECS.values()
            if words & {w for k in (s.name, *s.aliases) for w in re.split(r"[\s-]+", _norm(k))}]
    hint = f" (similar: {', '.join(near)})" if near else ""
    return KeyError(f"no datasheet figures for {name!r}{hint}; known GPUs: "
                    + "; ".join(f"{s.name} ({', '.join(s.aliases)})" if s.aliases else s.name
                                for s in GPU_SPECS.values()))


def _mig_slice(parent: GPUSpec, g: int, mem_gb: int, profile: str, name: str) -> GPUSpec:
    total_gb = round(parent.memory_bytes / _GIB)
    if parent.mig_slices is None:
        raise KeyError(f"{name!r}: the {parent.name} does not support MIG")
    if not 1 <= g <= parent.mig_slices or not 1 <= mem_gb <= total_gb:
        raise KeyError(f"{name!r}: {profile} is not a MIG profile of the {parent.name} "
                       f"({parent.mig_slices} compute slices, {total_gb} GB); see {MIG_GUIDE}")
    compute, memory = g / parent.mig_slices, mem_gb / total_gb
    scale = lambda v: None if v is None else v * compute   # noqa: E731
    return replace(parent, name=f"{parent.name} MIG {profile}", memory_bytes=int(parent.memory_bytes * memory),
                   bandwidth_bytes_per_s=parent.bandwidth_bytes_per_s * memory, fp32_flops=parent.fp32_flops * compute,
                   fp16_tensor_flops=parent.fp16_tensor_flops * compute, bf16_tensor_flops=scale(parent.bf16_tensor_flops),
                   tf32_tensor_flops=scale(parent.tf32_tensor_flops),
                   source=f"{parent.source}, scaled to the MIG slice: compute {g}/{parent.mig_slices}, memory and "
                          f"bandwidth {mem_gb}/{total_gb} (NVIDIA MIG User Guide, {MIG_GUIDE})",
                   aliases=(), mig_slices=None, parent=parent.name, mig_profile=profile)


def gpu_spec(name: str) -> GPUSpec:
    """Datasheet figures for the GPU called ``name``: the exact string ``torch.cuda.get_device_name()`` or
    ``nvidia-smi`` prints (``"Tesla T4"``, ``"NVIDIA A100-SXM4-40GB"``, ``"NVIDIA A100 80GB PCIe"``,
    ``"NVIDIA H100 80GB HBM3"``) or a short name from :func:`gpu_specs` (``"T4"``, ``"A100 80GB SXM"``).
    Case, spacing and a leading "NVIDIA " do not matter; nothing else is guessed: an unknown or partial name
    (``"A100"``, ``"NVIDIA A10G"``) raises ``KeyError`` listing the known cards, rather than returning figures
    of a different card.

    A MIG instance (``"NVIDIA A100-SXM4-40GB MIG 1g.5gb"``) gets its slice of the card, labelled as such:
    compute peaks times g/7 (its share of the compute slices), memory and bandwidth times its share of the
    card's memory (5/40 GB), as in NVIDIA's MIG profile tables; ``parent`` names the whole card. A learner on a
    slice then compares their measurements with what the slice can do, not with the whole card.

    Example:
        >>> gpu_spec("NVIDIA A100 80GB PCIe").name
        'A100 80GB PCIe'
        >>> s = gpu_spec("NVIDIA A100-SXM4-40GB MIG 1g.5gb")
        >>> s.parent, s.memory_bytes // 2**30, round(s.fp16_tensor_flops / 1e12, 1)
        ('A100 40GB SXM', 5, 44.6)
    """
    if not isinstance(name, str) or not name.strip():
        raise (TypeError if not isinstance(name, str) else ValueError)(
            f"name must be a GPU name such as 'T4' or torch.cuda.get_device_name(), got {name!r}")
    table = _lookup()
    spec = table.get(_norm(name))
    if spec is not None:
        return spec
    m = _MIG.match(" ".join(name.split()))
    if m:
        parent = table.get(_norm(m["parent"]))
        if parent is None:
            raise _unknown(m["parent"])
        profile = f"{int(m['g'])}g.{int(m['mem'])}gb{m['ext'].lower()}"
        return _mig_slice(parent, int(m["g"]), int(m["mem"]), profile, name)
    raise _unknown(name)


def references() -> Any:
    """All published figures as a pandas DataFrame (key, figure, hardware, source, date, url)."""
    import pandas as pd

    return pd.DataFrame([{"key": p.key, "figure": p.figure, "hardware": p.hardware, "source": p.source,
                          "date": p.date, "claim": p.claim, "url": p.url} for p in PUBLISHED.values()])


@dataclass(frozen=True, repr=False)
class GPUSpecTable(TableView):
    """Datasheet peaks of several GPUs side by side (immutable), one unit per column; ``to_dataframe()``
    gives the same numbers for pandas and ``spec(name)`` one row's :class:`GPUSpec`.

    Example:
        >>> t = gpu_specs()
        >>> print(repr(t).splitlines()[1])
        gpu  architecture  fp32 (TFLOP/s)  fp16 tensor (TFLOP/s)  bandwidth (GB/s)  memory (GiB)  TDP (W)  source
        >>> t.spec("T4").tdp_w, float(t.to_dataframe().set_index("gpu").loc["T4", "bandwidth GB/s"])
        (70, 320.0)
    """

    specs: tuple[GPUSpec, ...]
    title: str = "Datasheet peaks (dense, no sparsity)"

    def __len__(self) -> int:
        return len(self.specs)

    def spec(self, name: str) -> GPUSpec:
        """The row called ``name`` (a short name as in the ``gpu`` column, or any name :func:`gpu_spec` accepts)."""
        for s in self.specs:
            if s.name == name:
                return s
        return gpu_spec(name)

    def to_dataframe(self) -> Any:
        """One row per GPU: gpu, architecture, fp32 and fp16 tensor TFLOP/s, bandwidth GB/s, memory GiB, TDP W,
        source."""
        import pandas as pd

        rows = []
        for s in self.specs:
            d = asdict(s)
            rows.append({"gpu": s.name, "architecture": s.architecture,
                         "fp32 TFLOP/s": s.fp32_flops / 1e12, "fp16 tensor TFLOP/s": s.fp16_tensor_flops / 1e12,
                         "bandwidth GB/s": s.bandwidth_bytes_per_s / 1e9, "memory GiB": s.memory_bytes / _GIB,
                         "TDP W": s.tdp_w, "source": d["source"]})
        return pd.DataFrame(rows)

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        header = ["gpu", "architecture", "fp32 (TFLOP/s)", "fp16 tensor (TFLOP/s)", "bandwidth (GB/s)",
                  "memory (GiB)", "TDP (W)", "source"]
        rows = [[s.name, s.architecture, f"{s.fp32_flops / 1e12:.4g}", f"{s.fp16_tensor_flops / 1e12:.4g}",
                 f"{s.bandwidth_bytes_per_s / 1e9:.0f}", f"{s.memory_bytes / _GIB:.4g}", f"{s.tdp_w:.0f}", s.source]
                for s in self.specs]
        return header, rows, "vendor datasheets; tensor peaks dense (no sparsity); GB/s = 10^9 bytes/s, GiB = 2^30 bytes"


def gpu_specs() -> GPUSpecTable:
    """Datasheet peaks of the GPUs the course compares with, as a :class:`GPUSpecTable` (TFLOP/s, GB/s, GiB;
    ``.to_dataframe()`` for pandas).

    Example:
        >>> len(gpu_specs()) >= 12, "H100 SXM" in repr(gpu_specs()), "<table" in gpu_specs()._repr_html_()
        (True, True, True)
    """
    return GPUSpecTable(tuple(GPU_SPECS.values()))
