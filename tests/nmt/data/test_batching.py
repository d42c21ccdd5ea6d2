"""Length-bucketed batching: coverage, sorting, determinism, padding and masks."""

import numpy as np
import pytest
import torch

from attnkit.nmt.data.batching import (
    Examples,
    bucket_batches,
    encode_examples,
    make_batch,
    sorted_batches,
)
from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.vocab_ids import BOS, EOS, PAD


def random_examples(n=537, seed=0):
    g = torch.Generator().manual_seed(seed)
    src_len = torch.randint(1, 30, (n,), generator=g).tolist()
    tgt_len = torch.randint(1, 30, (n,), generator=g).tolist()
    return Examples([[4] * a for a in src_len], [[5] * b for b in tgt_len])


def epoch(examples, seed, batch_size=16, pool_batches=4):
    g = torch.Generator().manual_seed(seed)
    batches = bucket_batches(examples, batch_size, generator=g, pool_batches=pool_batches)
    return [b.tolist() for b in batches]


def test_every_example_appears_exactly_once_per_epoch():
    examples = random_examples()
    batches = epoch(examples, seed=3)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(examples)))
    assert all(1 <= len(b) <= 16 for b in batches)


def test_batches_are_sorted_by_length_within():
    examples = random_examples()
    for batch in epoch(examples, seed=3):
        keys = [(len(examples.src[i]), len(examples.tgt[i])) for i in batch]
        assert keys == sorted(keys, reverse=True)


def test_same_seed_same_order_and_different_seed_different_order():
    examples = random_examples()
    assert epoch(examples, seed=7) == epoch(examples, seed=7)
    assert epoch(examples, seed=7) != epoch(examples, seed=8)


def test_consecutive_epochs_from_one_generator_differ():
    examples = random_examples()
    g = torch.Generator().manual_seed(1)
    first = [b.tolist() for b in bucket_batches(examples, 16, generator=g)]
    second = [b.tolist() for b in bucket_batches(examples, 16, generator=g)]
    assert first != second
    assert sorted(i for b in second for i in b) == list(range(len(examples)))


def test_bucketing_cuts_padding_compared_with_random_batches():
    examples = random_examples()

    def padding(batches):
        return sum(max(len(examples.src[i]) for i in b) * len(b) for b in batches)

    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(examples), generator=g).tolist()
    random_batches = [order[j : j + 16] for j in range(0, len(order), 16)]
    assert padding(epoch(examples, seed=0)) < 0.8 * padding(random_batches)


def _reference_epoch(examples, batch_size, pool_batches, generator):
    """The epoch drawn as before the int32 arrays: an int64 permutation as a list, pools
    sorted by Python's stable sort, a list of batch lists shuffled."""
    src = [len(s) for s in examples.src]
    tgt = [len(t) for t in examples.tgt]
    order = torch.randperm(len(src), generator=generator).tolist()
    pool = batch_size * pool_batches
    batches = []
    for start in range(0, len(order), pool):
        chunk = sorted(order[start : start + pool], key=lambda i: (-src[i], -tgt[i]))
        batches += [chunk[j : j + batch_size] for j in range(0, len(chunk), batch_size)]
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


@pytest.mark.parametrize(
    ("n", "batch_size", "pool_batches"), [(537, 16, 4), (1000, 7, 3), (5, 8, 50)]
)
def test_epochs_are_the_batches_of_the_list_algorithm_so_resumed_runs_keep_their_order(
    n, batch_size, pool_batches
):
    examples = random_examples(n)
    mine, theirs = torch.Generator().manual_seed(11), torch.Generator().manual_seed(11)
    for _ in range(2):  # two epochs from one generator: the draws stay in step
        got = bucket_batches(examples, batch_size, generator=mine, pool_batches=pool_batches)
        expected = _reference_epoch(examples, batch_size, pool_batches, theirs)
        assert [b.tolist() for b in got] == expected
        assert [b.tolist() for b in got[3:]] == expected[3:]  # a resumed epoch's rest
    assert torch.equal(mine.get_state(), theirs.get_state())


def test_an_epoch_is_one_int32_array_and_its_batches_are_views_of_it():
    examples = random_examples()
    batches = bucket_batches(examples, 16, generator=torch.Generator().manual_seed(0))
    assert batches.order.dtype == np.int32 and batches.order.shape == (len(examples),)
    assert all(np.shares_memory(b, batches.order) for b in batches)
    assert (
        len(batches[2:]) == len(batches) - 2 and batches[-1].tolist() == list(batches)[-1].tolist()
    )


def test_make_batch_layout():
    examples = Examples([[10, 11, 12], [13]], [[20], [21, 22]])
    batch = make_batch(examples, [0, 1])
    assert batch.src.tolist() == [[10, 11, 12, EOS], [13, EOS, PAD, PAD]]
    assert batch.src_lengths.tolist() == [4, 2]
    assert batch.tgt_in.tolist() == [[BOS, 20, PAD], [BOS, 21, 22]]
    assert batch.tgt_out.tolist() == [[20, EOS, PAD], [21, 22, EOS]]
    assert batch.indices.tolist() == [0, 1]
    assert batch.num_target_tokens == 5
    # the trainer's count from the lengths alone (the loss's divisor over all ranks)
    from attnkit.nmt.training.objective import target_tokens

    assert target_tokens(examples, [0, 1]) == 5 and target_tokens(examples, [1]) == 3


def test_source_only_batch_has_no_targets():
    batch = make_batch(Examples([[7, 8]]), [0])
    assert batch.tgt_in is None and batch.tgt_out is None and batch.num_target_tokens == 0


def test_sorted_batches_cover_all_in_decreasing_length():
    examples = random_examples(50)
    batches = sorted_batches(examples, 8)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(50))
    lengths = [len(examples.src[i]) for i in flat]
    assert lengths == sorted(lengths, reverse=True)


def test_encode_examples_drops_only_overlong_pairs():
    tok = WordTokenizer.train(["a b c d e"])
    examples, dropped = encode_examples(
        ["a b", "a b c d", "a"], ["c", "d", "a b c d e"], tok, tok, max_src_len=3, max_tgt_len=4
    )
    assert dropped == 2
    assert examples.src == [tok.encode("a b")] and examples.tgt == [tok.encode("c")]
