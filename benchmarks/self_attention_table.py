"""Where source tokens look in a Transformer run's encoder self-attention, head by head.

From the root of a clone::

    python -m benchmarks.self_attention_table RUN_DIR "Ein Satz." [--layer L] [--decoder]
    python -m benchmarks.self_attention_table RUN_DIR --roles N

The first translates the sentence (beam 5) and prints one row per source
token (with ``--decoder``: per decoder input, ``<s>`` and the output so far):
for every head of layer ``L`` (default: the last) the token it gives the most
weight and that weight, and the weight the head average gives the token's own
position. The second measures what each head of each layer
does on the first N sentences of the run's test split (test2016 for
Multi30k): the share of source tokens whose
largest weight is on the previous token, itself, the next token, ``</s>``, or
elsewhere. These are the tables docs/transformer.md quotes; the heatmaps of
the same weights come from ``attnkit translate RUN "..." --plot DIR --head all``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from attnkit.nmt.data.batching import Examples, make_batch, sorted_batches
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.decoding.views import attention_views
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.vocab_ids import BOS

ROLES = ("previous", "self", "next", "</s>", "elsewhere")


def table(run_dir: Path, sentence: str, layer: int | None, decoder: bool) -> list[str]:
    run = load_run(run_dir)
    (result,) = translate_lines(run, [sentence], beam_size=5)
    views = attention_views(run.model, result.src_ids, result.output_ids, run.device)
    weights = views.decoder if decoder else views.encoder  # (L, H, N, N)
    if weights is None:
        raise SystemExit(f"{run_dir} has no self-attention (an RNN run)")
    chosen = weights[-1 if layer is None else layer]  # (H, N, N)
    pieces = ["<s>", *result.tgt_pieces[:-1]] if decoder else result.src_pieces
    heads = chosen.shape[0]
    lines = [
        f"translation: {result.text}",
        "| token | " + " | ".join(f"head {h}" for h in range(heads)) + " | self (mean) |",
        "|---" * (heads + 2) + "|",
    ]
    for i, piece in enumerate(pieces):
        cells = []
        for h in range(heads):
            j = int(chosen[h, i].argmax())
            cells.append(f"{pieces[j]} {float(chosen[h, i, j]):.2f}")
        own = float(chosen[:, i, i].mean())
        lines.append(f"| {piece} | " + " | ".join(cells) + f" | {own:.2f} |")
    return lines


@torch.no_grad()
def head_roles(run_dir: Path, sentences: int) -> list[str]:
    """Per encoder layer and head: shares of source tokens by where their argmax lies."""
    run = load_run(run_dir)
    lines = load_split(run.config.data, "test").src[:sentences]
    ids = [run.src_tok.encode(line) for line in lines]
    examples = Examples(ids, [[BOS]] * len(ids))
    counts = None
    for indices in sorted_batches(examples, 50):
        batch = make_batch(examples, indices)
        maps = run.model.eval().attention_maps(batch.src, batch.src_lengths, batch.tgt_in)
        argmax = maps.encoder.argmax(dim=-1)  # (B, Le, H, S)
        position = torch.arange(argmax.shape[-1])  # (S,)
        last = (batch.src_lengths - 1)[:, None, None, None]  # </s>, (B, 1, 1, 1)
        real = position[None, None, None, :] < batch.src_lengths[:, None, None, None]
        kinds = torch.full_like(argmax, len(ROLES) - 1)
        for k, target in enumerate((position - 1, position, position + 1)):
            kinds = torch.where(argmax == target, k, kinds)
        kinds = torch.where((argmax == last) & (kinds == len(ROLES) - 1), 3, kinds)
        found = torch.stack([((kinds == k) & real).sum(dim=(0, 3)) for k in range(len(ROLES))])
        counts = found if counts is None else counts + found  # (roles, Le, H)
    shares = counts / counts.sum(dim=0, keepdim=True)
    table = [
        f"encoder heads on the first {len(ids)} sentences of the test split: share of source "
        "tokens whose largest weight is on ...",
        "| layer | head | " + " | ".join(ROLES) + " |",
        "|---" * (len(ROLES) + 2) + "|",
    ]
    for layer in range(shares.shape[1]):
        for head in range(shares.shape[2]):
            cells = " | ".join(f"{float(v):.2f}" for v in shares[:, layer, head])
            table.append(f"| {layer} | {head} | {cells} |")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("sentence", nargs="?")
    parser.add_argument("--layer", type=int)
    parser.add_argument("--decoder", action="store_true", help="the decoder's self-attention")
    parser.add_argument("--roles", type=int, metavar="N")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.roles:
        print("\n".join(head_roles(args.run_dir, args.roles)))
    if args.sentence:
        print("\n".join(table(args.run_dir, args.sentence, args.layer, args.decoder)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
