"""load_run from Python: the checkpoint names it takes."""

import re

import pytest
import torch

from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.runs.checkpoint import load_checkpoint, save_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from conftest_nmt import make_run


def test_an_unknown_checkpoint_name_is_refused_naming_the_ones_there_are(tmp_path):
    # not "checkpoint not found: RUN/bets.json (written at the first checkpoint)"
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    with pytest.raises(ValueError, match="checkpoint must be one of auto, best, last, averaged"):
        load_run(folder, checkpoint="bets")
    assert load_run(folder, checkpoint="best").model is not None


def test_loading_a_run_draws_nothing_from_the_global_rng(tmp_path):
    # building the model to load the weights into initialises it randomly first
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    load_run(folder)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        (100_000_000, "encoder.rnn.weight_hh_l0 (24, 8) in the checkpoint, (300000000, 100000000)"),
        (10**12, "the model is too large to build (Storage size calculation overflowed"),
    ],
)
def test_a_config_asking_for_a_huge_model_is_refused_before_it_is_allocated(
    tmp_path, size, expected
):
    # a downloaded run folder whose config.yaml says hidden_size: 100000000 failed deep in
    # torch ("DefaultCPUAllocator: can't allocate memory: you tried to allocate 120000000
    # 000000000 bytes"), a traceback (attnkit serve stopped, serving none of its runs); a
    # size that fits in virtual memory was allocated and initialised
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    config = folder / "config.yaml"
    config.write_text(config.read_text().replace("hidden_size: 8", f"hidden_size: {size}"))
    with pytest.raises(ValueError, match="does not fit the model") as err:
        load_run(folder)
    assert expected in str(err.value)


def test_a_checkpoint_of_other_shapes_is_refused_naming_the_tensor(tmp_path):
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    config = folder / "config.yaml"
    config.write_text(config.read_text().replace("hidden_size: 8", "hidden_size: 9"))
    with pytest.raises(ValueError, match=r"weight_hh_l0 \(24, 8\) in the checkpoint, \(27, 9\)"):
        load_run(folder)


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, torch.complex64])
def test_weights_saved_as_other_than_floating_point_are_refused(tmp_path, dtype):
    # load_state_dict casts them without a word: int64 weights (a tool's quantised export,
    # a crafted file) loaded, and translated, as whole numbers; complex ones lost their
    # imaginary part with only a torch warning
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    ckpt = load_checkpoint(folder / "best.json")
    weights = dict(ckpt.model)
    weights["decoder.bridge.weight"] = (weights["decoder.bridge.weight"] * 100).to(dtype)
    save_checkpoint(folder, "best", weights, ckpt.state)
    expected = f"decoder.bridge.weight is {dtype} in the checkpoint, a floating-point tensor"
    with pytest.raises(ValueError, match=expected):
        load_run(folder)


def test_a_transformer_config_with_a_huge_position_table_is_refused_naming_the_key(tmp_path):
    # max_positions sizes the sinusoid tables, which no checkpoint holds: 10**9 failed deep
    # in torch ("you tried to allocate 64000000000 bytes"), a traceback
    model = {"arch": "transformer", "d_model": 8, "heads": 2, "ff_dim": 8}
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]), model=model)
    config = folder / "config.yaml"
    config.write_text(config.read_text().replace("max_positions: 512", "max_positions: 1000000000"))
    with pytest.raises(ValueError, match="model.max_positions: must be <= 65536, got 1000000000"):
        load_run(folder)


def test_a_config_with_more_layers_than_the_checkpoint_has_tensors_is_not_built(tmp_path):
    # encoder_layers: 1000000000 built a billion GRU layers (on the meta device, to
    # compare shapes) before it could say they do not fit: hours, and memory for each
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    config = folder / "config.yaml"
    text = config.read_text().replace("encoder_layers: 1", "encoder_layers: 3000")
    config.write_text(text)
    expected = "model.encoder_layers + model.decoder_layers are 3001 layers, more than the "
    with pytest.raises(ValueError, match=re.escape(expected)):
        load_run(folder)
