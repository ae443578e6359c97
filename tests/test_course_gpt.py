"""The course's GPT: its parameters are the shape's, it learns the library's own text, SDPA and the written-out
attention agree, and greedy generation gives the same tokens with and without a KV cache whose bytes are counted."""
from __future__ import annotations

import pytest
import torch

from gpulab.course.gpt import generate, gpt, text_tokens, token_batch
from gpulab.transformer import TransformerShape

SHAPE = TransformerShape(layers=2, d_model=64, heads=4, seq_len=64, vocab=256)


@pytest.fixture(scope="module")
def trained():
    torch.manual_seed(0)
    tokens, gen = text_tokens(), torch.Generator().manual_seed(0)
    model = gpt(SHAPE)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(40):
        x, y = token_batch(tokens, 16, SHAPE.seq_len, gen)
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return model.eval(), tokens, losses


def test_the_text_is_the_librarys_own_and_the_model_learns_it(trained):
    model, tokens, losses = trained
    assert len(tokens) > 100_000 and tokens.dtype == torch.uint8
    assert sum(p.numel() for p in model.parameters()) == SHAPE.params
    assert losses[0] > 5.0 and sum(losses[-5:]) / 5 < 0.8 * losses[0]      # ln 256 = 5.5 at the start


def test_sdpa_and_the_written_out_attention_agree(trained):
    model, tokens, _ = trained
    manual = gpt(SHAPE, manual_attention=True)
    manual.load_state_dict(model.state_dict())
    x, _ = token_batch(tokens, 2, SHAPE.seq_len, torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.allclose(model(x)[0], manual.eval()(x)[0], atol=1e-5)


def test_the_cache_gives_the_same_tokens_and_holds_the_counted_bytes(trained):
    model, tokens, _ = trained
    prompt = tokens[:12].long()[None].repeat(2, 1)
    cached, caches = generate(model, prompt, 20)
    again, none = generate(model, prompt, 20, kv_cache=False)
    assert torch.equal(cached, again) and none is None and cached.shape == (2, 32)
    held = sum(t.numel() * t.element_size() for layer in caches for t in layer)
    assert held == SHAPE.kv_cache_bytes(batch=2, tokens=31, bytes_per_value=4)    # the last token is never fed


def test_bad_calls_say_what_to_pass(trained):
    model, tokens, _ = trained
    with pytest.raises(TypeError, match="TransformerShape"):
        gpt({"layers": 2})
    with pytest.raises(ValueError, match="context of 64"):
        generate(model, tokens[:60].long()[None], 10)
    with pytest.raises(ValueError, match="longer than seq_len"):
        token_batch(tokens[:10], 2, 64)
