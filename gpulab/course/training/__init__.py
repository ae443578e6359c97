"""The training step, made fast and made to fit: lessons 02 (moving data), 03 (batching), 04 (mixed precision), 05 (gradient accumulation) and 09 (out of memory).

Copies and CUDA streams (``bandwidth``, ``streams``); batch sizes, their figures and the watched loops
(``batching``, ``batch_figures``, ``loop_watch``) and the gradient noise scale (``noise_scale``); 16-bit formats and
the convolution levers (``precision``, ``conv_levers``); accumulation, the optimizer step and its state
(``accumulation``, ``optimizer_step``, ``optimizer_memory``); the memory challenge, the allocator's settings and the
fix ladder (``memory_fit``, ``allocator``, ``oom_fixes``).
"""
