"""Training scripts that ``torchrun`` runs (shipped with the wheel, so ``pip install gpulab`` has them).

Each is a module with a ``main(argv)`` and importable helpers, run as
``python -m torch.distributed.run --standalone --nproc-per-node 2 -m gpulab.course.scripts.ddp_train`` or from a
notebook with ``gl.launch("gpulab.course.scripts.ddp_train", nproc=2)``.
"""
