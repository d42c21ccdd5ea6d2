"""Why attention divides by sqrt(d_k): the softmax saturation experiment.

For queries and keys with independent unit-normal entries, ``q·k`` is a sum of
``d_k`` products of variance 1, so its variance is ``d_k``. Without the factor
``1/sqrt(d_k)`` the scores spread further apart as ``d_k`` grows and the
softmax puts almost all its weight on one key (a near one-hot, saturated
softmax with vanishing gradients); with it the score variance stays near 1 and
the weights keep the same spread at every width (Vaswani et al. 2017, sec. 3.2.1
and footnote 4).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = ["DEFAULT_DIMS", "SaturationResult", "saturation"]

DEFAULT_DIMS = (4, 16, 64, 256, 1024)


@dataclass(frozen=True)
class SaturationResult:
    """Per ``d_k``: the measured score variance and mean maximum weight.

    Attributes:
        dims: the widths ``d_k`` measured.
        trials, num_keys, seed: the experiment's settings.
        score_variance: variance of the unscaled ``q·k`` over all trials and keys.
        scaled_variance: variance of ``q·k / sqrt(d_k)``.
        max_weight_unscaled: mean over trials of ``max_j softmax(q·K^T)_j``.
        max_weight_scaled: the same with the ``1/sqrt(d_k)`` factor.
    """

    dims: list[int]
    trials: int
    num_keys: int
    seed: int
    score_variance: list[float]
    scaled_variance: list[float]
    max_weight_unscaled: list[float]
    max_weight_scaled: list[float]

    def to_dict(self) -> dict:
        """A JSON-ready dict of the settings and the measured series."""
        return asdict(self)

    def to_text(self) -> str:
        """A table: one row per ``d_k``."""
        header = (
            f"{'d_k':>6}  {'var(q·k)':>10}  {'var(q·k/√d_k)':>13}  "
            f"{'max w, unscaled':>15}  {'max w, scaled':>13}"
        )
        rows = [
            f"{d:>6}  {v:>10.2f}  {sv:>13.3f}  {mu:>15.3f}  {ms:>13.3f}"
            for d, v, sv, mu, ms in zip(
                self.dims,
                self.score_variance,
                self.scaled_variance,
                self.max_weight_unscaled,
                self.max_weight_scaled,
                strict=True,
            )
        ]
        note = (
            f"{self.trials} trials of 1 query and {self.num_keys} keys with unit-normal entries, "
            f"seed {self.seed}; uniform weights would give a max of {1 / self.num_keys:.3f}"
        )
        return "\n".join([header, *rows, note]) + "\n"


WIDTH_SEEDS = 1_000_003  # seeds per --seed: d_k below it never share a generator
MAX_NUMBERS = 1 << 27  # numbers drawn at once for one width: 1 GiB of float64


def saturation(
    dims: Sequence[int] = DEFAULT_DIMS, *, trials: int = 1000, num_keys: int = 10, seed: int = 0
) -> SaturationResult:
    """Measure score variance and softmax saturation with and without ``1/sqrt(d_k)``.

    For each ``d_k``, draws ``trials`` queries ``(trials, d_k)`` and key sets
    ``(trials, num_keys, d_k)`` from ``N(0, 1)`` with a generator of its own,
    seeded by ``seed`` and ``d_k`` (so a width's row is the same whatever
    other widths are asked for), and computes ``s = q·K^T`` ``(trials, num_keys)``, the softmax
    weights of ``s`` and of ``s / sqrt(d_k)`` (with :func:`~attnkit.masked_softmax`),
    and their largest weight per trial.

    Args:
        dims: widths ``d_k``, each a positive int.
        trials: number of independent draws per width (>= 2).
        num_keys: keys per draw (>= 2).
        seed: seed of the random generator; equal settings give equal results.

    Returns:
        a :class:`SaturationResult`.

    Raises:
        ValueError: an empty ``dims``, a non-positive or fractional width, a ``trials``,
            ``num_keys`` or ``seed`` that is not a whole number, ``trials`` < 2,
            ``num_keys`` < 2, a width whose draw of ``trials * (num_keys + 1) * d_k``
            numbers is over :data:`MAX_NUMBERS` (1 GiB of float64), or a ``seed``
            whose generators' seeds would not fit in 64 bits.
    """
    dims = list(dims)
    if not dims or not all(_is_whole(d) for d in dims) or any(d <= 0 for d in dims):
        raise ValueError(f"dims must be a non-empty list of positive whole widths, got {dims}")
    dims = [int(d) for d in dims]  # 4.5 was refused above, not truncated to 4
    trials, num_keys, seed = (
        _whole(arg, value)
        for arg, value in (("trials", trials), ("num_keys", num_keys), ("seed", seed))
    )
    if trials < 2:
        raise ValueError(f"trials must be >= 2 (a variance needs two draws), got {trials}")
    if num_keys < 2:
        raise ValueError(
            f"num_keys must be >= 2 (softmax over one key is always 1), got {num_keys}"
        )
    _check_size(max(dims), trials, num_keys)
    _check_seed(seed, max(dims))
    import torch  # here, so that `attnkit explain` (this package) starts without it

    from ..attention.functional import masked_softmax

    series: dict[str, list[float]] = {k: [] for k in ("var", "svar", "unscaled", "scaled")}
    for d in dims:
        gen = torch.Generator().manual_seed(seed * WIDTH_SEEDS + d)
        q = torch.randn(trials, 1, d, generator=gen, dtype=torch.float64)  # (trials, 1, d_k)
        k = torch.randn(
            trials, num_keys, d, generator=gen, dtype=torch.float64
        )  # (trials, Tk, d_k)
        scores = (q @ k.transpose(-2, -1)).squeeze(1)  # (trials, Tk)
        scaled = scores / math.sqrt(d)  # (trials, Tk)
        series["var"].append(scores.var().item())
        series["svar"].append(scaled.var().item())
        series["unscaled"].append(masked_softmax(scores).amax(dim=-1).mean().item())
        series["scaled"].append(masked_softmax(scaled).amax(dim=-1).mean().item())
    return SaturationResult(
        dims=dims,
        trials=trials,
        num_keys=num_keys,
        seed=seed,
        score_variance=series["var"],
        scaled_variance=series["svar"],
        max_weight_unscaled=series["unscaled"],
        max_weight_scaled=series["scaled"],
    )


def _is_whole(x: object) -> bool:
    """A real number without a fractional part (4, 4.0 or 1e3), but not a bool."""
    return (
        isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and int(x) == x
    )


def _whole(arg: str, value: object) -> int:
    """``value`` as an int when it is whole (``trials=1e3`` is 1000).

    Raises:
        ValueError: naming ``arg``, for a fraction, a string, None or a non-finite number.
    """
    if not _is_whole(value):
        raise ValueError(f"{arg} must be a whole number, got {value!r}")
    return int(value)


def _check_size(d: int, trials: int, num_keys: int) -> None:
    """Refuse a draw of more than :data:`MAX_NUMBERS` numbers for width ``d`` (it is held
    whole: a million trials at d_k 1024 would allocate 90 GB and fail deep in torch).

    Raises:
        ValueError: naming the settings and the memory they need.
    """
    numbers = trials * (num_keys + 1) * d
    if numbers > MAX_NUMBERS:
        raise ValueError(
            f"trials={trials} with num_keys={num_keys} at d_k={d} draws {numbers:,} numbers "
            f"({numbers * 8 / 2**30:.1f} GiB of float64), over the limit of {MAX_NUMBERS:,}: "
            "use fewer trials or smaller widths"
        )


def _check_seed(seed: int, widest: int) -> None:
    """Refuse a seed whose per-width seeds ``seed * WIDTH_SEEDS + d_k`` leave int64."""
    low, high = -(2**63) // WIDTH_SEEDS + 1, (2**63 - 1 - widest) // WIDTH_SEEDS
    if not low <= seed <= high:
        raise ValueError(f"seed must be between {low:,} and {high:,}, got {seed:,}")
