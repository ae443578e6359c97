"""Transformers: lesson 13 (a GPT trained and served fast).

The course's small GPT and its text (``gpt``) with its argument checks (``checks``); training one recipe (``train``),
the ablation over the levers (``lever_ablation``) and the measured tokens/s challenge (``challenge``); the held-out
text and the unigram floor a trained GPT must clear (``heldout``); MFU against the datasheet (``mfu``); each lever's
gain bounded by Amdahl's law from a profile of the plain step (``levers``); generation with and without a KV cache
against the decode roofline (``generation``); attention written out against SDPA (``attention_sweep``), activation
memory counted then measured (``activations``) and FlashAttention-2 in Triton (``flash_attention``, its kernel in
``_flash_kernel``).
"""
