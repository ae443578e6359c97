"""Published figures on training and running transformers: model FLOPs utilisation at scale, the GPT-2 (124M)
reproductions, attention kernels and the KV cache."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
    Published("llama3-mfu", "Model FLOPs utilisation of Llama 3 405B pre-training in bf16: 43% on 8,192 H100s (430 "
              "TFLOP/s per GPU), 41% on 16,384 (400), 38% on 16,384 with 131K-token sequences (380, context "
              "parallelism).", 0.38, 0.43, "fraction", "8,192-16,384 NVIDIA H100 80GB (700 W), 4D parallelism",
              "Llama Team, AI @ Meta, 'The Llama 3 Herd of Models', Table 4", "https://arxiv.org/abs/2407.21783",
              "2024-07", "Each GPU's peak taken as 989 TFLOP/s (dense bf16); the whole job's time counted, "
              "communication and pipeline bubbles included."),
    Published("nanogpt-gpt2-124m", "nanoGPT reproduces GPT-2 (124M) on OpenWebText (validation loss about 2.85) on "
              "one node of 8 A100 40GB in about 4 days.", 4, 4, " days", "8 x NVIDIA A100 40GB (one node)",
              "nanoGPT README (A. Karpathy)", "https://github.com/karpathy/nanoGPT", "2023-01",
              "PyTorch with torch.compile, bf16 autocast, flash attention through scaled_dot_product_attention; "
              "300B tokens."),
    Published("llmc-gpt2-124m-h100-mfu", "llm.c's GPT-2 (124M) replication trains on 10B FineWeb tokens in 45 minutes "
              "on 8 H100s: about 463,000 tokens/s per GPU, at 6N + 12LdT = 0.86 GFLOP per token about 398 TFLOP/s, "
              "40% of an H100's 989 TFLOP/s dense bf16 peak (derived).", 0.40, 0.40, "fraction", "8 x NVIDIA H100",
              "KellerJordan/modded-nanogpt README (llm.c's baseline: 45 minutes, 10B tokens, 8 H100)",
              "https://github.com/KellerJordan/modded-nanogpt", "2026-06",
              "Derived here, not published as an MFU: 1e10 tokens / 2,700 s / 8 GPUs, N = 124M with the 50,257-token "
              "embedding, L = 12, d = 768, T = 1024; llm.c in C/CUDA with cuBLAS and cuDNN's flash attention."),
    Published("modded-nanogpt-speedrun", "The NanoGPT speedrun: the 3.28 FineWeb validation loss that llm.c's GPT-2 "
              "(124M) replication reached in 45 minutes on 8 H100s (10B tokens) is reached in under 90 seconds "
              "(under 400M tokens).", 30, 30, "x", "8 x NVIDIA H100",
              "KellerJordan/modded-nanogpt README", "https://github.com/KellerJordan/modded-nanogpt", "2026-06",
              "45 min / 90 s = 30x, most of it from the algorithm (Muon, architecture changes, fewer tokens), not "
              "from kernels: a record of the whole recipe, not of one lever."),
)
