"""Word alignments from attention: gold files, subword merging, link rules, forced decoding."""

import pytest
import torch

from attnkit.nmt.analysis.align import (
    AlignOptions,
    align_words,
    default_shift,
    encode_words,
    extract_links,
    format_pharaoh,
    merge_pieces,
    read_bitext,
    read_gold,
)
from attnkit.nmt.data.tokenizer import SPECIALS, WordTokenizer
from attnkit.nmt.vocab_ids import BOS, EOS, UNK
from conftest_nmt import pad, tiny_model, tiny_transformer

WORDS = WordTokenizer([*SPECIALS, *"abcdefgh"])  # 12 ids: fits the tiny models


def test_gold_file_reads_sure_and_possible_links_zero_based(tmp_path):
    path = tmp_path / "gold"
    path.write_text("1-1 2p3 3-2\n\n1p1\n")
    gold = read_gold(path)
    assert gold.sure == [{(0, 0), (2, 1)}, set(), set()]
    assert gold.possible == [{(0, 0), (1, 2), (2, 1)}, set(), {(0, 0)}]
    assert read_gold(path, one_based=False).sure[0] == {(1, 1), (3, 2)}


@pytest.mark.parametrize("bad", ["1-x", "0-1", "12", "1-2-3", "1-\u00b2", "\u00b92-1"])
def test_bad_gold_link_names_file_line_and_link(tmp_path, bad):
    path = tmp_path / "gold"
    path.write_text(f"1-1\n2-2 {bad}\n")
    with pytest.raises(ValueError, match=rf"gold, line 2: '{bad}' is not a link"):
        read_gold(path)


def test_bitext_splits_sides_and_rejects_lines_without_separator(tmp_path):
    path = tmp_path / "pairs"
    path.write_text("the cat . ||| le chat .\n")
    assert read_bitext(path) == ([["the", "cat", "."]], [["le", "chat", "."]])
    path.write_text("ok ||| ok\nno separator\n")
    with pytest.raises(ValueError, match="pairs, line 2: expected 'source ||| target'"):
        read_bitext(path)


def test_pharaoh_text_is_sorted_zero_based_pairs():
    assert format_pharaoh({(2, 1), (0, 0), (0, 3)}) == "0-0 0-3 2-1"
    assert format_pharaoh(set()) == ""


class _Pieces:
    """A tokenizer splitting words into characters; '~' maps to nothing."""

    def encode(self, text):
        return [4 + "abcdefgh".index(c) for c in text if c != "~"]

    def encode_batch(self, texts, threads=1):
        return [self.encode(text) for text in texts]


def test_encode_words_maps_every_piece_to_its_word_and_empty_words_to_unk():
    ids, word_of = encode_words(_Pieces(), ["ab", "~", "c"])
    assert ids == [4, 5, UNK, 6] and word_of == [0, 0, 1, 2]


# target words: t0 = pieces 0,1; t1 = piece 2. source words: s0 = piece 0; s1 = pieces 1,2
PIECE_WEIGHTS = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])


def test_sum_merge_adds_source_pieces_and_averages_target_pieces():
    words = merge_pieces(PIECE_WEIGHTS, [0, 0, 1], [0, 1, 1], "sum")
    expected = torch.tensor([[(0.5 + 0.1) / 2, (0.5 + 0.9) / 2], [0.2, 0.8]])
    torch.testing.assert_close(words, expected)
    torch.testing.assert_close(words.sum(-1), torch.ones(2))  # rows stay distributions


def test_max_merge_takes_the_largest_piece_weight_on_both_sides():
    words = merge_pieces(PIECE_WEIGHTS, [0, 0, 1], [0, 1, 1], "max")
    torch.testing.assert_close(words, torch.tensor([[0.5, 0.6], [0.2, 0.6]]))


def test_merge_rejects_piece_maps_that_do_not_fit():
    with pytest.raises(ValueError, match=r"weights has shape \(3, 3\) but the piece maps"):
        merge_pieces(PIECE_WEIGHTS, [0, 1], [0, 1, 1])


@pytest.mark.parametrize("merge", ["sum", "max"])
def test_merge_refuses_a_piece_map_that_skips_a_word(merge):
    # a word that became no piece (a tokenizer's word_ids() skips it): target word 1 here
    # got a NaN row (sum) or a zero row (max), and argmax then linked it to source word 0
    with pytest.raises(
        ValueError,
        match="tgt_word_of must number the words 0, 1, 2, ... in "
        "order, each with at least one piece; piece 2 has word 2 after word 0",
    ):
        merge_pieces(PIECE_WEIGHTS, [0, 0, 2], [0, 1, 1], merge)
    with pytest.raises(ValueError, match="src_word_of .* piece 0 has word 1$"):
        merge_pieces(PIECE_WEIGHTS, [0, 0, 1], [1, 2, 2], merge)
    with pytest.raises(ValueError, match="src_word_of .* piece 2 has word 0 after word 1"):
        merge_pieces(PIECE_WEIGHTS, [0, 0, 1], [0, 1, 0], merge)


def test_argmax_links_each_target_word_once_and_threshold_keeps_heavy_cells():
    words = torch.tensor([[0.7, 0.3], [0.45, 0.55]])  # (Tw=2, Sw=2)
    assert extract_links(words, "argmax") == {(0, 0), (1, 1)}
    assert extract_links(words, "threshold", 0.4) == {(0, 0), (0, 1), (1, 1)}
    assert extract_links(words, "threshold", 0.9) == set()


def test_threshold_links_keep_a_weight_equal_to_tau():
    # w >= tau: a one-hot row (weight exactly 1.0, the largest tau allowed) and a word
    # split evenly over two source words (0.5 each, exact in floating point) are linked
    words = torch.tensor([[1.0, 0.0], [0.5, 0.5]])  # (Tw=2, Sw=2)
    assert extract_links(words, "threshold", 1.0) == {(0, 0)}
    assert extract_links(words, "threshold", 0.5) == {(0, 0), (0, 1), (1, 1)}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda w: extract_links(w, "Argmax"),
            "method must be 'argmax' or 'threshold', got 'Argmax'",
        ),
        (lambda w: extract_links(w, "threshold", 0.0), r"threshold must be in \(0, 1\], got 0.0"),
        (lambda w: extract_links(w, "threshold", -1), r"threshold must be in \(0, 1\], got -1"),
        (lambda w: merge_pieces(w, [0, 1], [0, 0], "mean"), "merge must be 'sum' or 'max'"),
    ],
)
def test_the_public_link_functions_refuse_a_rule_they_do_not_know(call, message):
    # before: an unknown method fell through to the threshold rule, tau <= 0 linked every
    # pair, and an unknown merge to max: links that looked real
    words = torch.tensor([[0.7, 0.3], [0.45, 0.55]])  # (Tw=2, Sw=2)
    with pytest.raises(ValueError, match=message):
        call(words)


def test_bad_options_name_the_option():
    with pytest.raises(ValueError, match="shift must be 0 or 1"):
        AlignOptions(shift=2)
    with pytest.raises(ValueError, match=r"threshold must be in \(0, 1\]"):
        AlignOptions(method="threshold", threshold=0.0)


def test_default_shift_follows_the_query_timing_of_the_config():
    assert default_shift(tiny_model(query_timing="previous").config) == 1
    assert default_shift(tiny_model(query_timing="current").config) == 0
    assert default_shift(object()) == 0  # a Transformer config has no query_timing


SOURCES = [["a", "b", "c"], ["d", "e", "f", "g", "h"]]
TARGETS = [["h", "g"], ["a", "c", "e", "b"]]


def _teacher_forced(model, k: int) -> torch.Tensor:
    """Weights ``(T+1, S+1)`` of sentence ``k`` alone from the training pass ``model(...)``."""
    src, src_lengths = pad([WORDS.encode(" ".join(SOURCES[k])) + [EOS]])
    tgt_in, _ = pad([[BOS, *WORDS.encode(" ".join(TARGETS[k]))]])
    return model(src, src_lengths, tgt_in)[1][0]


@pytest.mark.parametrize(
    ("build", "timing"),
    [(tiny_model, "previous"), (tiny_model, "current"), (tiny_transformer, None)],
)
@pytest.mark.parametrize("shift", [0, 1])
def test_forced_decoding_gives_the_weights_of_the_teacher_forced_pass(build, timing, shift):
    model = build(**({} if timing is None else {"query_timing": timing}))
    options = AlignOptions(shift=shift, layer=-1, head=None)  # the models' alignment view
    batched = align_words(model, WORDS, WORDS, SOURCES, TARGETS, options, batch_size=2)
    for k, result in enumerate(batched):
        expected = _teacher_forced(model, k)[shift : shift + len(TARGETS[k]), : len(SOURCES[k])]
        torch.testing.assert_close(result.weights, expected, atol=1e-5, rtol=1e-4)
        assert result.links == extract_links(expected)


def test_empty_pairs_get_no_links_and_keep_their_place():
    results = align_words(tiny_model(), WORDS, WORDS, [["a"], [], ["b"]], [["c"], ["d"], []])
    assert [r.weights.shape for r in results] == [(1, 1), (1, 0), (0, 1)]
    assert [r.links for r in results] == [{(0, 0)}, set(), set()]


def test_a_pair_longer_than_the_position_table_is_left_unaligned_and_named():
    model = tiny_transformer(max_positions=5)  # 4 pieces a side, with </s> or <s>
    fits = align_words(model, WORDS, WORDS, [list("abcd")], [list("efgh")])
    assert fits[0].weights.shape == (4, 4)
    said = []
    found = align_words(
        model, WORDS, WORDS, [["a"], list("abcde"), ["c"]], [["b"], ["c"], list("abcde")],
        warn=said.append,
    )  # fmt: skip
    alone = align_words(model, WORDS, WORDS, [["a"]], [["b"]])
    assert found[0].links == alone[0].links and torch.equal(found[0].weights, alone[0].weights)
    assert [a.links for a in found[1:]] == [set(), set()]
    assert [tuple(a.weights.shape) for a in found[1:]] == [(1, 5), (5, 1)]
    assert said == [
        "2 pair(s) have a side of more than 4 pieces, the most this model aligns "
        "(model.max_positions 5); left unaligned (empty lines): pair 2, 3"
    ]
    with pytest.warns(UserWarning, match=r"left unaligned \(empty lines\): pair 2$"):
        align_words(model, WORDS, WORDS, [["a"], list("abcde")], [["b"], ["c"]])
