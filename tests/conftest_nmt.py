"""Shared helpers for the translator tests: tiny configs, integer toy data, run folders.

Imported explicitly (``from conftest_nmt import ...``), not a pytest conftest.
The toy vocabulary is the four special tokens plus the symbols 4..V-1.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attnkit.nmt.config import RunConfig
from attnkit.nmt.data.tokenizer import save_tokenizers
from attnkit.nmt.models.registry import build_translator
from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
from attnkit.nmt.models.transformer import TransformerConfig, TransformerTranslator
from attnkit.nmt.runs.checkpoint import save_checkpoint
from attnkit.nmt.vocab_ids import BOS, EOS, NUM_SPECIAL, PAD

TOY_VOCAB = 12  # 4 special tokens + 8 symbols


def tiny_model(vocab: int = TOY_VOCAB, seed: int = 0, **overrides: object) -> RNNTranslator:
    """A small model in eval mode (dropout off), seeded."""
    torch.manual_seed(seed)
    fields = {"embed_dim": 8, "hidden_size": 6, "dropout": 0.0}
    fields.update(overrides)
    return RNNTranslator(RNNConfig(**fields), vocab, vocab + 1).eval()


def tiny_transformer(
    vocab: int = TOY_VOCAB, seed: int = 0, **overrides: object
) -> TransformerTranslator:
    """A small Transformer in eval mode (dropout off), seeded; separate vocabularies."""
    torch.manual_seed(seed)
    fields = {
        "d_model": 16,
        "heads": 4,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "ff_dim": 32,
        "dropout": 0.0,
        "attention_dropout": 0.0,
        "share_embeddings": False,
    }
    fields.update(overrides)
    return TransformerTranslator(TransformerConfig(**fields), vocab, vocab + 1).eval()


def step_by_step(model, src: Tensor, src_lengths: Tensor, tgt_in: Tensor):
    """Run ``model.step`` over ``tgt_in``: logits ``(B, T, V)``, weights ``(B, T, S)``, state."""
    memory = model.encode(src, src_lengths)
    state, logits, weights = model.initial_state(memory), [], []
    for t in range(tgt_in.shape[1]):
        step_logits, step_weights, state = model.step(tgt_in[:, t], state, memory)
        logits.append(step_logits)
        weights.append(step_weights)
    return torch.stack(logits, 1), torch.stack(weights, 1), state


def pad(seqs: list[list[int]]) -> tuple[Tensor, Tensor]:
    """Right-pad integer sequences with PAD: ``(B, max_len)`` long and lengths ``(B,)``."""
    lengths = torch.tensor([len(s) for s in seqs])
    out = torch.full((len(seqs), int(lengths.max())), PAD, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.tensor(s)
    return out, lengths


class Encode(torch.nn.Module):
    """A translator's ``encode`` as a module's forward, for ``torch.export``."""

    def __init__(self, model) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: Tensor, src_lengths: Tensor):
        return self.model.encode(src, src_lengths)


def assert_per_sentence_gradients(model, rtol: float) -> None:
    """``vmap(grad(loss))`` over two sentences of different lengths (torch.func's per-sample
    gradients) equals each sentence's own ``backward()``, for a float64 ``model``."""
    src, src_lengths = pad([[4, 5, 6, 7], [8, 9]])
    tgt_in = torch.tensor([[BOS, 4, 5, 6], [BOS, 8, 9, PAD]])
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss(p, src, src_lengths, tgt_in):
        args = (src[None], src_lengths[None], tgt_in[None])
        return torch.func.functional_call(model, p, args)[0].square().mean()

    grads = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0, 0))(
        params, src, src_lengths, tgt_in
    )
    for b in range(2):
        model.zero_grad()
        loss(dict(model.named_parameters()), src[b], src_lengths[b], tgt_in[b]).backward()
        for name, param in model.named_parameters():
            want = torch.zeros_like(param) if param.grad is None else param.grad
            torch.testing.assert_close(grads[name][b], want, rtol=rtol, atol=1e-12, msg=name)


def random_sequences(
    n: int, min_len: int, max_len: int, generator: torch.Generator, vocab: int = TOY_VOCAB
) -> list[list[int]]:
    """``n`` sequences of symbols (no special tokens), lengths in [min_len, max_len]."""
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    return [
        torch.randint(NUM_SPECIAL, vocab, (int(k),), generator=generator).tolist() for k in lengths
    ]


def toy_batch(
    task: str, n: int, generator: torch.Generator, min_len: int = 3, max_len: int = 8
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """A copy or reverse batch: ``src, src_lengths, tgt_in [BOS y..], tgt_out [y.. EOS]``."""
    sources = random_sequences(n, min_len, max_len, generator)
    targets = [s if task == "copy" else s[::-1] for s in sources]
    src, src_lengths = pad(sources)
    tgt_in, _ = pad([[BOS, *t] for t in targets])
    tgt_out, _ = pad([[*t, EOS] for t in targets])
    return src, src_lengths, tgt_in, tgt_out


def make_run(folder, tokenizer, **sections):
    """A run folder with a seeded, untrained tiny model: no training, ready to translate.

    ``sections`` update the config's sections (``data={"max_src_len": 6}``);
    ``data={"toy": None, "train": ...}`` swaps the toy task for files; a
    ``model`` that names its ``arch`` replaces the tiny RNN's settings.
    """
    raw = {
        "data": {"toy": {"task": "copy"}},
        "model": {"embed_dim": 8, "hidden_size": 8, "dropout": 0.0, "score": "general"},
        "decode": {"beam_size": 2, "max_len_a": 1.0, "max_len_b": 3},
    }
    if "arch" in sections.get("model", {}):
        raw["model"] = {}
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    config = RunConfig.from_dict(raw)
    torch.manual_seed(0)
    model = build_translator(config.model, tokenizer.vocab_size, tokenizer.vocab_size)
    (folder / "config.yaml").write_text(config.to_yaml())
    save_tokenizers(folder, tokenizer, tokenizer)
    save_checkpoint(folder, "best", model.state_dict(), {})
    return folder
