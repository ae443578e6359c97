"""Where each technique the toolkit's advice names is documented: a verdict, a diagnosis or a fix points at the
technique's own documentation, never at a lesson (the course adds its lessons itself).

Example:
    >>> from gpulab._links import see
    >>> see("amp")
    'see https://docs.pytorch.org/docs/stable/amp.html'
"""
from __future__ import annotations

DOCS = {
    "amp": "https://docs.pytorch.org/docs/stable/amp.html",
    "compile": "https://docs.pytorch.org/docs/stable/generated/torch.compile.html",
    "cuda-graphs": "https://docs.pytorch.org/docs/stable/notes/cuda.html#cuda-graphs",
    "checkpoint": "https://docs.pytorch.org/docs/stable/checkpoint.html",
    "data-loading": "https://docs.pytorch.org/docs/stable/data.html#multi-process-data-loading",
    "dali": "https://docs.nvidia.com/deeplearning/dali/user-guide/docs/",
    "fsdp": "https://docs.pytorch.org/docs/stable/distributed.fsdp.fully_shard.html",
    "memory": "https://docs.pytorch.org/docs/stable/notes/cuda.html#memory-management",
    "tuning": "https://docs.pytorch.org/tutorials/recipes/recipes/tuning_guide.html",
    "amdahl": "https://en.wikipedia.org/wiki/Amdahl%27s_law",
    "accumulation": "https://huggingface.co/docs/transformers/perf_train_gpu_one#gradient-accumulation",
    "tf32": "https://docs.pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices",
    "install": "https://pytorch.org/get-started/locally/",
}


def see(topic: str) -> str:
    """``"see <url>"`` for ``topic``, a key of :data:`DOCS`."""
    if topic not in DOCS:
        raise ValueError(f"topic {topic!r} has no documentation link: choose from {sorted(DOCS)}")
    return f"see {DOCS[topic]}"
