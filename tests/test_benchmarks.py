"""The benchmark harness measures what it claims (no timing is asserted here)."""

import sys
import warnings

import pytest
import torch

from attnkit.nmt.models.rnn import RNNConfig, RNNTranslator
from benchmarks.report import Table
from benchmarks.timing import Comparison, compare, peak_memory_mb
from benchmarks.tutorial_seq2seq import TutorialAttention, TutorialSeq2Seq


def test_peak_memory_sees_a_64_mib_allocation():
    # the setup runs a first op, so thread-pool start-up is not counted
    grown = peak_memory_mb("torch.ones(1024).add_(1)", "x = torch.ones(64 * 2**20 // 4)\nx += 1")
    assert 60 <= grown <= 72


def test_compare_calls_both_alternately_and_reports_ratios():
    calls = []
    cmp = compare(lambda: calls.append("a"), lambda: calls.append("b"), repeats=3, warmup=1)
    assert calls.count("a") == calls.count("b") == 4
    assert Comparison(2.0, 1.0).ratio == 2.0 and Comparison(2.0, 1.0).speedup == 0.5
    assert cmp.candidate_s > 0 and cmp.baseline_s > 0


def test_table_renders_markdown():
    table = Table("t", ["a", "b"])
    table.add(1, 0.123456)
    assert table.to_markdown().splitlines()[-1] == "| 1 | 0.123 |"


def test_tutorial_baseline_masks_padding_and_gives_logits_per_step():
    torch.manual_seed(0)
    attention = TutorialAttention(4)
    mask = torch.tensor([[True, True, False]])
    weights = attention(torch.randn(1, 4), torch.randn(1, 3, 4), mask)
    assert weights[0, 2] == 0 and torch.isclose(weights.sum(), torch.tensor(1.0))
    model = TutorialSeq2Seq(11, 13, emb=8, hidden=6, dropout=0.0)
    logits = model(torch.randint(1, 11, (2, 5)), torch.randint(1, 13, (2, 4)))
    assert logits.shape == (2, 4, 13)


def _attnkit_name(name):
    name = name.replace("encoder.bridge", "decoder.bridge").replace(
        "decoder.out.", "decoder.output."
    )
    return name.replace("decoder.attention.", "decoder.attention.score.")


def test_tutorial_baseline_is_attnkit_bahdanau_weight_for_weight():
    """Equal work: same parameters one for one, same logits with copied weights."""
    torch.manual_seed(0)
    config = RNNConfig(
        embed_dim=8, hidden_size=6, dropout=0.0, query_timing="previous", score="additive"
    )
    ours = RNNTranslator(config, 11, 13).eval()
    tutorial = TutorialSeq2Seq(11, 13, emb=8, hidden=6, dropout=0.0).eval()
    own = ours.state_dict()
    tutorial.load_state_dict({k: own[_attnkit_name(k)] for k in tutorial.state_dict()})
    assert sum(p.numel() for p in ours.parameters()) == sum(
        p.numel() for p in tutorial.parameters()
    )
    src, tgt_in = torch.randint(1, 11, (3, 5)), torch.randint(1, 13, (3, 4))
    expected, _ = ours(src, torch.full((3,), 5), tgt_in)
    torch.testing.assert_close(tutorial(src, tgt_in), expected, atol=1e-5, rtol=1e-5)


def _attnkit_transformer_weight(own, name):
    """attnkit's tensor for a parameter of :class:`TorchTransformerTranslator`."""
    for theirs, ours in (
        ("transformer.encoder.norm", "encoder_norm"),
        ("transformer.decoder.norm", "decoder_norm"),
        ("transformer.encoder.layers", "encoder_layers"),
        ("transformer.decoder.layers", "decoder_layers"),
        (".linear", ".ff.linear"),
        ("embedding.weight", "tgt_embedding.weight"),
    ):
        name = name.replace(theirs, ours)
    if ".in_proj_" in name:  # one packed q, k, v projection in nn.MultiheadAttention
        prefix, kind = name.split(".in_proj_")
        return torch.cat([own[f"{prefix}.{p}_proj.{kind}"] for p in "qkv"])
    return own[name]


def test_torch_transformer_peer_is_attnkits_transformer_weight_for_weight():
    """Equal work against torch.nn.Transformer: the same logits with copied weights, and
    the same dropout rates (nn.Transformer's one rate used to drop attention weights at
    the residual rate, 0.1, where the benchmark's attnkit model drops none)."""
    from attnkit.nmt.models.transformer import TransformerConfig, TransformerTranslator
    from benchmarks.torch_transformer import TorchTransformerTranslator

    config = TransformerConfig(
        d_model=16, heads=2, encoder_layers=2, decoder_layers=2, ff_dim=32, dropout=0.1,
        attention_dropout=0.0,
    )  # fmt: skip
    torch.manual_seed(0)
    ours = TransformerTranslator(config, 20, 20).eval()
    with warnings.catch_warnings():  # nn.Transformer's note on nested tensors and pre-LN
        warnings.simplefilter("ignore", UserWarning)
        peer = TorchTransformerTranslator(config, 20).eval()
    own = ours.state_dict()
    peer.load_state_dict({k: _attnkit_transformer_weight(own, k) for k in peer.state_dict()})
    assert sum(p.numel() for p in ours.parameters()) == sum(p.numel() for p in peer.parameters())
    src, lengths = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]]), torch.tensor([4, 3])
    tgt_in = torch.tensor([[1, 5, 6], [1, 7, 0]])
    expected, _ = ours(src, lengths, tgt_in, need_weights=False)
    torch.testing.assert_close(peer(src, lengths, tgt_in), expected, atol=1e-5, rtol=1e-5)
    attention = [m for m in peer.modules() if isinstance(m, torch.nn.MultiheadAttention)]
    assert len(attention) == 2 + 2 * 2 and {m.dropout for m in attention} == {0.0}
    others = [m for m in peer.modules() if isinstance(m, torch.nn.Dropout)]
    assert others and {m.p for m in others} == {0.1}


def test_feed_forward_int8_quantizes_exactly_the_feed_forward_layers():
    from benchmarks.profile_decode import feed_forward_int8
    from conftest_nmt import tiny_transformer

    model = tiny_transformer()
    quantized = feed_forward_int8(model)
    dynamic = torch.ao.nn.quantized.dynamic.Linear
    int8 = [n for n, m in quantized.named_modules() if isinstance(m, dynamic)]
    assert len(int8) == 2 * (2 + 2)  # linear1 and linear2 of 2 encoder + 2 decoder layers
    assert all(n.endswith(("linear1", "linear2")) for n in int8)
    assert type(model.encoder_layers[0].ff.linear1) is torch.nn.Linear  # the original is kept


# /proc/self/smaps_rollup of a shell on the benchmark machine (Linux 6.18), verbatim
ROLLUP = """\
5563f9402000-7ffff2070000 ---p 00000000 00:00 0                          [rollup]
Rss:                1688 kB
Pss:                 469 kB
Pss_Dirty:           112 kB
Pss_Anon:            112 kB
Pss_File:            357 kB
Pss_Shmem:             0 kB
Shared_Clean:       1536 kB
Shared_Dirty:          0 kB
Private_Clean:        40 kB
Private_Dirty:       112 kB
Referenced:         1688 kB
Anonymous:           112 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  0 kB
SwapPss:               0 kB
Locked:                0 kB
"""


def test_smaps_rollup_fields_are_read_in_kb_and_pss_adds_up():
    from benchmarks.rank_memory import parse_smaps_rollup

    found = parse_smaps_rollup(ROLLUP)
    assert found["Rss"] == 1688 and found["Pss"] == 469 and found["Anonymous"] == 112
    assert found["Pss"] == found["Pss_Anon"] + found["Pss_File"] + found["Pss_Shmem"]
    assert found["Rss"] == found["Shared_Clean"] + found["Private_Clean"] + found["Private_Dirty"]
    assert len(found) == 22  # every field but the address range


def test_mapped_under_counts_the_touched_pages_of_a_mapped_file(tmp_path):
    import numpy as np

    from benchmarks.rank_memory import mapped_under, parse_smaps_rollup

    path = tmp_path / "ids"
    np.arange(2**20, dtype=np.int64).tofile(path)  # 8 MiB
    mapped = np.memmap(path, dtype=np.int64, mode="r")
    assert int(mapped[::512].sum()) > 0  # one int64 of each 4 KiB page
    with open("/proc/self/smaps") as smaps:
        text = smaps.read()
    found = mapped_under(text, f"{tmp_path}/")
    assert 8 * 1024 <= found["Rss"] <= 8 * 1024 + 64 and 0 < found["Pss"] <= found["Rss"]
    assert mapped_under(text, f"{tmp_path}-elsewhere/") == {"Rss": 0, "Pss": 0}
    with open("/proc/self/smaps_rollup") as rollup_file:
        rollup = parse_smaps_rollup(rollup_file.read())
    assert rollup["Rss"] >= found["Rss"]
    del mapped


def test_descendants_finds_children_and_grandchildren():
    import os
    import signal
    import subprocess
    import sys
    import time

    from benchmarks.rank_memory import descendants

    code = "import subprocess; subprocess.run(['sleep', '30'])"
    child = subprocess.Popen([sys.executable, "-c", code])
    below = {}
    try:
        for _ in range(100):  # until the grandchild exists
            below = descendants(child.pid)
            if below:
                break
            time.sleep(0.05)
        assert len(below) == 1 and list(below.values()) == [child.pid]  # the sleep, its parent
        assert descendants(os.getpid())[child.pid] == os.getpid()
        assert set(below) < set(descendants(os.getpid()))
    finally:
        for grandchild in below:
            os.kill(grandchild, signal.SIGKILL)
        child.kill()
        child.wait()


def test_bench_precision_help_prints_the_options_without_running(capsys, monkeypatch):
    from benchmarks import bench_precision

    monkeypatch.setattr(bench_precision, "run", lambda quick: pytest.fail("ran the benchmark"))
    with pytest.raises(SystemExit) as stop:
        bench_precision.main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert out.startswith("usage: python -m benchmarks.bench_precision")
    assert "--translate RUN [RUN ...]" in out and "--quick" in out


def test_bench_precision_refuses_an_unknown_option_or_a_missing_run(capsys, tmp_path):
    from benchmarks import bench_precision

    for argv, message in [
        (["--quik"], "unrecognized arguments: --quik"),
        (["--translate", str(tmp_path)], f"not a run folder (no config.yaml): {tmp_path}"),
    ]:
        with pytest.raises(SystemExit) as stop:
            bench_precision.main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and message in err and "Traceback" not in err


def test_bench_step_parts_help_prints_the_options_without_running(capsys, monkeypatch):
    from benchmarks import bench_step_parts

    monkeypatch.setattr(bench_step_parts, "run", lambda quick: pytest.fail("ran the benchmark"))
    with pytest.raises(SystemExit) as stop:
        bench_step_parts.main(["--help"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m benchmarks.bench_step_parts")


def test_data_suite_peak_rss_is_the_commands_not_the_benchmark_process():
    from benchmarks.bench_data import _attnkit

    held = torch.ones(2**27)  # 512 MiB, touched, in this process
    err, seconds, peak_mb = _attnkit("--version")
    assert held.sum().item() == 2**27
    assert err == "" and seconds > 0
    assert 10 < peak_mb < 300  # one Python with attnkit imported, not this process's 512 MiB


def test_deploy_worker_peak_rss_is_its_own_not_the_drivers(tmp_path):
    """A worker started by the driver reported ru_maxrss, which on Linux starts at the
    driver's peak: every CTranslate2 cell of docs/deploy.md read 330-331 MB, int8 or not."""
    import json
    import os
    import subprocess
    import sys

    lines = tmp_path / "lines.json"
    lines.write_text(json.dumps(["a"] * 10))
    code = (
        "from benchmarks import bench_deploy as d\n"
        "d._ct2_worker = lambda *args: 0.5  # half a second, no engine\n"
        f"d.main(['RUN', '--worker', 'ctranslate2', '--lines', {str(lines)!r}])"
    )
    held = torch.ones(2**27)  # 512 MiB, touched, in the driver (this process)
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert held.sum().item() == 2**27
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found["sentences_per_s"] == 20.0
    assert 5 < found["rss_mb"] < 200  # one small Python, not the driver's 512 MiB


def test_training_memory_has_four_quarters_of_equal_length():
    """227 steps (the train suite's) gave five "quarters", the last of three steps."""
    from benchmarks.train_memory import quarter_maxima

    rss = [float(i % 56) for i in range(227)]  # each 56-step run rises from 0 to 55
    assert quarter_maxima(rss) == [55.0, 55.0, 55.0, 55.0]
    assert quarter_maxima([3.0, 1.0, 2.0, 9.0, 4.0]) == [3.0, 1.0, 2.0, 9.0]
    assert quarter_maxima([5.0, 7.0]) == [5.0, 7.0]


def test_deploy_attnkit_worker_decodes_in_the_batches_of_the_ctranslate2_worker(monkeypatch):
    """Equal work: attnkit decoded in the run's decode.batch_size (100 for
    configs/transformer.yaml) while the CTranslate2 worker sent 64 sentences a batch."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from attnkit.nmt.config import DecodeConfig
    from attnkit.nmt.decoding import translate
    from attnkit.nmt.runs import loaded_run
    from benchmarks import bench_deploy

    run = SimpleNamespace(
        config=SimpleNamespace(decode=DecodeConfig(batch_size=100)),
        precision=SimpleNamespace(autocast=nullcontext),
    )
    searched = []
    monkeypatch.setattr(loaded_run, "load_run", lambda *a, **k: run)
    monkeypatch.setattr(translate, "translate_lines", lambda r, lines, s: searched.append(s))
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    bench_deploy._attnkit_worker("RUN", ["a"] * 30, 5, 1, "fp32" + bench_deploy.EARLY)
    assert [s.batch_size for s in searched] == [64, 64] and bench_deploy.BATCH == 64
    assert [(s.beam_size, s.early_stopping) for s in searched] == [(5, True)] * 2


def test_bench_deploy_reads_the_commands_docs_quote(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from benchmarks import bench_deploy

    (tmp_path / "config.yaml").write_text("")
    calls = []
    monkeypatch.setattr(
        bench_deploy, "measure_run", lambda *args: calls.append(args) or SimpleNamespace(tables=[])
    )
    argv = [str(tmp_path), "--repeats", "3", "--beams", "5", "--thread-counts", "1"]
    assert bench_deploy.main(argv) == 0 and bench_deploy.main([str(tmp_path), "--quick"]) == 0
    assert calls == [(tmp_path, False, 3, [5], [1]), (tmp_path, True, 3, [1, 5], [1, 2])]


def test_bench_deploy_refuses_a_missing_run_engine_or_count_in_one_line(
    capsys, monkeypatch, tmp_path
):
    """A missing run folder ended in a FileNotFoundError traceback, --repeats 0 in a
    KeyError after every export was made, a missing ctranslate2 in an ImportError."""
    from benchmarks import bench_deploy

    monkeypatch.setattr(bench_deploy, "measure_run", lambda *a: pytest.fail("measured"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("")
    run = str(tmp_path / "run")
    cases = [
        ([str(tmp_path)], f"run: not a run folder (no config.yaml): {tmp_path}"),
        ([run, "--repeats", "0"], "argument --repeats: must be a whole number of at least 1"),
        ([run, "--beams", "1", "-5"], "argument --beams: must be a whole number of at least 1"),
        ([run, "--thread-counts", "two"], "argument --thread-counts: must be a whole number"),
    ]
    for argv, message in cases:
        with pytest.raises(SystemExit) as stop:
            bench_deploy.main(argv)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and message in err and "Traceback" not in err
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 fails
    with pytest.raises(SystemExit) as stop:
        bench_deploy.main([run])
    assert stop.value.code == 2 and "ctranslate2 is not installed" in capsys.readouterr().err


def test_bench_precision_times_nothing_where_bf16_is_emulated(monkeypatch):
    from benchmarks import bench_precision

    monkeypatch.setattr(bench_precision, "cpu_bf16_flag", lambda flags=None: None)
    monkeypatch.setattr(bench_precision, "compare", lambda *a, **k: pytest.fail("timed"))
    result = bench_precision.run(quick=True)
    assert result.ratios == {}
    (table,) = result.tables
    assert table.title.startswith("bf16 mixed precision: not supported on this CPU")
    assert table.rows[0][0] == "none (no avx512_bf16/amx_bf16)"


def test_bench_step_parts_leaves_out_the_bf16_rows_where_bf16_is_emulated(monkeypatch):
    from benchmarks import bench_step_parts
    from benchmarks.timing import Comparison

    monkeypatch.setattr(bench_step_parts, "cpu_bf16_flag", lambda flags=None: None)
    built = []
    rows = [
        (f"{key}_{precision}", key, precision, lambda key=key: built.append(key) or (None, None))
        for key, precision in (("a", "fp32"), ("b", "bf16"), ("c", "fp32"))
    ]
    monkeypatch.setattr(bench_step_parts, "_rows", lambda: rows)
    monkeypatch.setattr(bench_step_parts, "compare", lambda *a, **k: Comparison(2.0, 1.0))
    result = bench_step_parts.run(quick=True)
    assert built == ["a", "c"] and list(result.ratios) == ["step_part_a_fp32", "step_part_c_fp32"]
    assert result.tables[0].title.endswith("; bf16 rows left out: this CPU emulates bf16")


def test_throughput_takes_every_figure_from_one_median_round():
    from types import SimpleNamespace

    from benchmarks.bench_train import throughput

    def trainer(name, rounds):
        timed = iter([(9.0, 1, 1), *rounds])  # the warm-up call, then the rounds
        return SimpleNamespace(name=name, run=lambda steps: (*next(timed), None))

    rounds = [(2.0, 100, 300), (4.0, 120, 360), (3.0, 110, 330)]  # (seconds, tgt, both)
    rates = throughput([trainer("a", rounds)], rounds=3, steps=10)["a"]
    assert rates["step_s"] == 0.3  # the median round by time: 3 s for 10 steps
    assert rates["tgt_tok_s"] == 110 / 3.0 and rates["all_tok_s"] == 330 / 3.0
    assert rates["tgt_tok_step"] == 330 / 30  # every round's target tokens
    two = throughput([trainer("a", rounds[:2])], rounds=2, steps=10)["a"]
    assert two["step_s"] == 0.2 and two["tgt_tok_s"] == 100 / 2.0  # the lower middle round


def test_profiled_search_times_the_search_not_the_profilers_start(monkeypatch):
    """The first profiler of a process takes about a second to start; ``--bound`` profiles
    fp32 first, so that second went into fp32's wall time and inflated bf16/fp32."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from attnkit.nmt.config import DecodeConfig
    from attnkit.nmt.decoding import translate
    from benchmarks import profile_decode

    clock = [0.0]

    class StartsSlowly:  # a profiler whose start and exit take 100 s on the fake clock
        def __enter__(self):
            clock[0] += 100.0
            return self

        def __exit__(self, *exc):
            clock[0] += 100.0

    def search(run, lines, settings):  # 1 s a sentence on the fake clock
        clock[0] += len(lines)

    run = SimpleNamespace(
        config=SimpleNamespace(decode=DecodeConfig()),
        precision=SimpleNamespace(autocast=nullcontext),
    )
    monkeypatch.setattr(profile_decode, "_setup", lambda *a: (run, ["a"] * 30, None))
    monkeypatch.setattr(profile_decode, "profile", lambda **kw: StartsSlowly())
    monkeypatch.setattr(profile_decode.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(translate, "translate_lines", search)
    _, wall = profile_decode._profiled_search("RUN", 5, 30, "fp32")
    assert wall == 30.0


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["RUN", "--int8", "--precision", "bf16"], "--precision bf16"),
        (["RUN", "--int8", "--early-stopping"], "--early-stopping"),
        (["RUN", "--bound", "--precision", "bf16"], "--precision bf16"),
        (["RUN", "--int8", "--bound"], "not both"),
    ],
)
def test_profile_decode_refuses_options_its_comparisons_would_ignore(argv, named, capsys):
    """``--int8`` (fp32 against int8) and ``--bound`` (fp32 against bf16) ran their own
    comparison and silently dropped ``--precision``/``--early-stopping``."""
    from benchmarks import profile_decode

    with pytest.raises(SystemExit) as done:
        profile_decode.main(argv)
    assert done.value.code == 2 and named in capsys.readouterr().err


@pytest.mark.parametrize(
    ("module", "argv", "expected"),
    [
        ("rank_memory", ["1000000"], {"pairs": 1_000_000, "stages": False}),
        ("rank_memory", ["--stages", "1000000"], {"pairs": 1_000_000, "stages": True}),
        ("rank_memory", [], {"pairs": 1_000_000, "stages": False}),
        ("store_memory", ["1000000", "5000000"], {"sizes": [1_000_000, 5_000_000]}),
        ("step_memory", ["bench.yaml", "RUN"], {"config": "bench.yaml", "run_dir": "RUN"}),
        ("step_memory", ["bench.yaml", "RUN", "7"], {"steps": 7}),
        ("profile_train_step", ["multi30k"], {"data": "multi30k", "steps": 10}),
        ("profile_train_step", [], {"data": "reverse", "steps": 10}),
        ("profile_precision", ["multi30k", "--shapes"], {"preset": "multi30k", "shapes": True}),
        ("profile_precision", ["quick"], {"preset": "quick", "shapes": False}),
        ("train_memory", ["227"], {"steps": 227}),
    ],
)
def test_memory_and_profile_scripts_read_the_commands_results_md_quotes(module, argv, expected):
    import importlib

    args = vars(importlib.import_module(f"benchmarks.{module}")._parser().parse_args(argv))
    assert {key: args[key] for key in expected} == expected


@pytest.mark.parametrize(
    "module",
    [
        "rank_memory",
        "store_memory",
        "step_memory",
        "profile_train_step",
        "profile_precision",
        "train_memory",
    ],
)
def test_memory_and_profile_scripts_answer_help_and_refuse_a_typo(module, capsys):
    """--help used to start the work (rank_memory: a 1M-pair corpus and two torchrun
    launches) or end in a traceback; a misspelt data set ran another one."""
    import importlib

    parser = importlib.import_module(f"benchmarks.{module}")._parser()
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--help"])
    assert (
        done.value.code == 0 and "usage: python -m benchmarks." + module in capsys.readouterr().out
    )
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["revrse", "x", "y", "z"])
    assert done.value.code == 2


def test_contention_suite_says_why_it_measured_nothing_at_one_thread(monkeypatch):
    """At OMP_NUM_THREADS=1 (RESULTS.md's own commands) the suite printed no table at all."""
    from benchmarks import bench_contention

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(
        bench_contention, "quick_preset_trainer", lambda quick: pytest.fail("trained")
    )
    result = bench_contention.run(quick=True)
    assert result.ratios == {}
    (table,) = result.tables
    assert "OMP_NUM_THREADS=1" in table.to_markdown()
    assert "not measured" in table.to_markdown()


def test_domain_adaptation_splits_tico_by_position_into_train_valid_test(tmp_path):
    from benchmarks import domain_adaptation

    pairs = [(f"en {i}", f"fr {i}") for i in range(3071)]  # TICO-19's 3,071 pairs
    files = domain_adaptation.write_splits(pairs, tmp_path)
    lines = {k: en.read_text().splitlines() for k, (en, _) in files.items()}
    assert {k: len(v) for k, v in lines.items()} == {"train": 2071, "valid": 500, "test": 500}
    assert lines["test"][-1] == "en 3070" and files["test"][1].read_text().endswith("fr 3070\n")
    if domain_adaptation.TICO.is_file():  # the shared data beside a checkout
        real = domain_adaptation.tico_pairs(domain_adaptation.TICO)
        assert len(real) == 3071 and all(en and fr for en, fr in real)


def test_docs_transformer_md_shows_the_self_attention_table_as_it_prints(tmp_path):
    """The table starts with the sentence's translation; docs/transformer.md's console
    block of the same command left that line out."""
    import re
    from pathlib import Path

    from attnkit.nmt.data.tokenizer import WordTokenizer
    from benchmarks.self_attention_table import table
    from conftest_nmt import make_run

    model = {"arch": "transformer", "d_model": 8, "heads": 4, "ff_dim": 16, "dropout": 0.0}
    folder = make_run(tmp_path, WordTokenizer.train(["a b c"]), model=model)
    printed = table(folder, "a b c", 0, False)
    doc = (Path(__file__).resolve().parents[1] / "docs" / "transformer.md").read_text()
    shown = re.search(
        r"\$ python -m benchmarks\.self_attention_table [^\n]*--layer 0\n(.*?)```", doc, re.S
    )
    first, header = shown.group(1).splitlines()[:2]
    assert printed[0].startswith("translation: ") and first.startswith("translation: ")
    assert header == printed[1]  # | token | head 0 | ... | head 3 | self (mean) |


def test_docs_transformer_md_shows_the_head_roles_table_as_it_prints(tmp_path):
    """``--roles N`` prints a line naming the sentences before its table; docs/transformer.md
    left it out, and the line named test2016 for any run's test split (a toy task's too)."""
    import re
    from pathlib import Path

    from attnkit.nmt.data.tokenizer import WordTokenizer
    from benchmarks.self_attention_table import head_roles
    from conftest_nmt import make_run

    model = {"arch": "transformer", "d_model": 8, "heads": 4, "ff_dim": 16, "dropout": 0.0}
    tokenizer = WordTokenizer.train([" ".join(f"s{i}" for i in range(10))])
    printed = head_roles(make_run(tmp_path, tokenizer, model=model), 7)
    assert printed[0] == (
        "encoder heads on the first 7 sentences of the test split: share of source tokens "
        "whose largest weight is on ..."
    )
    doc = (Path(__file__).resolve().parents[1] / "docs" / "transformer.md").read_text()
    command = re.search(r"\$ python -m benchmarks\.self_attention_table \S+ --roles (\d+)\n", doc)
    shown = doc[command.end() :].splitlines()[:2]
    assert shown[0] == printed[0].replace("first 7 ", f"first {command.group(1)} ")
    assert shown[1] == printed[1]  # | layer | head | previous | self | next | </s> | elsewhere |


def test_bench_compile_times_equal_work_on_both_sides_of_each_masked_row_ratio():
    """The branch-free side resolved the user's mask inside its timer while the old
    branch started from it resolved; now both ratios' sides compute the same output
    from the same inputs, and each pair does the same mask work."""
    from benchmarks import bench_compile

    side = bench_compile.masked_row_sides(16)
    with torch.no_grad():
        out = {name: call() for name, call in side.items()}
    for name in ("old_branch", "zeroed", "unzeroed"):
        torch.testing.assert_close(out[name], out["branch_free"], rtol=0, atol=1e-5)
    assert out["branch_free"].shape == (bench_compile.B, bench_compile.H, 16, bench_compile.DH)
