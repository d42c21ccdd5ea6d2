"""Training loop on a tiny reverse task: run folder, determinism, resume, early stop, reload."""

import json
import shutil

import pytest
import torch

from attnkit.nmt.config import RunConfig
from attnkit.nmt.data.batching import Examples
from attnkit.nmt.data.tokenizer import WordTokenizer, save_tokenizers
from attnkit.nmt.decoding.search import decode_examples
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.models.registry import build_translator
from attnkit.nmt.runs.checkpoint import load_checkpoint, save_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.training.loop import train

TINY = {
    "data": {
        "toy": {
            "task": "reverse",
            "num_symbols": 8,
            "min_len": 2,
            "max_len": 6,
            "train_size": 320,
            "valid_size": 24,
            "test_size": 24,
        },
        "max_src_len": None,
        "max_tgt_len": None,
    },
    "tokenizer": {"kind": "word", "vocab_size": 50},
    "model": {
        "embed_dim": 16,
        "hidden_size": 24,
        "dropout": 0.1,
        "score": "general",
        "query_timing": "current",
    },
    "train": {"batch_size": 32, "lr": 0.01, "epochs": 3, "valid_every": 5, "seed": 3, "threads": 1},
    "decode": {"beam_size": 2, "max_len_a": 1.0, "max_len_b": 2},
}


# A tiny Transformer in place of TINY's RNN (a --set override).
TRANSFORMER = (
    "model={arch: transformer, d_model: 16, heads: 4, encoder_layers: 2, decoder_layers: 2, "
    "ff_dim: 32, dropout: 0.1, attention_dropout: 0.1, share_embeddings: true}"
)


def config(*overrides):
    return RunConfig.from_dict(TINY, overrides)


def quiet(_line):
    pass


def weights(path):
    return load_checkpoint(path).model


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    summary = train(config("train.max_steps=20"), run_dir, progress_bar=False, echo=quiet)
    return run_dir, summary


def test_run_folder_holds_every_artifact(finished_run):
    run_dir, summary = finished_run
    for name in (
        "config.yaml",
        "tokenizer.json",
        "vocab.json",
        "best.json",
        "last.json",
        "metrics.jsonl",
        "learning_curve.png",
    ):
        assert (run_dir / name).is_file(), name
    assert len(list(run_dir.glob("*.safetensors"))) == 3  # best, last and last.prev
    assert (run_dir / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [5, 10, 15, 20]
    assert {"train_loss", "valid_loss", "valid_ppl", "valid_bleu", "lr"} <= set(rows[0])
    assert rows[-1]["train_loss"] < rows[0]["train_loss"]  # it learns
    assert summary.progress.step == 20 and summary.progress.finished
    assert summary.progress.stop_reason == "max_steps=20 reached"
    assert RunConfig.load(run_dir / "config.yaml").train.max_steps == 20


def test_same_seed_same_weights(finished_run, tmp_path):
    run_dir, _ = finished_run
    train(config("train.max_steps=20"), tmp_path, progress_bar=False, echo=quiet)
    first, second = weights(run_dir / "last.json"), weights(tmp_path / "last.json")
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_interrupted_run_resumes_to_the_same_weights(finished_run, tmp_path):
    run_dir, _ = finished_run

    def crash_after_step_10(line):
        if line.startswith("epoch 1 step 10:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config("train.max_steps=20"), tmp_path, progress_bar=False, echo=crash_after_step_10)
    assert load_checkpoint(tmp_path / "last.json").state["progress"]["step"] == 10
    summary = train(
        config("train.max_steps=20"), tmp_path, resume=True, progress_bar=False, echo=quiet
    )
    assert summary.progress.step == 20
    resumed, straight = weights(tmp_path / "last.json"), weights(run_dir / "last.json")
    assert all(torch.equal(resumed[k], straight[k]) for k in straight)
    steps = [json.loads(x)["step"] for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert steps == [5, 10, 15, 20]


def test_finished_run_is_reused_and_other_runs_are_protected(finished_run):
    run_dir, _ = finished_run
    messages = []
    summary = train(
        config("train.max_steps=20"), run_dir, resume=True, progress_bar=False, echo=messages.append
    )
    assert summary.reused and "reusing" in messages[0]
    with pytest.raises(ValueError, match="already holds a run; pass --resume") as caught:
        train(config("train.max_steps=20"), run_dir, progress_bar=False, echo=quiet)
    assert "--resume (resume=True in Python)" in str(caught.value)  # train() takes no flags
    assert "--overwrite (overwrite=True in Python)" in str(caught.value)
    with pytest.raises(ValueError, match="model.hidden_size: 24 in the run, 25 given") as caught:
        train(config("model.hidden_size=25"), run_dir, resume=True, progress_bar=False, echo=quiet)
    assert "pass --overwrite (overwrite=True in Python) to start over" in str(caught.value)


def test_resume_with_overwrite_is_refused_and_the_run_is_kept(finished_run, tmp_path):
    run_dir = shutil.copytree(finished_run[0], tmp_path / "run")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match="resume=True continues .* overwrite=True deletes it"):
        train(config(), run_dir, resume=True, overwrite=True, progress_bar=False, echo=quiet)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_a_finished_run_whose_budget_is_raised_trains_on(finished_run, tmp_path):
    shutil.copytree(finished_run[0], tmp_path, dirs_exist_ok=True)
    messages = []
    more = config("train.max_steps=25")
    summary = train(more, tmp_path, resume=True, progress_bar=False, echo=messages.append)
    assert not summary.reused and summary.progress.step == 25
    assert any("train.max_steps: 20 in the run, 25 given" in m for m in messages)
    assert "max_steps: 25" in (tmp_path / "config.yaml").read_text()
    again = train(more, tmp_path, resume=True, progress_bar=False, echo=quiet)
    assert again.reused and again.progress.step == 25


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (("train.batch_size=16",), "train.batch_size: 32 in the run, 16 given"),
        (("model.hidden_size=12",), "model.hidden_size: 24 in the run, 12 given"),
    ],
)
def test_resume_refuses_a_config_yaml_edited_by_hand(finished_run, tmp_path, edit, named):
    run_dir = shutil.copytree(finished_run[0], tmp_path / "run")
    edited = RunConfig.load(run_dir / "config.yaml", list(edit))
    (run_dir / "config.yaml").write_text(edited.to_yaml())  # what --resume RUN_DIR reads
    before = (run_dir / "last.json").read_bytes()
    more = RunConfig.load(run_dir / "config.yaml", ["train.max_steps=25"])
    with pytest.raises(ValueError, match="was trained with") as caught:
        train(more, run_dir, resume=True, progress_bar=False, echo=quiet)
    assert named in str(caught.value) and "config.yaml edited?" in str(caught.value)
    assert (run_dir / "last.json").read_bytes() == before  # nothing trained


def test_early_stopping_on_flat_validation_bleu(tmp_path):
    summary = train(
        config("train.lr=1e-12", "train.early_stopping=2", "train.valid_every=2"),
        tmp_path,
        progress_bar=False,
        echo=quiet,
    )
    assert summary.progress.stop_reason == "no BLEU gain in 2 validations"
    assert summary.progress.step == 6  # best at step 2, no gain at 4 and 6


@pytest.mark.parametrize("overrides", [(), (TRANSFORMER,)], ids=["rnn", "transformer"])
def test_saved_model_translates_exactly_like_the_original(tmp_path, overrides):
    cfg = config(*overrides)
    tok = WordTokenizer.train(["s0 s1 s2 s3 s4 s5"])
    torch.manual_seed(0)
    model = build_translator(cfg.model, tok.vocab_size, tok.vocab_size).eval()
    (tmp_path / "config.yaml").write_text(cfg.to_yaml())
    save_tokenizers(tmp_path, tok, tok)
    save_checkpoint(tmp_path, "best", model.state_dict(), {})
    run = load_run(tmp_path)
    lines = ["s1 s2 s3", "", "s5 s4", "s0 s0 s0 s1 s2"]
    loaded = translate_lines(run, lines)
    original = decode_examples(
        model,
        Examples([tok.encode(x) for x in lines if x]),
        beam_size=2,
        max_len_a=1.0,
        max_len_b=2,
    )
    assert [t.text for t in loaded] == [
        tok.decode(original[0].tokens),
        "",
        tok.decode(original[1].tokens),
        tok.decode(original[2].tokens),
    ]
    assert loaded[1].weights is None
    assert torch.equal(loaded[0].weights, original[0].weights)
    assert loaded[0].src_pieces == ["s1", "s2", "s3", "</s>"]
    assert len(loaded[0].tgt_pieces) == loaded[0].weights.shape[0]


def test_a_time_cap_that_cuts_the_step_budget_short_says_so(tmp_path):
    messages = []
    cfg = config("train.max_steps=100000", "train.max_minutes=0.0001", "train.valid_every=null")
    summary = train(cfg, tmp_path / "run", progress_bar=False, echo=messages.append)
    assert summary.progress.stop_reason == "max_minutes=0.0001 reached"
    note = messages[-2]  # before the checkpoint choice's line
    assert messages[-1].startswith("checkpoint auto: ")
    assert note.startswith("note: the time cap (train.max_minutes=0.0001) stopped training at step")
    assert "of train.max_steps=100000" in note and "--resume" in note


@pytest.mark.parametrize("schedule", ["inverse_sqrt", "linear"])
def test_epochs_that_end_inside_the_warm_up_say_so(tmp_path, schedule):
    # the run ended with the rate still rising towards train.lr, without a word
    messages = []
    budget = ("train.max_steps=100",) if schedule == "linear" else ()
    cfg = config(f"train.lr_schedule={schedule}", "train.warmup_steps=40", *budget,
                 "train.epochs=1", "train.valid_every=null")  # fmt: skip
    summary = train(cfg, tmp_path / "run", progress_bar=False, echo=messages.append)
    assert summary.progress.step == 10 and summary.history[-1]["lr"] == pytest.approx(
        0.01 * 11 / 40
    )
    assert messages[-2] == (
        "note: train.epochs=1 ended training at step 10, inside the warm-up "
        "(train.warmup_steps=40): the rate never reached train.lr=0.01; `attnkit train "
        f"--resume {tmp_path / 'run'} --train.epochs N` with a larger N trains on (or set a "
        "warm-up shorter than the epochs)"
    )


def test_epochs_that_end_a_linear_schedule_before_its_budget_say_so(tmp_path):
    # the run stopped with "epochs=1 done" and the rate near its peak, without a word
    messages = []
    linear = ("train.lr_schedule=linear", "train.warmup_steps=2", "train.min_lr=0.0")
    cfg = config(*linear, "train.max_steps=100", "train.epochs=1", "train.valid_every=null")
    summary = train(cfg, tmp_path / "run", progress_bar=False, echo=messages.append)
    assert summary.progress.stop_reason == "epochs=1 done" and summary.progress.step == 10
    assert summary.history[-1]["lr"] == pytest.approx(0.01 * 89 / 98)  # its line at step 11
    assert messages[-1].startswith("checkpoint auto: ")
    assert messages[-2] == (
        "note: train.epochs=1 ended training at step 10 of train.max_steps=100, before the "
        f"linear schedule's rate fell to train.min_lr=0; `attnkit train --resume {tmp_path / 'run'}"
        " --train.epochs N` with a larger N finishes the budget (or set max_steps to the steps "
        "of the epochs)"
    )
    # with the budget inside the epochs (or another schedule) nothing is said
    quiet_run = []
    cfg = config(*linear, "train.max_steps=10", "train.epochs=1", "train.valid_every=null")
    train(cfg, tmp_path / "inside", progress_bar=False, echo=quiet_run.append)
    assert not any(line.startswith("note:") for line in quiet_run)


def test_prepare_then_train_reuses_the_tokenizers_and_the_token_store(tmp_path):
    from attnkit.nmt.data.store import TokenStore
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.prepare import prepare_run

    folder = RunFolder(tmp_path / "run")
    heard = []
    prepared = prepare_run(config(), folder, progress_bar=False, echo=heard.append)
    built = TokenStore.open(folder.store)
    assert [built.src[i] for i in range(len(built))] == list(prepared.train.src)
    assert any(line.startswith("token store:") for line in heard)
    assert "tokenizer: training word on 320 pairs" in heard  # said before the wait
    heard.clear()
    train(config("train.max_steps=2"), folder.path, progress_bar=False, echo=heard.append)
    assert f"using the tokenizers prepared in {folder.path}" in heard
    assert not any(line.startswith("token store:") for line in heard)  # mapped, not rebuilt
    assert not any(line.startswith("tokenizer: train") for line in heard)


def test_a_new_dev_or_test_set_keeps_the_prepared_tokenizers_and_store(tmp_path):
    # neither is read for training: preparing again must not retrain and re-encode a corpus
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.prepare import prepare_run

    for name, line in (("train.src", "s1 s2 s3\n"), ("train.tgt", "s3 s2 s1\n")):
        (tmp_path / name).write_text(line * 40 + "s4 s5 s4 s5\n" * 5, encoding="utf-8")
    (tmp_path / "dev.src").write_text("s1 s2\n", encoding="utf-8")
    (tmp_path / "dev.tgt").write_text("s2 s1\n", encoding="utf-8")
    train_files = {"src": str(tmp_path / "train.src"), "tgt": str(tmp_path / "train.tgt")}
    dev = {"src": str(tmp_path / "dev.src"), "tgt": str(tmp_path / "dev.tgt")}
    data = {**TINY["data"], "toy": None, "train": train_files, "valid": train_files}
    folder = RunFolder(tmp_path / "run")

    def prepare(*overrides):
        heard = []
        cfg = RunConfig.from_dict({**TINY, "data": data}, overrides)
        prepare_run(cfg, folder, progress_bar=False, echo=heard.append)
        return [line for line in heard if line.startswith(("tokenizer:", "token store"))]

    assert prepare() != []  # the first time: tokenizers trained, store built
    assert prepare(f"data.valid={dev}", f"data.test={dev}") == []
    rebuilt = prepare(f"data.valid={dev}", "data.max_src_len=3")  # the store, not the tokenizers
    assert not any(line.startswith("tokenizer:") for line in rebuilt)
    assert any("rebuilding" in line for line in rebuilt)
    assert json.loads((folder.store / "meta.json").read_text())["dropped"] == 5


def test_prepare_on_a_run_of_another_config_changes_nothing_and_names_the_keys(tmp_path):
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.prepare import prepare_run

    folder = RunFolder(tmp_path / "run")
    train(config("train.max_steps=2"), folder.path, progress_bar=False, echo=quiet)
    meta = (folder.store / "meta.json").read_bytes()
    other = config("train.max_steps=2", "data.toy.train_size=200", "tokenizer.vocab_size=40")
    with pytest.raises(ValueError) as caught:
        prepare_run(other, folder, progress_bar=False, echo=quiet)
    assert str(caught.value) == (
        f"{folder.path} holds a run trained with another config (data.toy.train_size: 320 "
        "in the run, 200 given; tokenizer.vocab_size: 50 in the run, 40 given); prepare "
        "into another --out folder, or start that run over with attnkit train --overwrite"
    )
    assert (folder.store / "meta.json").read_bytes() == meta  # the run's store is untouched
    prepare_run(config("train.threads=2"), folder, progress_bar=False, echo=quiet)  # may change


def test_prepare_uses_train_threads_as_train_does(tmp_path, monkeypatch):
    import attnkit.nmt.training.prepare as prepare_module
    from attnkit.nmt.runs.run_folder import RunFolder

    seen = {}
    real_tokenizers, real_store = prepare_module.train_on_sample, prepare_module.open_training_store

    def tokenizers(sample, settings, threads):
        seen["tokenizer"] = threads  # sentencepiece's model depends on its thread count
        return real_tokenizers(sample, settings, threads)

    def store(*args, threads, **kwargs):
        seen["store"] = threads  # worker processes
        return real_store(*args, threads=threads, **kwargs)

    monkeypatch.setattr(prepare_module, "train_on_sample", tokenizers)
    monkeypatch.setattr(prepare_module, "open_training_store", store)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        prepare_module.prepare_run(
            config("train.threads=1"), RunFolder(tmp_path / "r"), progress_bar=False, echo=quiet
        )
    finally:
        torch.set_num_threads(before)
    assert seen == {"tokenizer": 1, "store": 1}


def test_a_tokenizer_trained_on_a_sample_says_of_how_many(tmp_path):
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.prepare import prepare_run

    heard = []
    cfg = config("tokenizer.sample_sentences=100")
    prepare_run(cfg, RunFolder(tmp_path / "run"), progress_bar=False, echo=heard.append)
    assert "tokenizer: training word on 100 pairs (a sample of 320)" in heard
    assert any(line.startswith("tokenizer: trained in ") for line in heard)


def test_other_ranks_map_rank_0_s_store_even_where_the_files_look_different(tmp_path):
    """A copy of the corpus on each machine (same path, other mtime) is allowed: the other
    ranks map the store rank 0 built in the shared folder, they never rebuild it."""
    import contextlib
    import os

    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.distributed import Group
    from attnkit.nmt.training.prepare import prepare_data, prepare_run

    class OtherRank(Group):  # rank 1, once rank 0 is done (no collectives in a test)
        def __init__(self):
            super().__init__(rank=1, world_size=2)

        @contextlib.contextmanager
        def main_first(self):
            yield

    for name, text in (("train.src", "s1 s2 s3\n" * 50), ("train.tgt", "s3 s2 s1\n" * 50)):
        (tmp_path / name).write_text(text, encoding="utf-8")
    files = {"src": str(tmp_path / "train.src"), "tgt": str(tmp_path / "train.tgt")}
    cfg = RunConfig.from_dict(
        {**TINY, "data": {"train": files, "valid": files, "max_src_len": None}}, []
    )
    folder = RunFolder(tmp_path / "run")
    prepare_run(cfg, folder, progress_bar=False, echo=quiet)
    meta = folder.store / "meta.json"
    built = meta.stat().st_mtime_ns
    os.utime(tmp_path / "train.src", ns=(1, 1))  # as the other machine's copy looks
    heard = []
    data = prepare_data(cfg, folder, resuming=False, group=OtherRank(), echo=heard.append)
    assert len(data.train) == 50
    assert not any("rebuilding" in line or line.startswith("token store:") for line in heard)
    assert meta.stat().st_mtime_ns == built


def test_a_store_build_logged_to_a_file_writes_lines_not_a_bar(tmp_path, capsys, monkeypatch):
    """``attnkit train ... 2> log``: no tqdm bar (carriage returns) in the log, but a
    plain line every 30 s (here every update), as docs/large_corpora.md says."""
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training import prepare

    monkeypatch.setattr(prepare._BuildMeter, "EVERY_S", 0.0)
    heard = []
    prepare.prepare_run(config(), RunFolder(tmp_path / "run"), progress_bar=True, echo=heard.append)
    assert "\r" not in capsys.readouterr().err  # stderr is not a terminal under capsys
    assert any(line.startswith("token store: 320 pairs read (") for line in heard)


def test_ctrl_c_while_the_data_is_prepared_stops_at_once(tmp_path, monkeypatch):
    # no step to save yet: KeyboardInterrupt, not a stop request honoured after prep + a step
    import signal

    from attnkit.nmt.training import loop

    real = loop.prepare_data

    def interrupted(*args, **kwargs):
        signal.raise_signal(signal.SIGINT)  # to this thread, now
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "prepare_data", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(config(), tmp_path / "run", echo=quiet)
    assert not (tmp_path / "run" / "last.json").exists()
    monkeypatch.setattr(loop, "prepare_data", real)
    assert train(config(), tmp_path / "run", echo=quiet).progress.finished  # a retry needs no flag


def test_a_resume_on_changed_training_data_says_it_no_longer_repeats_the_run(tmp_path):
    import os

    def corpus(pairs):
        for name, line in (("train.src", "s1 s2 s3\n"), ("train.tgt", "s3 s2 s1\n")):
            (tmp_path / name).write_text(line * pairs, encoding="utf-8")

    corpus(60)
    files = {"src": str(tmp_path / "train.src"), "tgt": str(tmp_path / "train.tgt")}
    tiny = {**TINY, "data": {"train": files, "valid": files, "max_src_len": None}}
    run = tmp_path / "run"
    train(RunConfig.from_dict(tiny, ["train.max_steps=2"]), run, progress_bar=False, echo=quiet)

    os.utime(tmp_path / "train.src", ns=(1, 1))  # the store is rebuilt, with the same pairs
    heard = []
    more = RunConfig.from_dict(tiny, ["train.max_steps=3"])
    train(more, run, resume=True, progress_bar=False, echo=heard.append)
    assert any("rebuilding" in line for line in heard), heard
    assert not any(line.startswith("note: the training data") for line in heard)

    corpus(80)
    heard.clear()
    more = RunConfig.from_dict(tiny, ["train.max_steps=4"])
    train(more, run, resume=True, progress_bar=False, echo=heard.append)
    assert (
        "note: the training data changed since this checkpoint (60 pairs, 180 + 180 tokens "
        "then; 80 pairs, 240 + 240 now): the run goes on with the new data, so it no longer "
        "repeats the run it resumes"
    ) in heard


def test_max_minutes_counts_training_not_the_data_preparation(tmp_path, monkeypatch):
    # a slow tokenizer training or store build (a large corpus) is not training time
    import time

    from attnkit.nmt.training import loop

    prepare = loop.prepare_data

    def slow_prepare(*args, **kwargs):
        data = prepare(*args, **kwargs)
        time.sleep(3.5)  # more than max_minutes=0.05 (3 s)
        return data

    monkeypatch.setattr(loop, "prepare_data", slow_prepare)
    cfg = config("train.max_minutes=0.05", "train.max_steps=2", "train.valid_every=null")
    summary = train(cfg, tmp_path / "run", progress_bar=False, echo=quiet)
    assert summary.progress.step == 2
    assert summary.progress.stop_reason == "max_steps=2 reached"
    assert summary.progress.elapsed_s < 3


@pytest.fixture
def caller_threads():
    """The calling process's own thread count (3), and its count before the test back after."""
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    yield 3
    torch.set_num_threads(before)


def test_training_gives_the_caller_its_thread_count_back(caller_threads, tmp_path):
    train(config("train.max_steps=5"), tmp_path / "a", progress_bar=False, echo=quiet)
    assert torch.get_num_threads() == caller_threads  # not train.threads (1)

    def stop_at_first_step(line):
        if line.startswith("epoch 1 step 5:"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config(), tmp_path / "b", progress_bar=False, echo=stop_at_first_step)
    assert torch.get_num_threads() == caller_threads


def test_prepare_gives_the_caller_its_thread_count_back(caller_threads, tmp_path):
    from attnkit.nmt.runs.run_folder import RunFolder
    from attnkit.nmt.training.prepare import prepare_run

    prepare_run(config(), RunFolder(tmp_path), progress_bar=False, echo=quiet)
    assert torch.get_num_threads() == caller_threads


def test_sigterm_while_the_data_is_prepared_stops_at_once_as_ctrl_c_does(tmp_path, monkeypatch):
    # SIGTERM (kill, a scheduler's scancel) before the first step ended the process outright
    # (status 143, no word) where Ctrl-C stops with KeyboardInterrupt (status 130)
    import signal

    from attnkit.nmt.training import loop

    real, heard = loop.prepare_data, []

    def terminated(*args, **kwargs):
        signal.raise_signal(signal.SIGTERM)
        return real(*args, **kwargs)

    def outside(signum, frame):  # SIGTERM outside train(): noted, so pytest is not ended
        heard.append(signum)

    monkeypatch.setattr(loop, "prepare_data", terminated)
    before = signal.signal(signal.SIGTERM, outside)
    try:
        with pytest.raises(KeyboardInterrupt):
            train(config(), tmp_path / "run", echo=quiet)
        assert heard == [] and signal.getsignal(signal.SIGTERM) is outside  # given back
    finally:
        signal.signal(signal.SIGTERM, before)
    assert not (tmp_path / "run" / "last.json").exists()
    monkeypatch.setattr(loop, "prepare_data", real)
    assert train(config(), tmp_path / "run", echo=quiet).progress.finished  # a retry needs no flag


def test_the_tokenizer_key_of_a_preset_is_the_one_earlier_versions_recorded():
    # a setting added to the tokenizer section (normalization), left at its default,
    # must not make every folder prepared before it train its tokenizers again
    from attnkit.nmt.config import RunConfig
    from attnkit.nmt.training.prepare import _tokenizer_key

    copy = RunConfig.preset("copy")
    assert _tokenizer_key(copy) == (
        "4fbddf14ec85f8a6a29bd08ab713f6d4c75eea1e2f3c248b37e29aeb35eb4213"  # attnkit bd2c911
    )
    changed = RunConfig.preset("copy", ["tokenizer.normalization=identity"])
    assert _tokenizer_key(changed) != _tokenizer_key(copy)
