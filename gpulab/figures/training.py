"""Published figures on single-GPU training: mixed precision, batching, memory, accumulation, checkpointing."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
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
    Published("amp-dle-resnet50-a100", "NVIDIA DeepLearningExamples, ResNet-50 v1.5 training in PyTorch on one "
              "A100 80GB: 938 img/s in TF32 vs 2,470 img/s with mixed precision (AMP).", 2.63, 2.63, "x",
              "NVIDIA A100 80GB (DGX A100, 1 GPU)", "NVIDIA DeepLearningExamples, ResNet50 v1.5 for PyTorch, README "
              "'Training performance: NVIDIA DGX A100'",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021-03", "pytorch-21.03 NGC container. The baseline is TF32, not full fp32: on an A100 PyTorch's "
              "convolutions use TF32 by default."),
    Published("amp-dle-resnet50-v100", "NVIDIA DeepLearningExamples, ResNet-50 v1.5 training in PyTorch on one "
              "V100 16GB: 367 img/s in fp32 vs 1,200 img/s with mixed precision (AMP).", 3.26, 3.26, "x",
              "NVIDIA V100 16GB (DGX-1, 1 GPU)", "NVIDIA DeepLearningExamples, ResNet50 v1.5 for PyTorch, README "
              "'Training performance: NVIDIA DGX-1 16GB'",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021-03", "pytorch-21.03 NGC container; 3.24x (356 vs 1,156 img/s) on a V100 32GB."),
    Published("amp-dle-resnet50-t4-inference", "NVIDIA DeepLearningExamples, ResNet-50 v1.5 in PyTorch on a T4: "
              "inference at batch 256, 415 img/s in fp32 vs 1,198 img/s with mixed precision. The README gives no "
              "T4 training table.", 2.89, 2.89, "x", "NVIDIA T4 (inference, batch 256)",
              "NVIDIA DeepLearningExamples, ResNet50 v1.5 for PyTorch, README 'Inference performance: NVIDIA T4'",
              "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/Classification/ConvNets/resnet50v1.5",
              "2021-03", "Inference, not training: forward passes only, no backward or optimizer step."),
    Published("optimizer-8bit-adam-memory", "8-bit Adam (block-wise quantized optimizer states, bitsandbytes) keeps "
              "32-bit Adam's results with 75% less optimizer-state memory: its two states take 1 byte per parameter "
              "each instead of 4.", 0.25, 0.25, "x memory", "GPU training (language models up to 1.5B parameters, "
              "GLUE fine-tuning, ImageNet)",
              "Dettmers, Lewis, Shleifer, Zettlemoyer, '8-bit Optimizers via Block-wise Quantization' (ICLR 2022); "
              "bitsandbytes documentation", "https://arxiv.org/abs/2110.02861", "2021-10",
              "Optimizer state only; weights, gradients and activations are unchanged. bitsandbytes keeps tensors "
              "under 4,096 elements in 32 bits."),
)
