"""Learning-rate schedules: the inverse-square-root warm-up and plateau halving, in numbers."""

import pytest
import torch

from attnkit.nmt.config import TrainConfig
from attnkit.nmt.training.progress import Progress
from attnkit.nmt.training.schedule import Schedule, inverse_sqrt_factor, linear_decay_factor


def schedule(**train):
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], lr=train.pop("lr", 1e-3))
    return Schedule(optimizer, TrainConfig(**train)), optimizer


def lr(optimizer):
    return optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize(
    ("step", "factor"),
    [(0, 0.25), (1, 0.5), (3, 1.0), (15, 0.5), (63, 0.25), (399, 0.1)],
)
def test_inverse_sqrt_factor_rises_linearly_then_falls_as_one_over_sqrt(step, factor):
    # t = step + 1; min(t / 4, sqrt(4 / t))
    assert inverse_sqrt_factor(step, warmup=4) == pytest.approx(factor, rel=1e-12)


def test_inverse_sqrt_schedule_sets_the_rate_of_each_optimizer_step():
    sched, optimizer = schedule(lr=2e-3, lr_schedule="inverse_sqrt", warmup_steps=4)
    seen = [lr(optimizer)]  # the rate of optimizer step t = 1
    for _ in range(15):
        optimizer.step()  # the order training uses
        sched.after_step()
        seen.append(lr(optimizer))
    assert seen[0] == pytest.approx(5e-4)  # 2e-3 * 1/4
    assert seen[3] == pytest.approx(2e-3)  # the peak at t = warmup
    assert seen[15] == pytest.approx(1e-3)  # 2e-3 * sqrt(4 / 16)
    sched.after_validation(0.0)  # validations leave a per-step schedule alone
    assert lr(optimizer) == pytest.approx(1e-3)


def test_plateau_halves_after_patience_validations_without_gain_down_to_min_lr():
    sched, optimizer = schedule(
        lr=1e-3, lr_schedule="plateau", lr_decay=0.5, lr_patience=1, min_lr=3e-4
    )
    seen = []
    for bleu in (10.0, 9.0, 8.0, 12.0, 11.0, 11.0, 5.0, 5.0, 5.0, 5.0):
        sched.after_validation(bleu)
        seen.append(lr(optimizer))
    # halved at the 2nd validation in a row without a new best (patience 1); 2.5e-4 < min_lr
    assert seen == pytest.approx([1e-3, 1e-3, 5e-4, 5e-4, 5e-4, 3e-4, 3e-4, 3e-4, 3e-4, 3e-4])
    sched.after_step()  # steps leave a plateau schedule alone
    assert lr(optimizer) == pytest.approx(3e-4)


def test_plateau_counts_a_gain_as_the_best_checkpoint_and_early_stopping_do():
    sched, optimizer = schedule(lr=1e-3, lr_schedule="plateau", lr_decay=0.5, lr_patience=1)
    progress = Progress()
    for bleu in (40.0, 39.0, 40.001, 39.5):  # 40.001: a new best, 0.0025% above 40.0
        improved = progress.validated(bleu)
        sched.after_validation(bleu)
    assert improved is False and progress.best_bleu == 40.001 and progress.bad_validations == 1
    # one validation without a gain since the new best: patience 1 keeps the rate
    assert lr(optimizer) == pytest.approx(1e-3)
    sched.after_validation(39.0)  # the second in a row: halved
    assert lr(optimizer) == pytest.approx(5e-4)


def test_a_schedule_resumes_from_its_state():
    first, optimizer = schedule(lr=1e-3, lr_schedule="plateau", lr_decay=0.5, lr_patience=0)
    first.after_validation(10.0)
    first.after_validation(9.0)  # halved: 5e-4
    second, fresh = schedule(lr=1e-3, lr_schedule="plateau", lr_decay=0.5, lr_patience=0)
    second.load_state_dict(first.state_dict())
    fresh.param_groups[0]["lr"] = lr(optimizer)  # the optimizer's own state carries the rate
    second.after_validation(9.5)  # still below the best 10.0: halved again
    assert lr(fresh) == pytest.approx(2.5e-4)


@pytest.mark.parametrize(
    ("step", "factor"),
    [(0, 0.25), (3, 1.0), (7, 0.6), (11, 0.2), (13, 0.2), (50, 0.2)],
)
def test_linear_decay_factor_warms_up_then_falls_in_a_line_to_its_floor(step, factor):
    # t = step + 1: t / 4 up to 4, then 0.2 + 0.8 * (12 - t) / 8, never below 0.2
    assert linear_decay_factor(step, warmup=4, total=12, floor=0.2) == pytest.approx(factor)


def test_linear_decay_factor_with_its_total_at_the_warm_up_s_end_is_the_floor():
    # max_steps auto chooses total = warmup when the warm-up took the time cap
    assert linear_decay_factor(3, warmup=4, total=4, floor=0.2) == pytest.approx(1.0)
    assert linear_decay_factor(4, warmup=4, total=4, floor=0.2) == pytest.approx(0.2)
    assert linear_decay_factor(9, warmup=4, total=4, floor=0.2) == pytest.approx(0.2)


def test_linear_schedule_reaches_min_lr_exactly_at_max_steps():
    sched, optimizer = schedule(
        lr=2e-3, lr_schedule="linear", warmup_steps=2, max_steps=10, min_lr=1e-4
    )
    seen = [lr(optimizer)]
    for _ in range(12):
        optimizer.step()
        sched.after_step()
        seen.append(lr(optimizer))
    assert seen[0] == pytest.approx(1e-3)  # t = 1 of a 2-step warm-up
    assert seen[1] == pytest.approx(2e-3)  # the peak
    assert seen[5] == pytest.approx(1e-4 + 1.9e-3 * 4 / 8)  # t = 6, halfway down
    assert seen[9] == pytest.approx(1e-4)  # t = max_steps
    assert seen[12] == pytest.approx(1e-4)  # a budget raised on resume starts from here


def test_a_budget_raised_on_resume_takes_the_new_line_from_the_first_step():
    options = {"lr": 2e-3, "lr_schedule": "linear", "warmup_steps": 2, "min_lr": 1e-4}
    first, optimizer = schedule(**options, max_steps=10)
    for _ in range(6):
        optimizer.step()
        first.after_step()
    for max_steps in (10, 20):  # the same budget, then a raised one
        second, fresh = schedule(**options, max_steps=max_steps)
        fresh.load_state_dict(optimizer.state_dict())  # the old line's rate, 1.05e-3
        second.load_state_dict(first.state_dict())
        second.resync()
        want = 1e-4 + 1.9e-3 * (max_steps - 7) / (max_steps - 2)  # t = 7 on its line
        assert lr(fresh) == pytest.approx(want)
    assert lr(optimizer) == pytest.approx(1e-4 + 1.9e-3 * 3 / 8)  # what the old line gave


def test_resync_with_the_same_config_is_bit_for_bit_the_saved_rate():
    options = {"lr": 3e-3, "lr_schedule": "linear", "warmup_steps": 7, "max_steps": 1375}
    first, optimizer = schedule(**options)
    for _ in range(400):
        optimizer.step()
        first.after_step()
    second, fresh = schedule(**options)
    second.load_state_dict(first.state_dict())
    second.resync()
    assert lr(fresh) == lr(optimizer)


@pytest.mark.parametrize(
    ("train", "message"),
    [
        ({"lr_schedule": "linear"}, "set max_steps"),
        ({"lr_schedule": "linear", "max_steps": 100, "warmup_steps": 100}, "warmup_steps"),
    ],
)
def test_linear_schedule_without_a_budget_beyond_its_warm_up_is_refused(train, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**train)
