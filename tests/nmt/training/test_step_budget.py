"""``train.max_steps: auto``: the budget's arithmetic, its config rules, and a toy run that uses it."""

import pytest
import torch

from attnkit.nmt.config import TrainConfig
from attnkit.nmt.training.loop import train
from attnkit.nmt.training.schedule import Schedule
from attnkit.nmt.training.step_budget import fit_steps

from test_train import config

AUTO = ("train.lr_schedule=linear", "train.max_steps=auto", "train.warmup_steps=20")


def test_fit_steps_fills_the_time_left_with_steps_and_their_share_of_validations():
    # 950 s budget, 50 s spent, 10 s kept for the last validation: 890 s at 1 + 10/100 s a step
    assert fit_steps(100, 50.0, 950.0, step_s=1.0, valid_s=10.0, valid_every=100) == 100 + 809
    assert fit_steps(100, 50.0, 950.0, step_s=1.0, valid_s=0.0, valid_every=100) == 100 + 900


def test_fit_steps_takes_one_more_step_when_the_time_is_spent():
    assert fit_steps(40, 70.0, 60.0, step_s=0.5, valid_s=3.0, valid_every=10) == 41


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"lr_schedule": "linear", "max_steps": "auto"}, "set max_minutes"),
        ({"max_steps": "auto", "max_minutes": 5}, "lr_schedule plateau set max_minutes alone"),
        (
            {"lr_schedule": "linear", "max_steps": "auto", "max_minutes": 5, "warmup_steps": 10},
            "must be 20 or more, got 10",
        ),
    ],
)
def test_an_auto_budget_without_what_it_needs_is_refused(train, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**train)


def test_a_linear_schedule_without_its_total_warms_up_then_waits_for_it():
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    cfg = TrainConfig(lr_schedule="linear", max_steps="auto", max_minutes=1, warmup_steps=20)
    sched = Schedule(optimizer, cfg)
    for _ in range(19):  # up to the rate of step 20, the peak
        optimizer.step()  # the order training uses
        sched.after_step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    optimizer.step()
    with pytest.raises(RuntimeError, match="step 21 is past warm-up"):
        sched.after_step()
    sched.set_total(40)
    optimizer.step()
    sched.after_step()  # step 22 of a line from 20 to 40
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-5 + (1e-3 - 1e-5) * 18 / 20)


def auto_run(run_dir, *overrides, **kwargs):
    lines = []
    cfg = config(*AUTO, "train.max_minutes=0.1", "train.epochs=100", *overrides)
    summary = train(cfg, run_dir, progress_bar=False, echo=lines.append, **kwargs)
    return summary, lines


def test_an_auto_budget_is_chosen_as_warm_up_ends_and_ends_the_run(tmp_path):
    summary, lines = auto_run(tmp_path)
    p = summary.progress
    chosen = [line for line in lines if line.startswith("train.max_steps auto:")]
    assert chosen == [
        f"train.max_steps auto: {p.step_budget} steps "
        + chosen[0].split(" steps ", 1)[1]  # the timing varies; its form does not
    ]
    assert "over steps 2-19" in chosen[0] and "95% of max_minutes=0.1" in chosen[0]
    assert p.step_budget > 20
    if p.stop_reason.startswith("max_steps"):  # a busy machine may hit the time cap first
        assert p.step == p.step_budget
        assert p.stop_reason == f"max_steps={p.step_budget} reached"
    # resumed with a larger time cap, the finished run keeps the budget it chose
    again, lines = auto_run(tmp_path, "train.max_minutes=0.2", resume=True)
    if p.stop_reason.startswith("max_steps"):
        assert again.reused and again.progress.step_budget == p.step_budget


def test_a_resumed_auto_run_keeps_its_budget_and_draws_the_line_to_it(tmp_path):
    first, _ = auto_run(tmp_path, "train.epochs=2")  # 10 batches an epoch: stops at step 20
    assert first.progress.step == 20 and first.progress.step_budget > 20
    second, lines = auto_run(tmp_path, "train.epochs=3", resume=True)
    assert second.progress.step == 30
    assert second.progress.step_budget == first.progress.step_budget
    assert not [line for line in lines if line.startswith("train.max_steps auto:")]


def test_auto_past_the_warm_up_of_a_numbered_run_is_refused(tmp_path):
    numbered = config(*AUTO, "train.max_steps=25", "train.max_minutes=0.1", "train.epochs=100")
    train(numbered, tmp_path, progress_bar=False, echo=lambda _: None)
    with pytest.raises(ValueError, match="past it \\(step 25, warmup_steps 20\\)"):
        auto_run(tmp_path, resume=True)
