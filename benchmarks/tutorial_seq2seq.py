"""The baseline trainer: a classic tutorial-style attention seq2seq.

This is the model most people first meet (the PyTorch/Joey-NMT-era tutorials
of Bahdanau et al. 2015): a bidirectional GRU encoder run over the padded batch
as it is (no packing), and a GRU decoder that, one target step at a time,
concatenates the previous decoder state with every encoder state and projects
the pair, v^T tanh(W [s; h_j]), so the key half of that projection is
recomputed at every step. Padded keys are masked out of the softmax, so the
model is correct; it is simply not organised for speed. It lives here, not in
attnkit, because it exists only to be measured against.
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
        self.proj = nn.Linear(3 * hidden, hidden)  # W over [s; h_j]
        self.v = nn.Linear(hidden, 1, bias=False)

    def forward(self, hidden: Tensor, states: Tensor, mask: Tensor) -> Tensor:
        s = hidden.unsqueeze(1).expand(-1, states.shape[1], -1)  # (B, S, D)
        energy = torch.tanh(self.proj(torch.cat([s, states], dim=-1)))  # (B, S, D)
        scores = self.v(energy).squeeze(-1).masked_fill(~mask, torch.finfo(energy.dtype).min)
        return torch.softmax(scores, dim=-1)  # (B, S)


class TutorialDecoder(nn.Module):
    def __init__(self, vocab: int, emb: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb, padding_idx=PAD)
        self.attention = TutorialAttention(hidden)
        self.rnn = nn.GRU(emb + 2 * hidden, hidden, batch_first=True)
        self.out = nn.Linear(emb + 3 * hidden, vocab)
        self.dropout = nn.Dropout(dropout)

    def forward(self, token: Tensor, hidden: Tensor, states: Tensor, mask: Tensor):
        emb = self.dropout(self.embedding(token))  # (B, E)
        weights = self.attention(hidden, states, mask)  # (B, S)
        context = torch.bmm(weights.unsqueeze(1), states).squeeze(1)  # (B, 2D)
        output, new_hidden = self.rnn(
            torch.cat([emb, context], dim=-1).unsqueeze(1), hidden.unsqueeze(0)
        )  # (B, 1, D), (1, B, D)
        logits = self.out(torch.cat([output.squeeze(1), context, emb], dim=-1))  # (B, V)
        return logits, new_hidden.squeeze(0)


class TutorialSeq2Seq(nn.Module):
    """Teacher-forced training pass, one decoder step at a time."""

    def __init__(self, src_vocab: int, tgt_vocab: int, emb: int, hidden: int, dropout: float):
        super().__init__()
        self.encoder = TutorialEncoder(src_vocab, emb, hidden, dropout)
        self.decoder = TutorialDecoder(tgt_vocab, emb, hidden, dropout)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        states, hidden = self.encoder(src)
        mask = src != PAD  # (B, S)
        logits = []
        for t in range(tgt_in.shape[1]):
            step_logits, hidden = self.decoder(tgt_in[:, t], hidden, states, mask)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)  # (B, T, V)
