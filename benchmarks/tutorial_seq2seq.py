"""The baseline trainer: a tutorial-style attention seq2seq, the same model as attnkit's Bahdanau.

This is the loop most people first meet (the PyTorch-tutorial form of Bahdanau
et al. 2015): a bidirectional GRU encoder run over the padded batch as it is
(no packing), and a GRU decoder that does everything one target step at a
time -- the additive score v^T tanh(W_q s_{t-1} + W_k h_j), the GRU step, the
deep output tanh(W_o [s_t; c_t; E y_{t-1}]) and the vocabulary projection.

It is the *same model* as ``RNNTranslator(query_timing="previous",
score="additive")`` at the same sizes: the same parameters one for one (the
benchmark prints both counts) and the same FLOPs per real token -- the key
projection W_k h_j is computed once per batch, as attnkit does, so the ratio
measures how the work is organised, not extra work. Padded keys are masked out
of the softmax. It lives here, not in attnkit, because it exists only to be
measured against.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

PAD = 0


class TutorialEncoder(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.rnn = nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
        self.bridge = nn.Linear(2 * hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, src: Tensor) -> tuple[Tensor, Tensor]:
        states, last = self.rnn(self.dropout(self.embedding(src)))  # (B, S, 2D), (2, B, D)
        hidden = torch.tanh(self.bridge(torch.cat([last[0], last[1]], dim=-1)))  # (B, D)
        return states, hidden


class TutorialAttention(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query_proj = nn.Linear(hidden, hidden, bias=False)  # W_q
        self.key_proj = nn.Linear(2 * hidden, hidden, bias=False)  # W_k
        self.v = nn.Linear(hidden, 1, bias=False)

    def forward(self, hidden: Tensor, keys: Tensor, mask: Tensor) -> Tensor:
        energy = torch.tanh(self.query_proj(hidden).unsqueeze(1) + keys)  # (B, S, D)
        scores = self.v(energy).squeeze(-1).masked_fill(~mask, torch.finfo(energy.dtype).min)
        return torch.softmax(scores, dim=-1)  # (B, S)


class TutorialDecoder(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.attention = TutorialAttention(hidden)
        self.rnn = nn.GRU(emb + 2 * hidden, hidden, batch_first=True)
        self.combine = nn.Linear(emb + 3 * hidden, hidden)  # deep output W_o
        self.out = nn.Linear(hidden, vocab)
        self.dropout = nn.Dropout(dropout)

    def forward(self, token: Tensor, hidden: Tensor, states: Tensor, keys: Tensor, mask: Tensor):
        emb = self.dropout(self.embedding(token))  # (B, E)
        weights = self.attention(hidden, keys, mask)  # (B, S)
        context = torch.bmm(weights.unsqueeze(1), states).squeeze(1)  # (B, 2D)
        output, new_hidden = self.rnn(
            torch.cat([emb, context], dim=-1).unsqueeze(1), hidden.unsqueeze(0)
        )  # (B, 1, D), (1, B, D)
        deep = torch.tanh(self.combine(torch.cat([output.squeeze(1), context, emb], dim=-1)))
        return self.out(self.dropout(deep)), new_hidden.squeeze(0)  # (B, V)


class TutorialSeq2Seq(nn.Module):
    """Teacher-forced training pass, one decoder step at a time."""

    def __init__(self, src_vocab: int, tgt_vocab: int, emb: int, hidden: int, dropout: float):
        super().__init__()
        self.encoder = TutorialEncoder(src_vocab, emb, hidden, dropout)
        self.decoder = TutorialDecoder(tgt_vocab, emb, hidden, dropout)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        states, hidden = self.encoder(src)
        mask = src != PAD  # (B, S)
        keys = self.decoder.attention.key_proj(states)  # (B, S, D), once per batch
        logits = []
        for t in range(tgt_in.shape[1]):
            step_logits, hidden = self.decoder(tgt_in[:, t], hidden, states, keys, mask)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)  # (B, T, V)
