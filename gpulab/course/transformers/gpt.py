"""A small GPT for the course (decoder-only, pre-norm, learned positions, output tied to the token embedding: the
shape :class:`gpulab.transformer.TransformerShape` counts), text that is always there offline (gpulab's own
docstrings, read as bytes: a 256-token vocabulary), random training windows of it, and generation with and without
a KV cache.

Example:
    >>> import torch
    >>> from gpulab.course.transformers.gpt import gpt, text_tokens, token_batch
    >>> from gpulab.transformer import TransformerShape
    >>> shape = TransformerShape(layers=2, d_model=64, heads=4, seq_len=32, vocab=256)
    >>> model = gpt(shape)
    >>> sum(p.numel() for p in model.parameters()) == shape.params
    True
    >>> tokens = text_tokens()
    >>> x, y = token_batch(tokens, batch=2, seq_len=32, generator=torch.Generator().manual_seed(0))
    >>> logits, loss = model(x, y)
    >>> tuple(logits.shape), bool(loss > 0)
    ((2, 32, 256), True)
"""
from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from typing import Any

from ..._check import device_arg, flag, whole
from ...transformer import TransformerShape
from .checks import ids, model_arg, same_device, shape_arg, token_text

__all__ = ["gpt", "checkpoint_blocks", "counted_flops_per_token", "text_tokens", "token_batch", "generate", "StaticKV",
           "static_caches"]


class StaticKV:
    """One block's KV cache, preallocated: K and V buffers of ``capacity`` tokens each (allocated at the first
    :meth:`append`, in the dtype and on the device of what it receives), filled up to ``length``. Appending writes in
    place and returns views of everything held, so a decoding step copies only its own token's K and V (a cache
    that concatenates copies all of them every step: O(T^2) bytes over T tokens)."""

    __slots__ = ("capacity", "k", "v", "length")

    def __init__(self, capacity: int) -> None:
        self.capacity = whole("capacity", capacity)
        self.k: Any = None
        self.v: Any = None
        self.length = 0

    def append(self, k: Any, v: Any) -> tuple[Any, Any]:
        """Write ``k`` and ``v`` (batch, heads, tokens, head_dim) after what is held; views of all of it."""
        end = self.length + k.shape[2]
        if end > self.capacity:
            raise ValueError(f"the cache holds {self.capacity} tokens: {self.length} held + {k.shape[2]} new do not fit; "
                             "make it with the prompt's length + the new tokens (static_caches)")
        if self.k is None:
            b, h, _, hd = k.shape
            self.k, self.v = k.new_empty(b, h, self.capacity, hd), v.new_empty(b, h, self.capacity, hd)
        self.k[:, :, self.length:end] = k
        self.v[:, :, self.length:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def __iter__(self) -> Any:                        # the buffers, as a [K, V] list is iterated
        return iter(() if self.k is None else (self.k, self.v))

    def __repr__(self) -> str:
        return f"StaticKV({self.length} of {self.capacity} tokens)"


def static_caches(model: Any, capacity: int) -> list[StaticKV]:
    """One preallocated :class:`StaticKV` per block of ``model``, each for ``capacity`` tokens (the prompt and every
    new token but the last, which is never fed back)."""
    model_arg("model", model)
    capacity = whole("capacity", capacity)
    return [StaticKV(capacity) for _ in model.blocks]


@functools.lru_cache(maxsize=1)
def _classes() -> tuple[type, type]:
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, s: TransformerShape, manual: bool) -> None:
            super().__init__()
            d = s.d_model
            self.heads, self.manual = s.heads, manual
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, s.mlp_ratio * d), nn.Linear(s.mlp_ratio * d, d)

        def attend(self, x: Any, cache: list | None) -> Any:
            b, t, d = x.shape
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for z in self.qkv(self.ln1(x)).split(d, dim=2))
            if isinstance(cache, StaticKV):           # decoding: K and V written into preallocated buffers
                k, v = cache.append(k, v)
            elif cache is not None:                   # a plain list: every K and V concatenated (a copy per step)
                if cache and t > 1:
                    raise ValueError("a cache takes the prompt at once, then one token per step")
                if cache:
                    k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
                cache[:] = [k, v]
            causal = t > 1                            # one new token attends to every cached one
            if self.manual:
                att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
                if causal:
                    n = k.shape[2]
                    mask = torch.ones(t, n, dtype=torch.bool, device=x.device).triu(n - t + 1)
                    att = att.masked_fill(mask, float("-inf"))
                y = att.softmax(-1) @ v
            else:
                y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

        def forward(self, x: Any, cache: list | None = None) -> Any:
            x = x + self.attend(x, cache)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        """GPT-2's shape; ``forward(idx, targets=None)`` gives ``(logits, loss)``."""

        def __init__(self, s: TransformerShape, manual: bool = False) -> None:
            super().__init__()
            self.shape = s
            self.wte, self.wpe = nn.Embedding(s.vocab, s.d_model), nn.Embedding(s.seq_len, s.d_model)
            self.blocks = nn.ModuleList(Block(s, manual) for _ in range(s.layers))
            self.ln_f = nn.LayerNorm(s.d_model)
            self.head = nn.Linear(s.d_model, s.vocab, bias=False)
            self.head.weight = self.wte.weight
            self.apply(self._init)

        @staticmethod
        def _init(m: Any) -> None:
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)

        def forward(self, idx: Any, targets: Any = None, caches: list | None = None, start: int = 0) -> Any:
            _check_forward(self, idx, targets, caches, start)
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(start, start + t, device=idx.device))
            for i, blk in enumerate(self.blocks):
                x = blk(x, None if caches is None else caches[i])
            logits = self.head(self.ln_f(x))
            loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
            return logits, loss

    return GPT, Block


def gpt(shape: TransformerShape, *, manual_attention: bool = False) -> Any:
    """The course's GPT of ``shape`` (a :class:`~gpulab.transformer.TransformerShape`), GPT-2's initialisation.
    ``manual_attention=True`` writes softmax(QK^T)V out (the T x T scores held in memory) instead of calling
    ``scaled_dot_product_attention``."""
    shape_arg("shape", shape)
    return _classes()[0](shape, flag("manual_attention", manual_attention))


def checkpoint_blocks(model: Any) -> Any:
    """Activation checkpointing per block: each block of ``model`` (a :func:`gpt`) keeps only its input in the forward
    pass and runs its forward again in the backward (``torch.utils.checkpoint``, non-reentrant); decoding with a KV
    cache is left as it was. Changes ``model`` in place and returns it."""
    from torch.utils.checkpoint import checkpoint

    model_arg("model", model)
    for blk in model.blocks:
        forward = blk.forward
        blk.forward = (lambda f: lambda x, cache=None: f(x, cache) if cache is not None else
                       checkpoint(f, x, use_reentrant=False))(forward)
    return model


def counted_flops_per_token(shape: TransformerShape, *, checkpoint: bool = False, batch: int = 2,
                            device: Any = None) -> float:
    """The FLOPs one training step (forward and backward) of :func:`gpt` ``(shape)`` does per token, counted by
    PyTorch's ``FlopCounterMode`` as it runs, with attention written out as matrix products (the fused kernels'
    counts depend on the backend). ``checkpoint=True`` checkpoints every block: the count then holds the forward
    run again in the backward, the *hardware* FLOPs, not only the model's.

    Example:
        >>> from gpulab.transformer import TransformerShape
        >>> s = TransformerShape(layers=1, d_model=32, heads=2, seq_len=16, vocab=64)
        >>> counted_flops_per_token(s, checkpoint=True) > counted_flops_per_token(s)
        True
    """
    import torch

    from ...roofline import count_flops
    from ..capstone.recipe import keep_rng

    shape_arg("shape", shape)
    flag("checkpoint", checkpoint)
    batch = whole("batch", batch, low=1)
    device = device_arg("device", device)
    dev = torch.device("cpu" if device is None else f"cuda:{device}" if isinstance(device, int) else device)
    with keep_rng():                    # the caller's generators are left as they were
        torch.manual_seed(0)
        model = gpt(shape, manual_attention=True).to(dev)
        x = torch.randint(0, shape.vocab, (batch, shape.seq_len)).to(dev)
    if checkpoint:
        checkpoint_blocks(model)

    def step() -> None:
        _, loss = model(x, x)
        loss.backward()

    return count_flops(step) / x.numel()


def _check_forward(model: Any, idx: Any, targets: Any, caches: Any, start: Any) -> None:
    """The forward's arguments, before any work: ``idx`` and ``targets`` token ids of the same ``(batch, tokens)``
    shape on the model's device, ``start`` a position, ``caches`` one ``[]`` or ``[K, V]`` per block that holds the
    ``start`` tokens before ``idx`` (then one token at a time), the whole inside the model's context."""
    s = model.shape
    ids("idx", idx, s.vocab)
    same_device("idx", idx, model)
    start = whole("start", start, low=0)
    if targets is not None:
        ids("targets", targets, s.vocab)
        if tuple(targets.shape) != tuple(idx.shape):
            raise ValueError(f"targets must have idx's shape {tuple(idx.shape)} (the next token of each), got "
                             f"{tuple(targets.shape)}")
        same_device("targets", targets, model)
    if caches is not None:
        if not isinstance(caches, list) or len(caches) != len(model.blocks) or not all(
                isinstance(c, StaticKV) or (isinstance(c, list) and len(c) in (0, 2)) for c in caches):
            raise TypeError(f"caches must be a list of {len(model.blocks)} caches, one per block: static_caches(model, "
                            f"tokens), or lists ([] to start, then the [K, V] it fills), got {caches!r:.80}")
        held = {c.length if isinstance(c, StaticKV) else (0 if not c else int(c[0].shape[2])) for c in caches}
        batches = {int(c.k.shape[0]) if isinstance(c, StaticKV) else int(c[0].shape[0]) for c in caches
                   if (c.k is not None if isinstance(c, StaticKV) else c)}
        if len(held) != 1 or held.pop() != start or batches - {idx.shape[0]}:
            raise ValueError(f"caches hold the tokens before idx: start={start} must be the number of tokens they "
                             f"hold and idx's batch ({idx.shape[0]}) theirs; pass fresh caches ([[] for _ in "
                             "model.blocks]) with start=0")
        if start and idx.shape[1] != 1:
            raise ValueError(f"idx must be one new token per sequence once the caches hold tokens (start={start}), "
                             f"got {idx.shape[1]}: a cache takes the prompt at once, then one token per step")
    if start + idx.shape[1] > s.seq_len:
        raise ValueError(f"start ({start}) + idx's {idx.shape[1]} tokens exceed the model's context of {s.seq_len}")


@functools.lru_cache(maxsize=1)
def _corpus() -> bytes:
    import gpulab

    texts = []
    for info in sorted(pkgutil.walk_packages(gpulab.__path__, "gpulab."), key=lambda i: i.name):
        if info.name.startswith("gpulab.course.scripts") or info.name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(info.name)
        except Exception:    # a module whose optional package is missing: its text is simply left out
            continue
        texts.append(inspect.getdoc(module) or "")
        texts += [inspect.getdoc(obj) or "" for _, obj in sorted(vars(module).items())
                  if getattr(obj, "__module__", None) == info.name and (inspect.isfunction(obj) or inspect.isclass(obj))]
    return "\n\n".join(t for t in texts if t).encode("utf-8")


def text_tokens() -> Any:
    """gpulab's own documentation (every module's, class's and function's docstring) as a 1-D uint8 tensor of bytes:
    English text that ships with the library, so it is there offline; the vocabulary is the 256 byte values."""
    import torch

    return torch.frombuffer(bytearray(_corpus()), dtype=torch.uint8).clone()


def token_batch(tokens: Any, batch: int, seq_len: int, generator: Any = None, device: Any = None) -> tuple[Any, Any]:
    """``batch`` random windows of ``seq_len`` tokens and the same windows shifted by one (the next-token targets),
    as int64 tensors on ``device``."""
    import torch

    token_text("tokens", tokens)
    batch, seq_len = whole("batch", batch), whole("seq_len", seq_len)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)) or None, got "
                        f"{type(generator).__name__} {generator!r:.60}")
    device_arg("device", device)
    if len(tokens) <= seq_len + 1:
        raise ValueError(f"tokens must be a 1-D tensor longer than seq_len + 1 = {seq_len + 1}, got shape "
                         f"{tuple(tokens.shape)}")
    starts = torch.randint(0, len(tokens) - seq_len - 1, (batch,), generator=generator)
    x = torch.stack([tokens[s:s + seq_len] for s in starts.tolist()]).long()
    y = torch.stack([tokens[s + 1:s + 1 + seq_len] for s in starts.tolist()]).long()
    return (x, y) if device is None else (x.to(device), y.to(device))


def generate(model: Any, prompt: Any, new_tokens: int, *, kv_cache: bool = True) -> tuple[Any, Any]:
    """Greedy decoding of ``new_tokens`` after ``prompt`` (a ``(batch, t)`` tensor); returns ``(tokens, caches)``.
    With ``kv_cache`` each step runs the newest token only, reading every earlier K and V from the cache (``caches``:
    a preallocated :class:`StaticKV` per layer, written in place); without it each step runs the whole sequence again
    (``caches`` None)."""
    import torch

    model_arg("model", model)
    ids("prompt", prompt, model.shape.vocab, any_device=True)
    same_device("prompt", prompt, model)
    new_tokens, kv_cache = whole("new_tokens", new_tokens), flag("kv_cache", kv_cache)
    limit = model.shape.seq_len
    if prompt.shape[1] + new_tokens > limit:
        raise ValueError(f"prompt ({prompt.shape[1]}) + new_tokens ({new_tokens}) exceed the context of {limit}")
    out = prompt
    with torch.no_grad():
        if not kv_cache:
            for _ in range(new_tokens):
                logits, _ = model(out)
                out = torch.cat([out, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            return out, None
        caches: list = static_caches(model, prompt.shape[1] + new_tokens - 1)   # the last token is never fed back
        logits, _ = model(out, caches=caches)
        for _ in range(new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            if out.shape[1] == prompt.shape[1] + new_tokens:
                break
            logits, _ = model(nxt, caches=caches, start=out.shape[1] - 1)
    return out, caches
