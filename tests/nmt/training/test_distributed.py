"""Data-parallel training (nmt/training/distributed.py) under torchrun on CPU, gloo, loopback only.

A 2-process run follows the 1-process run with the same global batch and seed
step by step; every rank ends with the same weights; a killed or stopped
launcher resumes to the uninterrupted run's weights; two "nodes" on 127.0.0.1
train one model; a dead peer is a clear error, not a hang. Tiny reverse-task
models, one thread per process.
"""

import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml
from test_train import TRANSFORMER, config, quiet

from attnkit.nmt.data.batching import Examples, encode_examples, make_batch
from attnkit.nmt.data.corpus import load_split
from attnkit.nmt.runs.averaging import average_weights
from attnkit.nmt.runs.checkpoint import load_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.runs.run_folder import RunFolder
from attnkit.nmt.runs.runlock import RunInUse, run_lock
from attnkit.nmt.training.distributed import ENV_TIMEOUT, Group, join
from attnkit.nmt.training.objective import target_tokens, validate
from attnkit.nmt.training.trainer import Trainer
from conftest_nmt import TOY_VOCAB
from resume_helpers import REVERSE, ROOT, assert_same_run, finish, wait_for_checkpoint

RUN = [
    "--no-progress",
    "--data.toy.train_size", "320",
    "--data.toy.valid_size", "8",
    "--data.toy.test_size", "8",
    "--train.batch_size", "32",
    "--train.epochs", "2",
    "--train.valid_every", "1",  # one metrics row per step: per-step losses
    "--train.early_stopping", "null",
    "--train.checkpoint_every", "3",
    "--train.threads", "1",
]  # fmt: skip
SMALL = [*RUN, "--model.embed_dim", "16", "--model.hidden_size", "32"]
STEPS = 2 * 10  # 320 / 32 batches per epoch
TOLERANCE = 1e-5  # the same sums in another order: float32 rounding only
ENV = {
    "PYTHONPATH": str(ROOT / "src"),
    "OMP_NUM_THREADS": "1",
    "GLOO_SOCKET_IFNAME": "lo",  # loopback only
    "ATTNKIT_DIST_TIMEOUT_S": "60",
}
LOOPBACK = ["--local_addr", "127.0.0.1"]


def launch(argv, **env):
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env={**os.environ, **ENV, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def torchrun(*args, launcher=("--standalone", "--nproc_per_node", "2")):
    """``torchrun LAUNCHER -m attnkit ARGS`` as a process."""
    run = [sys.executable, "-m", "torch.distributed.run", *LOOPBACK, *launcher]
    return launch([*run, "-m", "attnkit", *args])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ok(process, timeout=120):
    code, out, err = finish(process, timeout)
    assert code == 0, err
    return err


def rows(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same training on 2 processes (torchrun) and on 1 (plain attnkit train)."""
    base = tmp_path_factory.mktemp("runs")
    two = torchrun("train", REVERSE, "--out", str(base / "two"), *SMALL)
    one = launch(
        [sys.executable, "-m", "attnkit", "train", REVERSE, "--out", str(base / "one"), *SMALL]
    )
    return base / "two", base / "one", ok(two), ok(one)


@pytest.mark.slow
def test_two_processes_follow_the_one_process_run_step_by_step(runs):
    two, one, log, _ = runs
    assert "× 2 processes (gloo)" in log and "32 sentences per step in all, ~16 each" in log
    a, b = rows(two), rows(one)
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, STEPS + 1))
    for x, y in zip(a, b, strict=True):
        assert abs(x["train_loss"] - y["train_loss"]) < TOLERANCE, (x, y)
        assert abs(x["valid_loss"] - y["valid_loss"]) < TOLERANCE, (x, y)
        assert x["lr"] == y["lr"]


@pytest.mark.slow
def test_every_rank_ends_with_the_same_weights_and_rank_0_alone_reports(runs):
    _, _, log, _ = runs
    assert "weights identical on all 2 processes" in log
    assert log.count("stopped: epochs=2 done") == 1 and "Traceback" not in log


@pytest.mark.slow
def test_rank_0_validation_equals_a_single_process_validation_of_its_weights(runs):
    two, *_ = runs
    run = load_run(two, checkpoint="last")
    config = run.config
    valid = load_split(config.data, "valid")
    examples, _ = encode_examples(valid.src, valid.tgt, run.src_tok, run.tgt_tok)
    scores = validate(run.model, examples, valid.tgt, run.tgt_tok, config, run.device)
    last = rows(two)[-1]
    assert scores["valid_bleu"] == last["valid_bleu"]
    assert abs(scores["valid_loss"] - last["valid_loss"]) < 1e-6


def wait_for_free(run_dir, timeout=15):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with run_lock(run_dir):
                return
        except RunInUse:
            assert time.monotonic() < deadline, "the workers outlived their launcher"
            time.sleep(0.1)


def saved_progress(run_dir):
    return json.loads((run_dir / "last.json").read_text())["state"]["progress"]


@pytest.mark.slow
def test_stopped_then_killed_launcher_resumes_to_the_uninterrupted_weights(runs, tmp_path):
    two, *_ = runs
    run_dir = tmp_path / "run"
    launcher = torchrun("train", REVERSE, "--out", str(run_dir), *SMALL)
    wait_for_checkpoint(launcher, run_dir)
    launcher.send_signal(signal.SIGTERM)  # torchrun passes it on to every rank
    _, _, err = finish(launcher)
    assert err.count("interrupted (SIGTERM) at epoch") == 1, err  # rank 0 saved, once
    assert "weights identical on all 2 processes" in err
    assert "attnkit" not in err.split("Traceback", 1)[-1]  # no rank failed: torchrun's report
    stopped_at = saved_progress(run_dir)["step"]
    assert 0 < stopped_at < STEPS
    wait_for_free(run_dir, timeout=5)

    launcher = torchrun("train", "--resume", str(run_dir), "--no-progress")
    while saved_progress(run_dir)["step"] == stopped_at:
        assert launcher.poll() is None, launcher.communicate()
        time.sleep(0.005)
    launcher.send_signal(signal.SIGKILL)  # between checkpoints; its workers die with it
    launcher.wait(timeout=30)
    wait_for_free(run_dir)
    assert saved_progress(run_dir)["step"] < STEPS
    ok(torchrun("train", "--resume", str(run_dir), "--no-progress"))
    assert_same_run(run_dir, two, steps=STEPS)


@pytest.mark.slow
def test_two_nodes_on_loopback_train_one_model_and_stop_cleanly(runs, tmp_path):
    two, *_ = runs
    endpoint = f"127.0.0.1:{free_port()}"
    launcher = ["--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d"]
    launcher += ["--rdzv_endpoint", endpoint, "--rdzv_id", "two-nodes"]
    args = ("train", REVERSE, "--out", str(tmp_path / "run"), *SMALL, "--train.max_steps", "4")
    nodes = [torchrun(*args, launcher=(*launcher, "--node_rank", str(n))) for n in (0, 1)]
    logs = [ok(node) for node in nodes]
    assert sum("stopped: max_steps=4 reached" in log for log in logs) == 1
    losses = [r["train_loss"] for r in rows(tmp_path / "run")]
    assert losses == [r["train_loss"] for r in rows(two)][:4]  # the same 2-rank computation


def plain_ranks(*args, world=2, program=("-m", "attnkit")):
    """``WORLD_SIZE`` processes of ``attnkit train`` joined by environment variables alone
    (``program``: what ``python`` runs with ``train ARGS`` as its arguments)."""
    port = str(free_port())
    ranks = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "WORLD_SIZE": str(world)}
    command = [sys.executable, *program, "train", *args]
    return [launch(command, **ranks, RANK=str(r), LOCAL_RANK=str(r)) for r in range(world)]


# attnkit's CLI on sys.argv, then the libraries only rank 0 needs that this process loaded
LOADED = """
import json, sys
from attnkit.cli import main
code = main(sys.argv[1:])
only_rank_0 = ("matplotlib", "sacrebleu")  # the learning curve; validation BLEU
print("loaded:", json.dumps([m for m in only_rank_0 if m in sys.modules]), file=sys.stderr)
sys.exit(code)
"""


@pytest.mark.slow
def test_only_rank_0_loads_the_plotting_and_bleu_libraries(tmp_path):
    """Rank 0 validates and draws the learning curve; the other ranks never load
    matplotlib or sacreBLEU (about 35 and 5 MB of resident memory a process)."""
    args = [REVERSE, *SMALL, "--train.max_steps", "4", "--out", str(tmp_path / "run")]
    logs = [ok(p) for p in plain_ranks(*args, program=("-c", LOADED))]
    loaded = [json.loads(log.rsplit("loaded: ", 1)[1]) for log in logs]
    assert loaded == [["matplotlib", "sacrebleu"], []]
    assert (tmp_path / "run" / "learning_curve.png").is_file()


@pytest.mark.slow
def test_a_transformer_trains_data_parallel_like_one_process(tmp_path):
    raw = yaml.safe_load(Path(REVERSE).read_text())
    raw["model"] = {"arch": "transformer", "d_model": 16, "heads": 2, "encoder_layers": 1}
    raw["model"].update(decoder_layers=1, ff_dim=32, dropout=0.0, attention_dropout=0.0)
    config = tmp_path / "transformer.yaml"
    config.write_text(yaml.safe_dump(raw))
    args = [str(config), *RUN, "--train.max_steps", "4"]
    processes = plain_ranks(*args, "--out", str(tmp_path / "two"))
    one = launch([sys.executable, "-m", "attnkit", "train", *args, "--out", str(tmp_path / "one")])
    assert "weights identical on all 2 processes" in [ok(p) for p in processes][0]
    ok(one)
    for x, y in zip(rows(tmp_path / "two"), rows(tmp_path / "one"), strict=True):
        assert abs(x["train_loss"] - y["train_loss"]) < TOLERANCE, (x, y)


@pytest.mark.slow
def test_bf16_trains_data_parallel_like_one_process_in_bf16(tmp_path):
    args = [REVERSE, *SMALL, "--train.max_steps", "4", "--train.precision", "bf16"]
    processes = plain_ranks(*args, "--out", str(tmp_path / "two"))
    one = launch([sys.executable, "-m", "attnkit", "train", *args, "--out", str(tmp_path / "one")])
    log = [ok(p) for p in processes][0]
    assert "weights identical on all 2 processes" in log
    assert "precision bf16: train.precision is bf16" in log
    ok(one)
    for x, y in zip(rows(tmp_path / "two"), rows(tmp_path / "one"), strict=True):
        assert x["train_loss"] == pytest.approx(y["train_loss"], rel=1e-2), (x, y)
    weights = load_run(tmp_path / "two", checkpoint="last").model.state_dict().values()
    assert {t.dtype for t in weights} == {torch.float32}


@pytest.mark.slow
def test_rank_0_keeps_the_snapshots_and_writes_the_averaged_checkpoint(tmp_path):
    run_dir = tmp_path / "run"
    args = [REVERSE, *SMALL, "--train.max_steps", "4", "--train.average_last", "3"]
    logs = [ok(p) for p in plain_ranks(*args, "--out", str(run_dir))]
    assert sum("averaged 3 snapshots (steps 2, 3, 4)" in log for log in logs) == 1
    folder = RunFolder(run_dir)
    assert folder.snapshots.steps() == [2, 3, 4]
    assert len(list(folder.snapshots.folder.glob("*.safetensors"))) == 3
    snapshots = [load_checkpoint(folder.snapshots.path(s)).model for s in (2, 3, 4)]
    expected, averaged = average_weights(snapshots), load_checkpoint(folder.averaged).model
    assert all(torch.equal(averaged[k], expected[k]) for k in expected)


@pytest.mark.slow
def test_every_rank_takes_rank_0_s_auto_step_budget(tmp_path):
    auto = ["--train.lr_schedule", "linear", "--train.max_steps", "auto",
            "--train.warmup_steps", "20", "--train.max_minutes", "0.2", "--train.epochs", "100",
            "--train.valid_every", "5", "--train.checkpoint_every", "null"]  # fmt: skip
    logs = [ok(p) for p in plain_ranks(REVERSE, *SMALL, *auto, "--out", str(tmp_path / "run"))]
    lines = [line for line in logs[0].splitlines() if line.startswith("train.max_steps auto:")]
    assert lines and not any("train.max_steps auto:" in line for line in logs[1].splitlines())
    budget = int(lines[-1].split()[2])  # the last word on it, lowered or not
    assert "weights identical on all 2 processes" in logs[0]
    progress = saved_progress(tmp_path / "run")
    assert progress["step_budget"] == budget
    assert progress["step"] == budget or "max_minutes=0.2 reached" in logs[0]


@pytest.mark.slow
def test_a_fine_tuning_run_starts_every_rank_from_the_parents_weights(tmp_path):
    single, parent = [sys.executable, "-m", "attnkit", "train"], tmp_path / "parent"
    args = [REVERSE, *SMALL, "--train.max_steps", "2"]
    ok(launch([*single, *args, "--out", str(parent)]))
    args += ["--train.init_from", str(parent)]
    processes = plain_ranks(*args, "--out", str(tmp_path / "two"))
    one = launch([*single, *args, "--out", str(tmp_path / "one")])
    logs = [ok(p) for p in processes]
    ok(one)
    assert sum(f"initialised from {parent} (checkpoint best, step 2)" in log for log in logs) == 1
    assert "weights identical on all 2 processes" in logs[0]
    for x, y in zip(rows(tmp_path / "two"), rows(tmp_path / "one"), strict=True):
        assert abs(x["train_loss"] - y["train_loss"]) < TOLERANCE, (x, y)
        assert abs(x["valid_loss"] - y["valid_loss"]) < TOLERANCE, (x, y)
    assert rows(tmp_path / "one")[0]["valid_loss"] < rows(parent)[0]["valid_loss"]


@pytest.mark.slow
def test_a_dead_peer_is_a_one_line_error_not_a_hang(tmp_path):
    run_dir = tmp_path / "run"
    main, other = plain_ranks(REVERSE, "--out", str(run_dir), *SMALL)
    wait_for_checkpoint(main, run_dir)
    other.send_signal(signal.SIGKILL)
    code, _, err = finish(main, timeout=60)
    assert code == 1, err
    assert err.splitlines()[-1].startswith("attnkit train: error: rank 0: another process")
    assert "Traceback" not in err


def test_a_group_of_one_changes_nothing():
    group = Group()
    assert group.is_main and not group.distributed and group.describe() == ""
    assert group.share([5, 6, 7]) == [5, 6, 7] and group.mean(2.5) == 2.5
    assert group.any(True, False) == [True, False] and group.broadcast([1.0]) == [1.0]
    model = torch.nn.Linear(2, 2)
    assert group.wrap(model) is model and group.same_everywhere(model)


def test_a_global_batch_is_shared_out_by_rank():
    shares = [Group(rank, 3).share(list(range(8))) for rank in range(3)]
    assert shares == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_a_bad_collective_timeout_is_named(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv(ENV_TIMEOUT, "soon")
    message = f"{ENV_TIMEOUT} must be a number of seconds > 0, got 'soon'"
    with pytest.raises(ValueError, match=message), join(torch.device("cpu")):
        pass


def _uneven_pairs() -> Examples:
    """Six reversal pairs, shared out [0, 2, 4] / [1, 3, 5] by 2 ranks: rank 0 gets the
    short ones with one link each, rank 1 the long ones with every piece linked."""
    generator = torch.Generator().manual_seed(3)
    src, tgt, links = [], [], []
    for i, n in enumerate([2, 9, 3, 8, 4, 7]):
        s = torch.randint(4, TOY_VOCAB, (n,), generator=generator).tolist()
        src.append(s)
        tgt.append(s[::-1])
        pieces = range(n) if i % 2 else range(1)
        links.append([x for t in pieces for x in (n - 1 - t, t)])  # [s, t, ...]
    return Examples(src, tgt, links)


def _guided_step(group: Group, folder: Path) -> tuple[float, dict[str, torch.Tensor]]:
    """One real ``Trainer.train_step`` of a guided Transformer on this rank's share of
    :func:`_uneven_pairs`: the global loss it returns and the gradients it leaves."""
    cfg = config(
        TRANSFORMER,
        "model.dropout=0.0",
        "model.attention_dropout=0.0",
        "train.clip=null",
        "train.precision=fp32",
        "train.guided_alignment={file: x.align, weight: 1.0, heads: all}",
    )
    trainer = Trainer(cfg, RunFolder(folder), quiet, False, group)
    vocab = SimpleNamespace(vocab_size=TOY_VOCAB)
    trainer.setup(SimpleNamespace(src_tok=vocab, tgt_tok=vocab))
    examples = _uneven_pairs()
    everything = list(range(len(examples)))
    batch = make_batch(examples, group.share(everything))
    value = trainer.train_step(batch, target_tokens(examples, everything))
    return value, {k: p.grad.clone() for k, p in trainer.model.named_parameters()}


def _guided_rank(rank: int, port: int, folder: Path) -> None:
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = datetime.timedelta(seconds=60)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timeout)
    try:
        value, grads = _guided_step(Group(rank, 2), folder)
        if rank == 0:
            torch.save({"value": torch.tensor(value), **grads}, folder / "rank0.pt")
    finally:
        dist.destroy_process_group()


def test_guided_alignment_on_two_ranks_with_uneven_links_is_the_one_process_step(tmp_path):
    value, one = _guided_step(Group(), tmp_path)
    mp.spawn(_guided_rank, args=(free_port(), tmp_path), nprocs=2, join=True)
    two = torch.load(tmp_path / "rank0.pt", weights_only=True)
    # L_a is a mean over the batch's linked rows: 3 on rank 0, 24 on rank 1
    assert two.pop("value").item() == pytest.approx(value, abs=1e-5)
    scale = max(g.abs().max().item() for g in one.values())
    for name, grad in one.items():
        assert (two[name] - grad).abs().max().item() < 1e-5 * scale, name


def _slow_main_rank(rank: int, port: int, folder: Path) -> None:
    """Rank 0's block in ``main_first`` outlasts the collective timeout (1 s) three times,
    as a large corpus's tokenizers and token store outlast ATTNKIT_DIST_TIMEOUT_S."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    timeout = datetime.timedelta(seconds=1)
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=timeout)
    try:
        group = Group(rank, 2)
        with group.main_first():
            if group.is_main:
                time.sleep(3.0)
                (folder / "prepared").write_text("by rank 0")
            seen = (folder / "prepared").read_text()
        mean = group.mean(float(rank))  # the usual collectives still work afterwards
        (folder / f"rank{rank}.json").write_text(json.dumps([seen, mean]))
    finally:
        dist.destroy_process_group()


def test_the_other_ranks_wait_for_rank_0_s_data_work_past_the_collective_timeout(tmp_path):
    # they raised PeerLost ('another process of this training stopped answering ...
    # resume from the last checkpoint') once rank 0's data work passed the timeout
    mp.spawn(_slow_main_rank, args=(free_port(), tmp_path), nprocs=2, join=True)
    for rank in (0, 1):
        assert json.loads((tmp_path / f"rank{rank}.json").read_text()) == ["by rank 0", 0.5]


def _join_in_callers_group(rank: int, port: int, folder: Path) -> None:
    """A rank of a group the caller set up itself (mp.spawn, no torchrun variables)."""
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
    try:
        with join(torch.device("cpu")) as group:
            seen = [group.rank, group.world_size, group.local_world_size, group.mean(rank)]
        seen.append(dist.is_initialized())  # the caller's group is left to the caller
        (folder / f"rank{rank}.json").write_text(json.dumps(seen))
    finally:
        dist.destroy_process_group()


def test_a_process_group_the_caller_initialised_is_joined_without_torchrun_variables(
    tmp_path, monkeypatch
):
    # join() read only WORLD_SIZE: under mp.spawn each process trained alone into the same
    # run folder, the second stopping with RunInUse
    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    mp.spawn(_join_in_callers_group, args=(free_port(), tmp_path), nprocs=2, join=True)
    seen = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert seen == [[0, 2, 2, 0.5, True], [1, 2, 2, 0.5, True]]
