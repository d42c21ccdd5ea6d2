"""``train.max_steps: auto``: the budget's arithmetic, its config rules, toy runs that use it."""

import pytest
import torch
from test_train import config

from attnkit.nmt.config import TrainConfig
from attnkit.nmt.training import step_budget
from attnkit.nmt.training.loop import train
from attnkit.nmt.training.progress import Progress
from attnkit.nmt.training.schedule import Schedule
from attnkit.nmt.training.step_budget import StepBudget, fit_steps

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


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_budget_is_chosen_from_the_warm_up_and_lowered_when_steps_slow_down(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(step_budget.time, "monotonic", clock)
    cfg = TrainConfig(
        lr_schedule="linear", max_steps="auto", max_minutes=10, warmup_steps=100, valid_every=50
    )
    budget, p = StepBudget(cfg), Progress()
    budget.begin(0)
    clock.now = 10.0
    budget.stepped(10)  # the window opens at warmup_steps // 10
    clock.now += 40 + 5  # steps 11-50 at 1 s, then a 5 s validation
    budget.validated(5.0)
    clock.now += 49  # to step 99, the last before the rate needs T
    p.step = 99
    assert budget.due(p)
    steps, line = budget.choose(p, clock.now, epoch_steps=300)
    # 1 s a step, 5 s a validation every 50: 99 + (570 - 104 - 5) // 1.1
    assert steps == 99 + 419
    assert line == (
        "train.max_steps auto: 518 steps (1.000 s a step over steps 10-99, 5 s a validation "
        "every 50 steps; 95% of max_minutes=10)"
    )
    p.step_budget = steps
    assert budget.revise(p, clock.now, 300) is None  # nothing timed since
    clock.now += 50 * 1.04 + 5  # steps 100-149 4% slower, and a validation
    budget.validated(5.0)
    p.step = 149
    # still ends within max_minutes (161 + 369 * 1.14 + 5 = 587 s): the margin absorbs it
    assert budget.revise(p, clock.now, 300) is None
    clock.now += 50 * 2.0 + 5  # steps 150-199 at 2 s, and a validation
    budget.validated(5.0)
    p.step = 199
    steps, line = budget.revise(p, clock.now, 300)
    # (266 - 104 - 10) / 100 = 1.52 s a step would end at 788 s: 199 + (570 - 266 - 5) // 1.62
    assert steps == 199 + 184
    assert line == "train.max_steps auto: 383 steps, down from 518 (steps 99-199 took 1.520 s each)"
    p.step_budget = steps
    clock.now += 10 * 0.5  # faster again: the budget is never raised
    p.step = 209
    assert budget.revise(p, clock.now, 300) is None


def auto_run(run_dir, *overrides, **kwargs):
    lines = []
    cfg = config(*AUTO, "train.max_minutes=0.1", "train.epochs=100", *overrides)
    summary = train(cfg, run_dir, progress_bar=False, echo=lines.append, **kwargs)
    return summary, lines


def test_an_auto_budget_is_chosen_as_warm_up_ends_and_ends_the_run(tmp_path, monkeypatch):
    # the training clock reads 50 ms a step: on a loaded machine (CI's two workers) the
    # real one let only the warm-up's 20 steps into 6 s, and the budget was those 20
    from attnkit.nmt.training.trainer import Trainer

    monkeypatch.setattr(Trainer, "elapsed", lambda self: 0.05 * self.progress.step)
    summary, lines = auto_run(tmp_path)
    p = summary.progress
    chosen, *lowered = [line for line in lines if line.startswith("train.max_steps auto:")]
    assert chosen.startswith("train.max_steps auto: ")  # the timing varies; its form does not
    assert "steps (" in chosen and "s a step over steps 2-19" in chosen
    assert chosen.endswith("; 95% of max_minutes=0.1)")
    final = lowered[-1] if lowered else chosen  # a busy machine may lower it at a validation
    assert final.startswith(f"train.max_steps auto: {p.step_budget} steps")
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
    # a cap of a minute: under a loaded CI the 6-second one let a slower resumed run
    # lower the budget (as it should), which is not what this test is about
    second, lines = auto_run(tmp_path, "train.epochs=3", "train.max_minutes=1", resume=True)
    # epochs 3 end it at step 30, unless a busy machine chose a budget below that
    assert second.progress.step == min(30, first.progress.step_budget)
    assert second.progress.step_budget == first.progress.step_budget
    assert not [line for line in lines if line.startswith("train.max_steps auto:")]


def test_auto_past_the_warm_up_of_a_numbered_run_is_refused(tmp_path):
    # the step budget ends this run, never the clock (0.1 minutes did, on a loaded machine)
    numbered = config(*AUTO, "train.max_steps=25", "train.max_minutes=10", "train.epochs=100")
    train(numbered, tmp_path, progress_bar=False, echo=lambda _: None)
    with pytest.raises(ValueError, match="past it \\(step 25, warmup_steps 20\\)"):
        auto_run(tmp_path, resume=True)


def test_an_auto_budget_of_no_step_past_the_warm_up_ends_the_run(tmp_path, monkeypatch):
    # the warm-up took the time cap: fit_steps gives one more step, T = warmup_steps
    monkeypatch.setattr(step_budget, "fit_steps", lambda step, *_args: step + 1)
    summary, lines = auto_run(tmp_path, "train.max_minutes=5")
    assert summary.progress.step_budget == 20
    assert summary.progress.step == 20
    assert summary.progress.stop_reason == "max_steps=20 reached"
