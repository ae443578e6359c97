"""The capstone: lesson 12 (a training loop made fast, one measured change at a time).

MNIST as tensors (``digits``) and its data paths (``data``); the seed loop as a ``Recipe`` of switches and one run
of it (``recipe``, ``recipe_run``); the ablation and its table (``ablation``, ``ablation_table``), driven per
framework (``torch_ablation``, ``keras_ablation``); fp32 against 16-bit in time, energy and cost (``energy``); MFU
two ways (``mfu``); the final recipe against its own matmuls, the measured challenge and the results card
(``report``).
"""
