"""load_run from Python: the checkpoint names it takes."""

import pytest

from attnkit.nmt.data.tokenizer import WordTokenizer
from attnkit.nmt.runs.loaded_run import load_run
from conftest_nmt import make_run


def test_an_unknown_checkpoint_name_is_refused_naming_the_ones_there_are(tmp_path):
    # not "checkpoint not found: RUN/bets.json (written at the first checkpoint)"
    folder = make_run(tmp_path, WordTokenizer.train(["ein Mann", "zwei Hunde"]))
    with pytest.raises(ValueError, match="checkpoint must be one of auto, best, last, averaged"):
        load_run(folder, checkpoint="bets")
    assert load_run(folder, checkpoint="best").model is not None
