"""Generation speed of the course's GPT: tokens per second with and without a KV cache, the latency of one new token
as the batch grows (throughput bought with latency), the cache's bytes measured against the count
:meth:`gpulab.transformer.TransformerShape.kv_cache_bytes` gives, and the decode roofline: a cached step reads every
weight and everything the cache holds, so tokens/s <= batch x bandwidth / (weight bytes + KV bytes read per step).

Example:
    >>> from gpulab.course.transformers.generation import generation_speed
    >>> from gpulab.course.transformers.gpt import gpt
    >>> from gpulab.transformer import TransformerShape
    >>> model = gpt(TransformerShape(layers=2, d_model=32, heads=2, seq_len=48, vocab=256)).eval()
    >>> g = generation_speed(model, prompt_len=8, new_tokens=8, batches=(1, 2), repeats=1)
    >>> [r.batch for r in g.rows], g.rows[0].cache_bytes == g.rows[0].counted_bytes
    ([1, 2], True)
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..._check import device_arg, whole
from ..._format import TableView, fmt_bytes, fmt_number, fmt_rate, fmt_seconds
from .gpt import generate
from .checks import model_arg

__all__ = ["GenerationRow", "GenerationSpeed", "generation_speed"]


@dataclass(frozen=True)
class GenerationRow:
    """One batch size: new tokens per second with and without the cache (every sequence of the batch counted), the
    time per generation step with the cache (the latency of one token), and the cache's bytes, measured and counted."""

    batch: int
    cached_tokens_per_s: float
    uncached_tokens_per_s: float
    step_latency_s: float
    cache_bytes: int
    counted_bytes: int
    bytes_per_step: int = 0
    roofline_tokens_per_s: float | None = None

    @property
    def roofline_share(self) -> float | None:
        """The cached run's tokens/s over the decode roofline's (at most 1: a ceiling beaten was measured too low)."""
        if not self.roofline_tokens_per_s:
            return None
        return min(1.0, self.cached_tokens_per_s / self.roofline_tokens_per_s)


@dataclass(frozen=True, repr=False)
class GenerationSpeed(TableView):
    """Generation over batch sizes (immutable)."""

    rows: tuple[GenerationRow, ...]
    prompt_len: int
    new_tokens: int
    device: str
    title: str = "Generation: tokens/s with and without a KV cache"
    bandwidth_note: str = ""

    def row(self, batch: int) -> GenerationRow:
        for r in self.rows:
            if r.batch == batch:
                return r
        raise KeyError(f"no batch {batch}; batches: {[r.batch for r in self.rows]}")

    def cache_speedup(self, batch: int) -> float:
        r = self.row(batch)
        return r.cached_tokens_per_s / r.uncached_tokens_per_s

    def to_dataframe(self) -> Any:
        import pandas as pd

        return pd.DataFrame([vars(r) for r in self.rows]).set_index("batch")

    def _columns(self) -> tuple[list[str], list[list[str]], str]:
        roof = any(r.roofline_tokens_per_s for r in self.rows)
        header = ["batch", "tokens/s, cache", "tokens/s, no cache", "cache speedup", "latency per token",
                  "cache memory", "counted"] + (["read per step", "decode roofline", "share"] if roof else [])
        rows = [[str(r.batch), fmt_number(r.cached_tokens_per_s), fmt_number(r.uncached_tokens_per_s),
                 f"{r.cached_tokens_per_s / r.uncached_tokens_per_s:.2f}x", fmt_seconds(r.step_latency_s),
                 fmt_bytes(r.cache_bytes), fmt_bytes(r.counted_bytes)]
                + ([fmt_bytes(r.bytes_per_step), f"{fmt_number(r.roofline_tokens_per_s)} tokens/s",
                    f"{r.roofline_share:.0%}"] if roof else []) for r in self.rows]
        note = (f"greedy decoding of {self.new_tokens} tokens after a {self.prompt_len}-token prompt on {self.device}, "
                "best of the repeats; tokens/s counts every sequence of the batch; latency per token = the cached run's time / "
                "new tokens (the prompt's pass included); counted = 2 x layers x batch x "
                "tokens x d_model x bytes per value")
        if roof:
            note += ("; read per step = every weight once + the cache's mean length over the steps; decode roofline = "
                     f"batch x bandwidth / read per step ({self.bandwidth_note})")
        return header, rows, note


def _synced(device: Any) -> None:
    from ...timing import synchronize

    synchronize(device)


def decode_bytes_per_step(model: Any, batch: int, prompt_len: int, new_tokens: int, bytes_per_value: int) -> int:
    """Bytes one cached decoding step reads at the least: every weight once (the tied output layer counted once) and
    the K and V of every token the cache holds, at its mean length over the steps."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    held = prompt_len + (new_tokens - 1) / 2                 # from prompt_len to prompt_len + new_tokens - 1 tokens
    per_token = model.shape.kv_cache_bytes(batch, 1, bytes_per_value)
    return int(weights + held * per_token)


def generation_speed(model: Any, *, prompt_len: int = 32, new_tokens: int = 64, batches: Sequence[int] = (1, 4, 16),
                     repeats: int = 3, device: Any = None, limits: Any = None) -> GenerationSpeed:
    """Time greedy generation with and without the KV cache at each batch size (best of ``repeats``), and measure
    the bytes the cache holds at the end against the count. With ``limits`` (a :class:`gpulab.MachineLimits` of the
    model's device) each row gets the decode roofline: batch x the bandwidth of the level the bytes fit in
    (``limits.bandwidth_for``) / the bytes a step reads (:func:`decode_bytes_per_step`)."""
    import torch

    model_arg("model", model)
    prompt_len, new_tokens, repeats = whole("prompt_len", prompt_len), whole("new_tokens", new_tokens), whole(
        "repeats", repeats)
    if isinstance(batches, (str, bytes)) or not isinstance(batches, Sequence):
        raise TypeError(f"batches must be a list of batch sizes, e.g. (1, 4, 16), got {batches!r}")
    if not batches:
        raise ValueError("batches is empty: pass the batch sizes to time, e.g. (1, 4, 16)")
    sizes = [whole("batches", b) for b in batches]
    shape = model.shape
    if prompt_len + new_tokens > shape.seq_len:
        raise ValueError(f"prompt_len ({prompt_len}) + new_tokens ({new_tokens}) exceed the model's context of "
                         f"{shape.seq_len}: pass at most {shape.seq_len} tokens in all")
    where = next(model.parameters()).device
    if device_arg("device", device) is not None and torch.device(device) != where and not (
            torch.device(device).type == where.type and torch.device(device).index is None):
        raise ValueError(f"device={device!r} but the model is on {where}: move the model (model.to(...)) or leave "
                         "device=None")
    dev = where
    from ...limits import MachineLimits

    if limits is not None and (not isinstance(limits, MachineLimits) or limits.device.split(":")[0] != dev.type):
        raise TypeError(f"limits must be the gl.machine_limits() of the model's device ({dev}), got {limits!r:.80}")
    model.eval()
    gen = torch.Generator().manual_seed(0)        # prompts drawn apart from the caller's global generator
    rows = []
    for b in sizes:
        prompt = torch.randint(0, shape.vocab, (b, prompt_len), generator=gen).to(dev)
        best = {}
        for cache in (True, False):
            times = []
            for _ in range(repeats):
                _synced(dev)
                t0 = time.perf_counter()
                out, caches = generate(model, prompt, new_tokens, kv_cache=cache)
                _synced(dev)
                times.append(time.perf_counter() - t0)
            best[cache] = (min(times), caches)
        held = sum(t.numel() * t.element_size() for layer in best[True][1] for t in layer)
        per_value = next(t.element_size() for layer in best[True][1] for t in layer)
        counted = shape.kv_cache_bytes(b, prompt_len + new_tokens - 1, per_value)
        read = decode_bytes_per_step(model, b, prompt_len, new_tokens, per_value)
        bound = None if limits is None else b * limits.bandwidth_for(read) / read
        rows.append(GenerationRow(b, b * new_tokens / best[True][0], b * new_tokens / best[False][0],
                                  best[True][0] / new_tokens, held, counted, read, bound))
    note = ""
    if limits is not None:
        bws = sorted({limits.bandwidth_for(r.bytes_per_step) for r in rows})
        note = ("the measured copy bandwidth of the memory level the step's bytes fit in: "
                + ", ".join(fmt_rate(bw) for bw in bws))
    return GenerationSpeed(tuple(rows), prompt_len, new_tokens, str(dev), bandwidth_note=note)
