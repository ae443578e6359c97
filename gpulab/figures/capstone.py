"""Published figures the capstone cites: MFU and FLOP conventions, end-to-end recipes (lesson 12)."""
from __future__ import annotations

from .published import Published

FIGURES: tuple[Published, ...] = (
    Published("training-flops-6n", "Training compute of a dense network is about 6 FLOPs per parameter per sample "
              "(or token): 2N for the forward pass, about twice that for the backward pass (C = 6N per token).",
              6, 6, " FLOPs per parameter", "dense transformers (any hardware)",
              "Kaplan et al., 'Scaling Laws for Neural Language Models', section 2.1", "https://arxiv.org/abs/2001.08361",
              "2020-01", "The rule behind most published MFU figures; it assumes every layer computes the gradient of "
              "its input, which a network's first layer does not need to."),
    Published("airbench-cifar10-a100", "airbench94 trains CIFAR-10 to 94.01% mean accuracy in 3.83 s on one NVIDIA "
              "A100 (3.09 s compiled; 0.36 PFLOPs). Its repository sets the standard ResNet-18 training that most "
              "CIFAR-10 studies use beside it: 96.0% in about 7 minutes (32.3 PFLOPs), where airbench96 reaches 96.03% "
              "in 34.7 s, about 12x faster to the same accuracy.", 12.1, 12.1, "x",
              "one NVIDIA A100 (400 W), torch 2.4.1", "Keller Jordan, cifar10-airbench README (the methods: '94% on "
              "CIFAR-10 in 3.29 Seconds on a Single GPU', arXiv 2404.00498)",
              "https://github.com/KellerJordan/cifar10-airbench", "2024",
              "420 s (7 minutes, as the README rounds it) / 34.7 s. A loop-speedup anchor: another model and other "
              "methods, the same goal (the same accuracy in less time on one GPU)."),
    Published("adam-sqrt-scaling", "For adaptive optimizers (Adam, RMSprop) the principled rule for a batch k times "
              "larger is to scale the learning rate by the square root of k, not by k (the linear rule, derived for "
              "SGD), found from stochastic differential equation approximations and checked on vision and language "
              "tasks.", 0.5, 0.5, " (exponent of the batch ratio)", "any hardware (an optimization result)",
              "Malladi, Lyu, Panigrahi, Arora, 'On the SDEs and Scaling Rules for Adaptive Gradient Algorithms' "
              "(NeurIPS 2022)", "https://arxiv.org/abs/2205.10287", "2022-05"),
)
