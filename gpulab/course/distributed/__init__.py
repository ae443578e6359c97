"""Several GPUs: lesson 07 (multi-GPU).

The scaling sweep's worker counts, noise margins, checks and the model state per GPU of DDP and ZeRO
(``data_parallel``), accumulation under DDP with ``no_sync()`` (``no_sync``), the alpha-beta model fitted to an
all-reduce sweep (``alpha_beta``) and the all-reduce's overlap with compute read from a trace (``comm_overlap``).
The scripts torchrun launches live in ``gpulab.course.scripts``.
"""
