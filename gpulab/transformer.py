"""A decoder-only transformer's arithmetic: parameters, training FLOPs per token, MFU, the activations kept for backward
and the KV cache's bytes.

The shape is GPT-2's (nanoGPT's ``GPT``): token and learned position embeddings, ``layers`` pre-norm blocks of
causal self-attention and a 4x MLP with biases, a final LayerNorm, the output layer tied to the token embedding.
FLOPs per token follow the convention nanoGPT's ``estimate_mfu`` and the PaLM paper (appendix B) use:
``6 N + 12 L d T``: 6 per parameter per token (2 forward, 4 backward; Kaplan et al. 2020) over ``N``, the
parameters without the position embedding, plus the attention's two ``T x T`` matmuls (QK^T and AV) forward and
backward, which no parameter counts.

Example:
    >>> gpt2 = TransformerShape(layers=12, d_model=768, heads=12, seq_len=1024, vocab=50257)
    >>> gpt2.params, gpt2.params_for_flops
    (124439808, 123653376)
    >>> round(gpt2.flops_per_token() / 1e6, 1)      # nanoGPT's estimate for GPT-2 small
    855.2
    >>> gpt2.kv_cache_bytes(batch=1, tokens=1024, bytes_per_value=2) / 2**20    # fp16 K and V, all layers
    36.0
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from ._check import whole
from ._format import fmt_bytes, fmt_number, html_table, text_table

__all__ = ["TransformerShape", "mfu"]


@dataclass(frozen=True)
class TransformerShape:
    """A GPT-2-shaped decoder (see the module): ``layers`` blocks of width ``d_model`` with ``heads`` heads, a
    context of ``seq_len`` tokens and a ``vocab``-token embedding; ``mlp_ratio`` is the MLP's width over
    ``d_model``. ``kv_heads`` (default ``heads``) is fewer for grouped-query attention: the KV cache shrinks by
    ``heads / kv_heads`` (the parameter count here stays GPT-2's, with full K and V projections)."""

    layers: int
    d_model: int
    heads: int
    seq_len: int
    vocab: int
    mlp_ratio: int = 4
    kv_heads: int | None = None

    def __post_init__(self) -> None:
        for name in ("layers", "d_model", "heads", "seq_len", "vocab", "mlp_ratio"):
            whole(name, getattr(self, name))
        if self.d_model % self.heads:
            raise ValueError(f"d_model={self.d_model} must be a multiple of heads={self.heads} (each head gets "
                             f"d_model / heads dimensions): pick heads among "
                             f"{[h for h in range(1, 65) if self.d_model % h == 0]}")
        if self.kv_heads is not None:
            whole("kv_heads", self.kv_heads)
            if self.heads % self.kv_heads:
                raise ValueError(f"kv_heads={self.kv_heads} must divide heads={self.heads} (grouped-query attention "
                                 "shares each K/V head among a whole group of query heads)")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def block_params(self) -> int:
        """One block: two LayerNorms (2d each), QKV (d x 3d + 3d), the attention output (d x d + d) and the MLP
        (d x rd + rd, rd x d + d): ``(4 + 2r) d^2 + (9 + r) d``, 12 d^2 + 13 d for r = 4."""
        d, r = self.d_model, self.mlp_ratio
        return (4 + 2 * r) * d * d + (9 + r) * d

    @property
    def params(self) -> int:
        """Every parameter: token and position embeddings, the blocks and the final LayerNorm (the output layer is
        the token embedding, tied)."""
        d = self.d_model
        return self.vocab * d + self.seq_len * d + self.layers * self.block_params + 2 * d

    @property
    def params_for_flops(self) -> int:
        """``N`` of ``6 N``: the parameters less the position embedding (a lookup, no matmul), as nanoGPT counts
        them; the token embedding stays, because the tied output layer multiplies by it."""
        return self.params - self.seq_len * self.d_model

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token (forward and backward) at a context of ``seq_len`` (default the model's):
        ``6 N + 12 L d T``."""
        t = self.seq_len if seq_len is None else whole("seq_len", seq_len)
        return 6.0 * self.params_for_flops + 12.0 * self.layers * self.d_model * t

    def attention_share(self, seq_len: int | None = None) -> float:
        """The share of the training FLOPs in the attention's T x T matmuls (grows with the context)."""
        t = self.seq_len if seq_len is None else whole("seq_len", seq_len)
        return 12.0 * self.layers * self.d_model * t / self.flops_per_token(t)

    def kv_cache_bytes(self, batch: int = 1, tokens: int | None = None, bytes_per_value: int = 2) -> int:
        """Bytes a KV cache holds for ``batch`` sequences of ``tokens`` tokens (default ``seq_len``):
        K and V, every layer, ``kv_heads x head_dim`` values per token each, ``bytes_per_value`` apiece (2: fp16
        or bf16)."""
        b = whole("batch", batch)
        t = self.seq_len if tokens is None else whole("tokens", tokens)
        kv = (self.kv_heads or self.heads) * self.head_dim
        return 2 * self.layers * b * t * kv * whole("bytes_per_value", bytes_per_value)

    def activation_bytes(self, batch: int = 1, tokens: int | None = None) -> int:
        """Bytes of activations the blocks keep for backward, for ``batch`` sequences of ``tokens`` tokens (default
        ``seq_len``), in 16-bit, with no recomputation and no tensor or sequence parallelism: ``s b h (34 + 5 a s / h)``
        per layer (Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer Models', section
        4.1: 34 s b h for the matmuls' inputs, LayerNorms, GELU and dropout masks, 5 a s^2 b for the attention
        scores, their softmax and its dropout mask), times the layers. The attention term grows with the square of
        the context, so past a few thousand tokens the activations, not the weights and optimizer state, fill a GPU.

        Example:
            >>> s = TransformerShape(layers=32, d_model=4096, heads=32, seq_len=4096, vocab=32000)   # 7B-class
            >>> round(s.activation_bytes(batch=1) / 2**30), round(16 * s.params / 2**30)            # GiB each
            (97, 98)
        """
        b = whole("batch", batch)
        t = self.seq_len if tokens is None else whole("tokens", tokens)
        per_layer = 34 * t * b * self.d_model + 5 * self.heads * t * t * b
        return self.layers * per_layer

    def _rows(self) -> list[tuple[str, str]]:
        return [("shape", f"{self.layers} layers x d {self.d_model} ({self.heads} heads of {self.head_dim}), "
                          f"context {self.seq_len}, vocab {fmt_number(self.vocab)}"),
                ("parameters", f"{fmt_number(self.params)} ({fmt_number(self.params_for_flops)} counted for FLOPs: "
                               "no position embedding)"),
                ("FLOPs per token", f"{self.flops_per_token() / 1e6:,.1f} M training (6N + 12LdT; attention "
                                    f"{self.attention_share():.0%})"),
                ("KV cache", f"{fmt_bytes(self.kv_cache_bytes())} per sequence of {self.seq_len} tokens in 16-bit")]

    def __repr__(self) -> str:
        return "TransformerShape\n" + text_table(("", ""), self._rows())

    def _repr_html_(self) -> str:
        return html_table(("", ""), self._rows(), caption="Transformer shape")


def mfu(flops_per_token: float, tokens_per_s: float, peak_flops: float) -> float:
    """Model FLOPs utilisation: the model's FLOPs per token times the tokens per second, over ``peak_flops``.

    Example:
        >>> round(mfu(855e6, 150_000, 312e12), 3)      # GPT-2 small at 150k tokens/s on an A100's bf16 peak
        0.411
    """
    for name, v in (("flops_per_token", flops_per_token), ("tokens_per_s", tokens_per_s), ("peak_flops", peak_flops)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a positive finite number, got {v!r}")
    return flops_per_token * tokens_per_s / peak_flops

