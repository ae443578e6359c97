"""gpulab.transformer against a real GPT-2-shaped torch model: its parameter count, FLOPs per token against torch's
FLOP counter over a training step, and the KV cache's bytes against the tensors a cache holds."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from gpulab.transformer import TransformerShape, mfu


class _Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads, self.ln1, self.ln2 = heads, nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5          # the two T x T matmuls, written out
        att = att.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf")).softmax(-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.out(torch.nn.functional.gelu(self.fc(self.ln2(x))))


class _GPT(nn.Module):
    def __init__(self, s: TransformerShape):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(s.vocab, s.d_model), nn.Embedding(s.seq_len, s.d_model)
        self.blocks = nn.ModuleList(_Block(s.d_model, s.heads) for _ in range(s.layers))
        self.ln_f = nn.LayerNorm(s.d_model)
        self.head = nn.Linear(s.d_model, s.vocab, bias=False)
        self.head.weight = self.wte.weight                                       # tied

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


SMALL = TransformerShape(layers=2, d_model=128, heads=4, seq_len=64, vocab=96)


def test_parameters_match_a_real_model():
    assert SMALL.params == sum(p.numel() for p in _GPT(SMALL).parameters())
    gpt2 = TransformerShape(12, 768, 12, 1024, 50257)
    assert gpt2.params == 124_439_808 and gpt2.params_for_flops == 124_439_808 - 1024 * 768


def test_flops_per_token_match_torchs_flop_counter_over_a_training_step():
    model, idx = _GPT(SMALL), torch.randint(0, SMALL.vocab, (2, SMALL.seq_len))
    with FlopCounterMode(display=False) as counter:
        model(idx).float().logsumexp(-1).sum().backward()
    counted = counter.get_total_flops() / idx.numel()
    # the formula also counts the biases and LayerNorm weights as 6 FLOPs each (a few percent at this width)
    assert counted == pytest.approx(SMALL.flops_per_token(), rel=0.03)
    assert 0 < SMALL.attention_share() < 1 and SMALL.attention_share(256) > SMALL.attention_share(64)


def test_kv_cache_bytes_are_the_tensors_a_cache_holds():
    b, t = 3, 40
    k = torch.zeros(b, SMALL.heads, t, SMALL.head_dim, dtype=torch.bfloat16)
    held = 2 * SMALL.layers * k.numel() * k.element_size()
    assert SMALL.kv_cache_bytes(batch=b, tokens=t, bytes_per_value=2) == held
    gqa = TransformerShape(2, 128, 4, 64, 96, kv_heads=2)
    assert gqa.kv_cache_bytes(b, t) == held // 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(layers=0, d_model=64, heads=4, seq_len=8, vocab=10), "layers"),
    (dict(layers=2, d_model=66, heads=4, seq_len=8, vocab=10), "multiple of heads"),
    (dict(layers=2, d_model=64, heads=4, seq_len=8, vocab=10, kv_heads=3), "kv_heads"),
    (dict(layers=2, d_model=64.0, heads=4, seq_len=8, vocab=10), "d_model"),
])
def test_bad_shapes_are_refused_by_name(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        TransformerShape(**kwargs)


def test_mfu_and_its_errors():
    assert mfu(1e9, 1e3, 1e13) == pytest.approx(0.1)
    for bad in (0, -1.0, float("nan"), True, "1"):
        with pytest.raises(ValueError, match="tokens_per_s"):
            mfu(1e9, bad, 1e13)
    assert "36 MiB" in repr(TransformerShape(12, 768, 12, 1024, 50257)) and "<table" in SMALL._repr_html_()


def test_activation_bytes_follow_korthikanti_et_al():
    """s b h (34 + 5 a s / h) bytes per layer: linear in the batch, the attention part quadratic in the context;
    for a 7B-class decoder at batch 1 they reach fp32 Adam's 16 bytes per parameter near 4,096 tokens."""
    s = TransformerShape(layers=32, d_model=4096, heads=32, seq_len=4096, vocab=32000)
    h, a = 4096, 32
    assert s.activation_bytes(1, 2048) == 32 * 2048 * h * (34 + 5 * a * 2048 // h)
    assert s.activation_bytes(4, 2048) == 4 * s.activation_bytes(1, 2048)
    assert s.activation_bytes(1, 512) < 16 * s.params < s.activation_bytes(1, 8192)
    with pytest.raises(ValueError):
        s.activation_bytes(0)
