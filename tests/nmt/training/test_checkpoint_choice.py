"""``--checkpoint auto``: best, last and averaged compared on the whole validation set when
training ends, recorded in RUN/choice.json, and followed while it still holds."""

import json

import pytest
from test_train import TINY

from attnkit.nmt.config import RunConfig
from attnkit.nmt.runs.checkpoint import load_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.runs.run_folder import RunFolder
from attnkit.nmt.training import objective
from attnkit.nmt.training.checkpoint_choice import pick
from attnkit.nmt.training.loop import train
from attnkit.nmt.training.prepare import validation_data

# 20 steps validated every 5; the last 3 snapshots averaged
RUN = ("train.max_steps=20", "train.average_last=3")


def trained(run_dir, *overrides):
    heard = []
    cfg = RunConfig.from_dict(TINY, [*RUN, *overrides])
    train(cfg, run_dir, progress_bar=False, echo=heard.append)
    return RunFolder(run_dir), heard


def whole_set_bleu(run_dir, name):
    run = load_run(run_dir, checkpoint=name)
    every = RunConfig.from_dict(TINY, [*RUN, "train.valid_bleu_sentences=null"])
    data = validation_data(every, run.src_tok, run.tgt_tok)
    scores = objective.validate(run.model, data.valid, data.references, run.tgt_tok, every, "cpu")
    return scores["valid_bleu"]


def test_a_run_that_read_part_of_the_valid_set_is_judged_on_all_of_it(tmp_path):
    folder, heard = trained(tmp_path, "train.valid_bleu_sentences=8")  # 8 of 24 sentences
    record = json.loads(folder.choice.read_text())
    best_step = load_checkpoint(folder.best).state["progress"]["best_step"]
    names = ["averaged", "last", "best"] if best_step != 20 else ["averaged", "best"]
    assert list(record["scores"]) == names and record["whole_valid_set"] is True
    steps = {"averaged": 20, "last": 20, "best": best_step}
    assert record["steps"] == {name: steps[name] for name in names}
    for name in names:
        assert record["scores"][name] == pytest.approx(whole_set_bleu(tmp_path, name), abs=1e-9)
    top = max(record["scores"].values())
    assert record["chosen"] == next(n for n in names if record["scores"][n] == top)
    assert folder.resolve_checkpoint("auto") == record["chosen"]
    shown = ", ".join(f"{n} {record['scores'][n]:.2f} at step {record['steps'][n]}" for n in names)
    line = f"checkpoint auto: {record['chosen']} (whole valid set, greedy BLEU: {shown})"
    assert heard[-1] == line


def test_a_run_that_read_the_whole_valid_set_is_judged_on_training_s_scores(tmp_path):
    folder, heard = trained(tmp_path, "train.max_steps=17")  # last (17) is not a snapshot step
    record = json.loads(folder.choice.read_text())
    rows = {
        r["step"]: r["valid_bleu"] for r in map(json.loads, folder.metrics.read_text().splitlines())
    }
    best = load_checkpoint(folder.best).state["progress"]
    averaged = load_checkpoint(folder.averaged).state
    assert record["whole_valid_set"] is False
    expected = {"averaged": averaged["valid_bleu"], "best": best["best_bleu"]}
    if best["best_step"] != 17:
        expected["last"] = rows[17]
    assert record["scores"] == pytest.approx(expected)
    assert heard[-1].startswith(f"checkpoint auto: {record['chosen']} (training's validation, ")


@pytest.mark.parametrize(
    ("scores", "chosen"),
    [
        ({"last": 30.0, "best": 30.0}, "last"),
        ({"averaged": 30.0, "last": 30.0, "best": 30.0}, "averaged"),
        ({"averaged": 29.9, "last": 30.0, "best": 30.0}, "last"),
        ({"averaged": 29.9, "last": 29.0, "best": 30.0}, "best"),
        ({"best": 12.0}, "best"),
    ],
)
def test_the_highest_score_wins_and_ties_go_to_the_later_weights(scores, chosen):
    assert pick(scores) == chosen


def test_a_record_whose_checkpoint_has_moved_on_is_not_followed(tmp_path):
    folder, _ = trained(tmp_path, "train.valid_bleu_sentences=8")
    record = json.loads(folder.choice.read_text())
    record["chosen"] = "averaged"
    folder.choice.write_text(json.dumps(record))
    assert folder.resolve_checkpoint("auto") == "averaged"
    record["steps"]["averaged"] = 15  # a resumed run's averaged now holds other steps
    folder.choice.write_text(json.dumps(record))
    averaged = load_checkpoint(folder.averaged).state
    old_rule = "averaged" if averaged["valid_bleu"] >= averaged["best_bleu"] else "best"
    assert folder.resolve_checkpoint("auto") == old_rule
    folder.choice.write_text("{torn")
    assert folder.resolve_checkpoint("auto") == old_rule
