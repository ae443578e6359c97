"""A stand-in for ``nvidia.dali.fn`` with the call shape the course's DALI graph uses: every operator call is
recorded, so a test can read what a GPU pipeline would have been asked to do without DALI's GPU build."""
from __future__ import annotations

import types


class Node:
    """An operator's output; ``.gpu()`` is recorded (a CPU result moved to the GPU)."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def gpu(self):
        self.log.append(("gpu", self.name))
        return Node(self.name + ".gpu()", self.log)


def recording_fn():
    """``(fn, types, log)``: the fake ``fn`` and ``types`` modules and the list of ``(operator, kwargs)`` calls."""
    log: list = []

    def op(name):
        def call(*args, **kwargs):
            log.append((name, kwargs))
            return (Node("jpegs", log), Node("labels", log)) if name == "readers.file" else Node(name, log)
        return call

    fn = types.SimpleNamespace(readers=types.SimpleNamespace(file=op("readers.file")),
                               decoders=types.SimpleNamespace(image=op("decoders.image")),
                               random=types.SimpleNamespace(coin_flip=op("random.coin_flip")),
                               random_resized_crop=op("random_resized_crop"), resize=op("resize"),
                               crop_mirror_normalize=op("crop_mirror_normalize"))
    dali_types = types.SimpleNamespace(RGB="RGB", GRAY="GRAY", FLOAT="FLOAT")
    return fn, dali_types, log
