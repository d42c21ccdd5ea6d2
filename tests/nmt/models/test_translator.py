"""The Translator interface's input checks, the same for every architecture."""

from __future__ import annotations

import pytest
import torch

from attnkit.nmt.vocab_ids import BOS
from conftest_nmt import pad, tiny_model, tiny_transformer

BUILDERS = {"rnn": tiny_model, "transformer": tiny_transformer}


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    src, src_lengths = pad([[4, 5, 6], [7, 8, 9, 10, 11]])
    tgt_in, _ = pad([[BOS, 6, 5], [BOS, 11, 10]])
    return src, src_lengths, tgt_in


@pytest.mark.parametrize("arch", BUILDERS)
@pytest.mark.parametrize("dtype", [torch.uint16, torch.int16, torch.uint8, torch.bool])
def test_token_ids_of_a_dtype_no_embedding_takes_are_named(arch, dtype, batch) -> None:
    # uint16 is the token store's id dtype: it failed inside the check itself
    # ('"min_all" not implemented for UInt16'), int16/uint8 deep in nn.Embedding
    model = BUILDERS[arch]()
    src, src_lengths, tgt_in = batch
    with pytest.raises(ValueError, match=rf"src must .* got .* dtype {dtype}; convert it"):
        model(src.to(dtype), src_lengths, tgt_in)
    with pytest.raises(ValueError, match=rf"tgt_in must .* dtype {dtype}; convert it"):
        model(src, src_lengths, tgt_in.to(dtype))
    with pytest.raises(ValueError, match=rf"tgt_in must .* dtype {dtype}; convert it"):
        model.attention_maps(src, src_lengths, tgt_in.to(dtype))
    memory = model.encode(src, src_lengths)
    with pytest.raises(ValueError, match=rf"prev_tokens must .* dtype {dtype}; convert it"):
        model.step(tgt_in[:, 0].to(dtype), model.initial_state(memory), memory)


@pytest.mark.parametrize("arch", BUILDERS)
@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.bool])
def test_lengths_of_a_dtype_torch_cannot_compare_are_named(arch, dtype, batch) -> None:
    # bool lengths read as 1 for every sentence; uint16 (the store's) failed in min()
    model = BUILDERS[arch]()
    src, src_lengths, tgt_in = batch
    with pytest.raises(ValueError, match=rf"src_lengths must .* dtype {dtype}; convert it"):
        model.encode(src, src_lengths.to(dtype))


@pytest.mark.parametrize("arch", BUILDERS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_int32_and_int64_token_ids_and_any_small_int_lengths_give_the_same_logits(
    arch, dtype, batch
) -> None:
    model = BUILDERS[arch]()
    src, src_lengths, tgt_in = batch
    expected, _ = model(src, src_lengths, tgt_in)
    for lengths in (torch.int32, torch.int16, torch.uint8):
        got, _ = model(src.to(dtype), src_lengths.to(lengths), tgt_in.to(dtype))
        torch.testing.assert_close(got, expected, atol=0, rtol=0)


def test_the_source_checks_read_each_tensor_back_once():
    # int(t.min()), int(t.max()): two ops and two reads back (a GPU waits for each) per
    # tensor, three tensors every training step; aminmax reads both bounds at once
    from attnkit.nmt.models.translator import check_ids, check_source
    from count_helpers import aten_ops

    src, lengths = torch.arange(24).reshape(4, 6) % 5, torch.tensor([6, 5, 2, 1])
    for check in (lambda: check_source(src, lengths), lambda: check_ids("src", src, 5)):
        assert aten_ops(check) == {"aminmax": 1, "stack": 1}
    with pytest.raises(ValueError, match=r"src holds token ids in \[0, 4\] but the vocabulary"):
        check_ids("src", src, 4)
