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
)
