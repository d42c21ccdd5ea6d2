"""Training in bf16 (train.precision): close to fp32, fp32 checkpoints, recorded, exact resume.

Tiny reverse-task runs (test_train's TINY) for the three decoder paths: the
RNN with Luong timing (the batched path), the RNN with Bahdanau timing (the
fused GRU loop, which runs in fp32 inside autocast) and the Transformer.
bf16 runs here even on a CPU without fast bf16 (slowly): these are small.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_train import TRANSFORMER, config, quiet

from attnkit.nmt import precision as precision_module
from attnkit.nmt.decoding.translate import translate_lines
from attnkit.nmt.runs.checkpoint import load_checkpoint
from attnkit.nmt.runs.loaded_run import load_run
from attnkit.nmt.training.loop import train

MODELS = {
    "rnn-luong": (),
    "rnn-bahdanau-fused": ("model.score=additive", "model.query_timing=previous"),
    "transformer": (TRANSFORMER,),
}
STEPS = ("train.max_steps=10",)  # validations at steps 5 and 10 (valid_every 5)
CLOSE = 1e-2  # relative: bf16 vs fp32 losses after the same steps


def train_quietly(run_dir, *overrides, resume=False, echo=quiet):
    return train(config(*overrides), run_dir, resume=resume, progress_bar=False, echo=echo)


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def sessions(run_dir):
    return json.loads((run_dir / "precision.json").read_text())["sessions"]


@pytest.fixture(scope="module", params=list(MODELS))
def pair(request, tmp_path_factory):
    """The same tiny run trained in fp32 and in bf16: ``(name, fp32 dir, bf16 dir, bf16 log)``."""
    base, model = tmp_path_factory.mktemp(request.param), MODELS[request.param]
    train_quietly(base / "fp32", *model, *STEPS, "train.precision=fp32")
    log: list[str] = []
    train_quietly(base / "bf16", *model, *STEPS, "train.precision=bf16", echo=log.append)
    return request.param, base / "fp32", base / "bf16", log


def test_bf16_losses_are_finite_and_close_to_fp32(pair):
    _, fp32, bf16, _ = pair
    for low, high in zip(metrics(bf16), metrics(fp32), strict=True):
        assert low["step"] == high["step"]
        for key in ("train_loss", "valid_loss"):
            assert math.isfinite(low[key])
            assert low[key] == pytest.approx(high[key], rel=CLOSE), (key, low, high)


def test_bf16_checkpoints_hold_float32_weights_and_optimizer_state(pair):
    _, _, bf16, _ = pair
    ckpt = load_checkpoint(bf16 / "last.json")
    assert {t.dtype for t in ckpt.model.values()} == {torch.float32}
    moments = [
        value
        for state in ckpt.optimizer["state"].values()
        for key, value in state.items()
        if key in ("exp_avg", "exp_avg_sq")
    ]
    assert moments and {t.dtype for t in moments} == {torch.float32}


def test_the_precision_is_printed_and_recorded_in_the_run_folder(pair):
    _, fp32, bf16, log = pair
    (line,) = [x for x in log if x.startswith("precision ")]
    assert line.startswith("precision bf16: train.precision is bf16; this CPU ")
    (session,) = sessions(bf16)
    assert session["step"] == 0 and session["setting"] == session["precision"] == "bf16"
    assert f"precision {session['reason']}" == line
    assert sessions(fp32) == [
        {
            "step": 0,
            "setting": "fp32",
            "precision": "fp32",
            "reason": "fp32: train.precision is fp32",
        }
    ]


def test_a_bf16_run_translates_in_fp32_and_in_bf16(pair):
    _, _, bf16, _ = pair
    lines = ["s1 s2 s3", "s4 s5 s6 s7"]
    as_fp32 = load_run(bf16, precision="fp32")
    as_bf16 = load_run(bf16, precision="bf16")
    assert as_fp32.precision.name == "fp32" and as_bf16.precision.name == "bf16"
    plain = translate_lines(as_fp32, lines)
    with as_bf16.precision.autocast():
        low = translate_lines(as_bf16, lines)
    # after 10 steps a translation may be empty; it still has the </s> step's weights
    assert all(len(t.weights) for t in plain) and all(len(t.weights) for t in low)
    for a, b in zip(plain, low, strict=True):
        assert torch.isfinite(b.weights.float()).all()
        torch.testing.assert_close(
            b.weights.float().sum(-1), torch.ones(len(b.weights)), atol=2e-2, rtol=0
        )
        assert a.weights.dtype == torch.float32


def test_resume_in_bf16_is_exact(pair, tmp_path):
    name, _, straight, _ = pair

    def crash_after_step_5(line):
        if line.startswith("epoch 1 step 5:"):
            raise KeyboardInterrupt

    overrides = (*MODELS[name], *STEPS, "train.precision=bf16")
    with pytest.raises(KeyboardInterrupt):
        train_quietly(tmp_path, *overrides, echo=crash_after_step_5)
    assert load_checkpoint(tmp_path / "last.json").state["progress"]["step"] == 5
    train_quietly(tmp_path, *overrides, resume=True)
    resumed, reference = (load_checkpoint(d / "last.json").model for d in (tmp_path, straight))
    assert all(torch.equal(resumed[k], reference[k]) for k in reference)
    assert [r["train_loss"] for r in metrics(tmp_path)] == [
        r["train_loss"] for r in metrics(straight)
    ]
    assert [s["step"] for s in sessions(tmp_path)] == [0, 5]


def test_precision_may_change_on_resume_and_each_session_is_recorded(tmp_path):
    train_quietly(tmp_path, "train.max_steps=2", "train.valid_every=2", "train.precision=fp32")
    heard: list[str] = []
    more = ("train.max_steps=4", "train.valid_every=2", "train.precision=bf16")
    train_quietly(tmp_path, *more, resume=True, echo=heard.append)
    assert any('train.precision: "fp32" in the run, "bf16" given' in line for line in heard)
    assert [(s["step"], s["precision"]) for s in sessions(tmp_path)] == [(0, "fp32"), (2, "bf16")]


def test_a_damaged_precision_record_is_moved_aside_with_a_warning(tmp_path):
    train_quietly(tmp_path, "train.max_steps=2", "train.valid_every=2", "train.precision=fp32")
    torn = '{"sessions": [{"step": 0, "setting": "fp32", "prec'
    (tmp_path / "precision.json").write_text(torn)
    heard: list[str] = []
    more = ("train.max_steps=4", "train.valid_every=2", "train.precision=fp32")
    train_quietly(tmp_path, *more, resume=True, echo=heard.append)
    assert any("precision.json is unreadable" in line and "precision.json.damaged" in line
               for line in heard)  # fmt: skip
    assert (tmp_path / "precision.json.damaged").read_text() == torn
    assert [s["step"] for s in sessions(tmp_path)] == [2]


@pytest.mark.parametrize(
    ("flags", "chosen", "reason"),
    [
        ("flags : avx2 avx512f avx512_vnni", "fp32", "fp32: this CPU lacks avx512_bf16/amx_bf16"),
        ("flags : avx2 avx512f avx512_bf16", "bf16", "bf16: this CPU has avx512_bf16"),
    ],
)
def test_auto_follows_the_cpu_flags(tmp_path, monkeypatch, flags, chosen, reason):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(flags)
    monkeypatch.setattr(precision_module, "_CPUINFO", cpuinfo)
    monkeypatch.delenv(precision_module.AUTO_ENV)  # set to fp32 for the suite (conftest.py)
    train_quietly(tmp_path / "run", "train.max_steps=1", "train.device=cpu")
    (session,) = sessions(tmp_path / "run")
    assert (session["setting"], session["precision"]) == ("auto", chosen)
    assert session["reason"].startswith(reason)


def test_a_bad_precision_in_the_environment_fails_before_the_run_folder_exists(
    tmp_path, monkeypatch
):
    monkeypatch.setenv(precision_module.AUTO_ENV, "fp16")
    with pytest.raises(ValueError, match="ATTNKIT_PRECISION must be one of"):
        train_quietly(tmp_path / "run", "train.max_steps=1")
    assert not (tmp_path / "run").exists()
