"""The course's GPT: its parameters are the shape's, it learns the library's own text, SDPA and the written-out
attention agree, and greedy generation gives the same tokens with and without a KV cache whose bytes are counted."""
from __future__ import annotations

import pytest
import torch

from gpulab.course.transformers.gpt import generate, gpt, text_tokens, token_batch
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


# ---- bad input: each mistake named before any work, never a raw error from inside torch ------------------------------
def _ids():
    return torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("idx,kind,match", [
    (lambda: _ids().float(), TypeError, "idx must hold integer token ids"),
    (lambda: _ids()[0], ValueError, r"idx must be a 2-D tensor.*got shape \(8,\): pass idx\[None\]"),
    (lambda: _ids()[None], ValueError, "idx must be a 2-D tensor"),
    (lambda: _ids() + 300, ValueError, "outside the model's vocabulary of 256"),
    (lambda: torch.full((2, 4), -1), ValueError, "ids from -1 to -1, outside"),
    (lambda: _ids()[:, :0], ValueError, "idx is empty"),
    (lambda: _ids().to("meta"), ValueError, "idx is on meta but the model is on cpu"),
    (lambda: [[1, 2]], TypeError, "idx must be a torch tensor")])
def test_the_forward_names_a_bad_token_tensor(trained, idx, kind, match):
    model, _, _ = trained
    with pytest.raises(kind, match=match):
        model(idx())


def test_the_forward_names_bad_targets_positions_and_caches(trained):
    model, _, _ = trained
    x = _ids()
    with pytest.raises(ValueError, match=r"targets must have idx's shape \(2, 8\)"):
        model(x, x[:, :5])
    with pytest.raises(TypeError, match="targets must hold integer"):
        model(x, x.float())
    with pytest.raises(ValueError, match="targets holds token ids from -100"):
        model(x, torch.full_like(x, -100))
    with pytest.raises(ValueError, match="start must be a whole number >= 0"):
        model(x, start=-1)
    with pytest.raises(ValueError, match=r"start \(60\) \+ idx's 8 tokens exceed the model's context of 64"):
        model(x, start=60)
    with pytest.raises(TypeError, match=r"caches must be a list of 2 caches, one per block: static_caches\(model"):
        model(x, caches=[[]] * 5)
    caches = [[] for _ in model.blocks]
    with torch.no_grad():
        model(x, caches=caches)
        with pytest.raises(ValueError, match="start=0 must be the number of tokens they hold"):
            model(x[:, :1], caches=caches)
        with pytest.raises(ValueError, match="one new token per sequence"):
            model(x[:, :2], caches=caches, start=8)
        assert model(x[:, :1], caches=caches, start=8)[0].shape == (2, 1, 256)


def test_a_static_cache_decodes_as_the_concatenating_one_and_copies_only_the_new_token(trained):
    """The preallocated cache gives the same logits as a cache that concatenates, token by token; its buffers are
    allocated once (the same storage from the first step to the last) and it refuses a token past its capacity."""
    from gpulab.course.transformers.gpt import StaticKV, static_caches

    model, _, _ = trained
    x = _ids()
    static, plain = static_caches(model, 12), [[] for _ in model.blocks]
    with torch.no_grad():
        a, _ = model(x, caches=static)
        b, _ = model(x, caches=plain)
        storage = static[0].k.untyped_storage().data_ptr()
        for i in range(4):
            nxt = a[:, -1].argmax(-1, keepdim=True)
            a, _ = model(nxt, caches=static, start=8 + i)
            b, _ = model(nxt, caches=plain, start=8 + i)
            torch.testing.assert_close(a, b)
        assert static[0].k.untyped_storage().data_ptr() == storage and static[0].length == 12
        assert static[0].k.shape[2] == 12 and repr(static[0]) == "StaticKV(12 of 12 tokens)"
        with pytest.raises(ValueError, match="the cache holds 12 tokens: 12 held \\+ 1 new do not fit"):
            model(nxt, caches=static, start=12)
        with pytest.raises(ValueError, match="capacity must be a whole number"):
            StaticKV(0)
        with pytest.raises(ValueError, match="start=3 must be the number of tokens they hold"):
            model(x[:, :1], caches=static_caches(model, 4), start=3)


def test_generation_and_windows_name_their_bad_arguments(trained):
    model, tokens, _ = trained
    prompt = tokens[:4].long()[None]
    for call, kind, match in [
            (lambda: generate(model, prompt[:, :0], 3), ValueError, "prompt is empty"),
            (lambda: generate(model, prompt[0], 3), ValueError, r"pass prompt\[None\]"),
            (lambda: generate(model, prompt.float(), 3), TypeError, "prompt must hold integer"),
            (lambda: generate(model, prompt + 999, 3), ValueError, "prompt holds token ids"),
            (lambda: generate(model, prompt, -1), ValueError, "new_tokens must be a whole number >= 1"),
            (lambda: generate(model, prompt, 3, kv_cache="yes"), TypeError, "kv_cache must be True or False"),
            (lambda: generate(3, prompt, 3), TypeError, "model must be the course's GPT"),
            (lambda: gpt(SHAPE, manual_attention="yes"), TypeError, "manual_attention must be True or False"),
            (lambda: token_batch([1, 2, 3] * 100, 2, 8), TypeError, "tokens must be a torch tensor"),
            (lambda: token_batch(tokens.float(), 2, 8), TypeError, "tokens must hold integer"),
            (lambda: token_batch(tokens, 0, 8), ValueError, "batch must be a whole number >= 1"),
            (lambda: token_batch(tokens, 2, 0), ValueError, "seq_len must be a whole number >= 1"),
            (lambda: token_batch(tokens, 2, 8, 3), TypeError, "generator must be a torch.Generator"),
            (lambda: token_batch(tokens, 2, 8, device="tpu"), ValueError, "device='tpu'")]:
        with pytest.raises(kind, match=match):
            call()


def test_generation_speed_and_the_attention_sweep_check_first_and_leave_the_global_generator(trained):
    from gpulab import course

    model, _, _ = trained
    before = torch.get_rng_state()
    course.generation_speed(model, prompt_len=4, new_tokens=2, batches=(1,), repeats=1)
    course.attention_sweep([16], batch=1, heads=2, head_dim=8, min_run_time=0.01, device="cpu")
    assert torch.equal(torch.get_rng_state(), before)
    with pytest.raises(ValueError, match=r"prompt_len \(60\) \+ new_tokens \(10\) exceed the model's context of 64"):
        course.generation_speed(model, prompt_len=60, new_tokens=10)
    with pytest.raises(TypeError, match="model must be the course's GPT"):
        course.generation_speed(torch.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="batches is empty"):
        course.generation_speed(model, batches=[])
    with pytest.raises(TypeError, match="dtype must be a floating torch dtype"):
        course.attention_sweep([16], dtype=torch.int64)
    with pytest.raises(ValueError, match="device='tpu'"):
        course.attention_sweep([16], device="tpu")
