"""load_run from Python: the checkpoint names it takes."""

import pytest
import torch

from attnkit.nmt.data.tokenizer import WordTokenizer
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
