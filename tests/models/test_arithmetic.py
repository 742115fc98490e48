"""Float32 arithmetic on a model held in bf16 or fp16 (models/arithmetic.py): the model computes what the float32
model of its own rounded weights computes — logits and gradients — on every architecture, holds no float32 copy
of a weight for the backward, and is left exactly as it was however the block ends, dispatched by accelerate
or not."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
import torch

from attnroute.models import load
from attnroute.models.arithmetic import Float32Arithmetic, float32_arithmetic
from tests.read.zoo import build

IDS = torch.tensor([[3, 9, 4, 17, 5, 3, 9, 4, 21, 8, 6]])


def _pair(path, dtype):
    """(the model in ``dtype``, the float32 model of exactly its weights and buffers)."""
    from transformers import AutoModelForCausalLM

    low = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    f32 = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    with torch.no_grad():
        for a, b in zip(f32.state_dict().values(), low.state_dict().values(), strict=True):
            if a.is_floating_point():
                a.copy_(b.float())
    return low, f32


def _input_gradient(model, ids) -> tuple[torch.Tensor, torch.Tensor]:
    """(the last position's log-sum-exp, its gradient at the input embeddings)."""
    emb = model.get_input_embeddings()(ids).detach().float().requires_grad_()
    out = model(inputs_embeds=emb).logits[0, -1].float().logsumexp(-1)
    return out.detach(), torch.autograd.grad(out, emb)[0]


CASES = [(a, torch.bfloat16) for a in ("llama", "qwen2", "gemma3_text", "mistral", "gpt2")] + [("llama", torch.float16)]


@pytest.mark.parametrize("arch, dtype", CASES, ids=lambda x: str(x).removeprefix("torch."))
def test_it_computes_what_the_float32_model_of_its_rounded_weights_computes(arch, dtype, tmp_path, monkeypatch):
    """Linears past 1,000 weights multiplied a block of rows at a time (the output head's path), for all of
    them to be tested on the tiny models."""
    from attnroute.models import arithmetic

    monkeypatch.setattr(arithmetic, "CHUNK", 1000 if arch in ("llama", "gemma3_text") else arithmetic.CHUNK)
    low, f32 = _pair(build(arch, tmp_path), dtype)
    want_logits, (want_m, want_g) = f32(IDS).logits, _input_gradient(f32, IDS)
    plain = low(IDS).logits.float()
    with Float32Arithmetic(low) as upcast:
        logits, (m, g) = low(IDS).logits, _input_gradient(low, IDS)
    assert logits.dtype == torch.float32 and upcast.casts > 0 and upcast.recast > 0
    torch.testing.assert_close(logits, want_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m, want_m, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(g, want_g, rtol=1e-4, atol=1e-6)
    assert (plain - want_logits).abs().max() > 100 * (logits - want_logits).abs().max()  # the arithmetic mattered


class _Tracked(Float32Arithmetic):
    """Each cast made, by weak reference: alive after the forward only if something holds it."""

    def __init__(self, model):
        super().__init__(model)
        self.made: list[weakref.ref] = []
        self.shapes: list[tuple] = []
        original = torch.Tensor.float

        def tracking(t, *a, **k):
            out = original(t, *a, **k)
            if isinstance(t, torch.nn.Parameter) or isinstance(t._base, torch.nn.Parameter):
                self.made.append(weakref.ref(out))
                self.shapes.append(tuple(out.shape))
            return out

        self._tracking = tracking


@pytest.mark.parametrize("chunk", [None, 1000], ids=["whole", "chunked"])
@pytest.mark.parametrize("arch", ["llama", "gemma3_text"])  # Gemma's embedding scales its rows, reading .dtype
def test_no_float32_copy_of_a_weight_is_held_for_the_backward(tmp_path, monkeypatch, chunk, arch):
    """The graph keeps each parameter and the backward casts it again: after the forward, with the graph
    alive, none of the float32 casts of the weights is. The embedding table is never cast whole (its rows are
    looked up, then cast), and with a Linear past CHUNK weights no cast is larger than CHUNK."""
    from attnroute.models import arithmetic

    if chunk is not None:
        monkeypatch.setattr(arithmetic, "CHUNK", chunk)
    low, f32 = _pair(build(arch, tmp_path), torch.bfloat16)
    for p in low.parameters():
        p.requires_grad_(True)  # as from_pretrained leaves them: the casts are on the graph
    upcast = _Tracked(low)
    monkeypatch.setattr(torch.Tensor, "float", upcast._tracking)
    with upcast:
        emb = low.get_input_embeddings()(IDS).detach().float().requires_grad_()
        out = low(inputs_embeds=emb).logits[0, -1].logsumexp(-1)
        gc.collect()
        alive = sum(r() is not None for r in upcast.made)
        (g,) = torch.autograd.grad(out, emb)
    assert len(upcast.made) >= 15 and alive == 0 and upcast.recast >= 15
    table = tuple(low.get_input_embeddings().weight.shape)  # the output head's shape too: cast once, by it
    assert upcast.shapes.count(table) == (1 if chunk is None else 0)
    assert chunk is None or max(int(np.prod(x)) for x in upcast.shapes) <= chunk
    torch.testing.assert_close(g, _input_gradient(f32, IDS)[1], rtol=1e-4, atol=1e-6)
    assert all(p.grad is None for p in low.parameters())


def _as_it_was(model, same_objects: bool = True) -> tuple:
    """What a reading could leave changed. ``same_objects``: the parameters themselves (accelerate makes an
    offloaded layer's anew each time it loads them, so a dispatched model's are compared by dtype and device)."""
    ident = id if same_objects else lambda t: t.device
    return (
        [(n, ident(p), p.dtype, p.requires_grad) for n, p in model.named_parameters()],
        [(n, ident(b), b.dtype) for n, b in model.named_buffers()],
        [sorted(vars(m)) for m in model.modules()],
        [(id(m.__dict__.get("forward")), id(m.__dict__.get("_old_forward"))) for m in model.modules()],
    )


def test_the_model_is_as_it_was_whatever_ends_the_block(tmp_path):
    low, _ = _pair(build("llama", tmp_path), torch.bfloat16)
    before, logits = _as_it_was(low), low(IDS).logits
    loaded = load(low, tokenizer=object())
    with pytest.raises(ZeroDivisionError):
        with float32_arithmetic(loaded):
            assert loaded.dtype == torch.float32
            low(IDS)
            raise ZeroDivisionError("the user's own metric")
    assert loaded.dtype == torch.bfloat16 and loaded.computes_in is None
    assert _as_it_was(low) == before and torch.equal(low(IDS).logits, logits)


def test_a_model_dispatched_with_a_layer_on_disk_computes_as_the_plain_model(tmp_path):
    """accelerate loads an offloaded layer's weights inside its own forward wrapper: the casts are made there, of
    the real weights, and the wrappers are accelerate's own again after."""
    from transformers import AutoModelForCausalLM

    path = build("llama", tmp_path)
    plain, _ = _pair(path, torch.bfloat16)
    where = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk", "model.norm": "cpu"}
    where |= {"model.rotary_emb": "cpu", "lm_head": "cpu"}
    kept = tmp_path / "offload"
    moved = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16, device_map=where, offload_folder=kept)
    assert any(p.device.type == "meta" for p in moved.parameters())
    before, logits = _as_it_was(moved, False), moved(IDS).logits
    with Float32Arithmetic(plain):
        want, (want_m, want_g) = plain(IDS).logits, _input_gradient(plain, IDS)
    with Float32Arithmetic(moved):
        got, (m, g) = moved(IDS).logits, _input_gradient(moved, IDS)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close((m, g), (want_m, want_g), rtol=1e-6, atol=1e-7)
    assert _as_it_was(moved, False) == before and torch.equal(moved(IDS).logits, logits)


def test_a_speech_model_computes_what_the_float32_model_of_its_rounded_weights_computes():
    """Whisper: convolutions over the features, learned positions read by slicing their table, cross-attention."""
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    sizes = dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=25)
    heads = dict(encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4)
    special = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    cfg = WhisperConfig(vocab_size=96, max_target_positions=32, **special, **sizes, **heads)
    torch.manual_seed(0)
    low = WhisperForConditionalGeneration(cfg).eval().to(torch.bfloat16)
    f32 = WhisperForConditionalGeneration(cfg).eval()
    f32.load_state_dict({k: v.float() for k, v in low.state_dict().items()})
    feats, ids = torch.randn(1, 16, 50).bfloat16(), torch.tensor([[1, 5, 9, 12]])  # features as the model takes them
    want = f32(input_features=feats.float(), decoder_input_ids=ids).logits
    plain = low(input_features=feats, decoder_input_ids=ids).logits.float()
    with Float32Arithmetic(low) as upcast:
        got = low(input_features=feats, decoder_input_ids=ids).logits
    assert got.dtype == torch.float32 and upcast.casts > 0
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert (plain - want).abs().max() > 100 * (got - want).abs().max()
