"""``explain``: one attention computation with every intermediate kept.

The arithmetic is the attention core's, written out in float64 numpy so that
``attnkit explain`` starts without loading torch: ``S = Q K^T`` (or a learned
score module's output), ``S * scale``, the masked softmax of
:func:`~attnkit.masked_softmax` (``exp(s - m)`` over the allowed keys, divided
by its sum; all-zero weights for a row with no allowed key) and ``W V`` for the
context, the same operations in the same order as
:func:`~attnkit.scaled_dot_product_attention`; the tests hold the two equal to
within 1e-12 on random inputs. The extra quantities a lesson writes out (the
unshifted exponentials and their sum, the shift of the stable softmax, the
weighted value rows) are recorded beside them. Sources: Vaswani et al. 2017,
eq. 1; Luong et al. 2015, sec. 3.1; Bahdanau et al. 2015, eqs. 5-6.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from ..attention.scores import Score

__all__ = ["AttentionTrace", "explain"]

Matrix = list[list[float]]
TRACE_KIND = "attnkit.attention_trace"
TRACE_VERSION = 1


@dataclass(frozen=True)
class AttentionTrace:
    """Every intermediate of one attention computation (rows are queries).

    Shapes use ``Tq`` queries, ``Tk`` keys, ``D`` query/key width, ``Dv`` value
    width; all numbers are Python floats (float64).

    Attributes:
        score: ``dot``, ``scaled_dot``, ``general``, ``concat`` or ``additive``.
        single_query: the query was given as one vector ``(D,)``.
        query: ``(Tq, D)``. keys: ``(Tk, Dk)``. values: ``(Tk, Dv)``.
        raw_scores: alignment scores before scaling, ``(Tq, Tk)``.
        scale: the factor applied to the raw scores (``1/sqrt(D)`` or 1).
        scaled_scores: ``raw_scores * scale``, ``(Tq, Tk)``.
        mask: ``(Tq, Tk)`` bool, True = may attend; None when nothing is masked.
        masked_scores: scaled scores with ``-inf`` at masked keys, ``(Tq, Tk)``.
        shift: per row, the largest allowed score ``m`` that the stable softmax
            subtracts before ``exp``; None for a row with no allowed key.
        exponentials: ``exp(s_j)`` without the shift (0 where masked; ``inf``
            where it overflows), ``(Tq, Tk)``; exp_sum: their row sums.
        shifted_exponentials: ``exp(s_j - m)``; shifted_sum: their row sums.
        weights: attention weights from ``masked_softmax``, ``(Tq, Tk)``.
        weighted_values: ``w_j * v_j``, ``(Tq, Tk, Dv)``.
        context: ``sum_j w_j v_j``, ``(Tq, Dv)``.
        score_parts: for a learned score, what its arithmetic went through (None
            for dot products and other modules): ``general`` (Luong et al. 2015,
            ``q^T W k_j``) has ``W`` ``(Dq, Dk)`` and ``W k_j`` as ``key_proj``
            ``(Tk, Dq)``; ``additive`` and ``concat`` (``v^T tanh(W_q q + W_k k_j)``)
            have ``W_q`` ``(A, Dq)``, ``W_k`` ``(A, Dk)``, ``query_proj`` ``(Tq, A)``,
            ``key_proj`` ``(Tk, A)``, ``hidden`` = ``tanh(W_q q + W_k k_j)``
            ``(Tq, Tk, A)`` and ``v`` ``(A,)``.
    """

    score: str
    single_query: bool
    query: Matrix
    keys: Matrix
    values: Matrix
    raw_scores: Matrix
    scale: float
    scaled_scores: Matrix
    mask: list[list[bool]] | None
    masked_scores: Matrix
    shift: list[float | None]
    exponentials: Matrix
    exp_sum: list[float]
    shifted_exponentials: Matrix
    shifted_sum: list[float]
    weights: Matrix
    weighted_values: list[Matrix]
    context: Matrix
    score_parts: dict[str, Any] | None = None

    def row_has_key(self, i: int) -> bool:
        """Whether query ``i`` may attend to at least one key."""
        return self.shift[i] is not None

    def weight_sums(self) -> list[float]:
        """Row sums of the weights: 1 for every row with an allowed key, else 0."""
        return [math.fsum(row) for row in self.weights]

    def to_text(self, precision: int = 3) -> str:
        """The worked example as plain text, numbers to ``precision`` decimals."""
        from .render import to_text

        return to_text(self, precision)

    def to_markdown(self, precision: int = 3) -> str:
        """The worked example as Markdown (a table per query)."""
        from .render import to_markdown

        return to_markdown(self, precision)

    def __str__(self) -> str:
        return self.to_text()

    def to_dict(self, precision: int | None = None) -> dict[str, Any]:
        """A JSON-ready dict; ``-inf``/``inf`` become the strings ``"-inf"``/``"inf"``.

        ``weights`` is a top-level ``(Tq, Tk)`` list, so the dict (saved as JSON)
        is also a valid input of ``attnkit plot weights``.

        Args:
            precision: round every number to this many decimals; None keeps
                full float64 precision (then ``from_dict`` gives back an equal
                trace).
        """
        if precision is not None and not (isinstance(precision, int) and 0 <= precision <= 15):
            raise ValueError(f"precision must be None or an int in [0, 15], got {precision!r}")
        data = {"kind": TRACE_KIND, "version": TRACE_VERSION}
        data.update({k: _encode(v, precision) for k, v in asdict(self).items()})
        data["row_labels"] = [f"q{i + 1}" for i in range(len(self.query))]
        data["col_labels"] = [f"k{j + 1}" for j in range(len(self.keys))]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AttentionTrace:
        """Rebuild a trace from :meth:`to_dict` output.

        Raises:
            ValueError: not an attention trace, another version, or a missing field.
        """
        if data.get("kind") != TRACE_KIND or data.get("version") != TRACE_VERSION:
            raise ValueError(
                f"not an attnkit attention trace (kind={data.get('kind')!r}, "
                f"version={data.get('version')!r}); expected {TRACE_KIND!r} version {TRACE_VERSION}"
            )
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data and n != "score_parts"]  # optional
        if missing:
            raise ValueError(f"attention trace is missing the field(s) {', '.join(missing)}")
        return cls(**{n: _decode(data[n]) for n in names if n in data})


def explain(
    query: Any,
    keys: Any,
    values: Any = None,
    *,
    score: str | Score = "scaled_dot",
    mask: Any = None,
    causal: bool = False,
) -> AttentionTrace:
    """Run attention for small typed-in vectors and keep every intermediate.

    ``s_j = score(q, k_j)``; ``w = masked_softmax(s * scale, mask)``;
    ``c = sum_j w_j v_j`` (Vaswani et al. 2017, eq. 1 for ``scaled_dot``;
    Luong et al. 2015, sec. 3.1 and Bahdanau et al. 2015, eq. 6 for the others).

    Args:
        query: one query ``(D,)`` or several ``(Tq, D)``; nested lists, numpy
            arrays or tensors of real numbers.
        keys: ``(Tk, Dk)``.
        values: ``(Tk, Dv)``; defaults to ``keys``.
        score: ``"scaled_dot"`` (scale ``1/sqrt(D)``), ``"dot"`` (scale 1), or an
            attnkit :class:`~attnkit.Score` module (e.g. a trained ``general``,
            ``concat`` or ``additive`` score), whose output is used unscaled.
        mask: bool, or 0/1 of any number type (``torch.tril(torch.ones(T, T))``),
            broadcastable to ``(Tq, Tk)`` (a ``(Tk,)`` vector applies to every
            query); True or 1 = may attend. Unlike the attention functions, a
            float mask here is never an additive bias.
        causal: also apply :func:`~attnkit.causal_mask` (bottom-right aligned).

    Returns:
        an :class:`AttentionTrace`; ``str(trace)`` is the worked example.

    Raises:
        ValueError: empty, ragged, non-finite or non-numeric input, a score that
            overflows float64, mismatched widths or key/value counts, a mask of the
            wrong shape, or a learned score named by string (it needs its weights:
            pass the module).
        TypeError: ``score`` is neither a name nor a Score module.
    """
    q, single = _as_matrix("query", query, vector_ok=True)
    k, _ = _as_matrix("keys", keys)
    v = k if values is None else _as_matrix("values", values)[0]
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"values has Tk={v.shape[0]} rows but keys has Tk={k.shape[0]}")
    name, raw, scale, parts = _scores(score, q, k)  # raw (Tq, Tk)
    _check_scores(raw)
    scaled = raw * scale  # (Tq, Tk)
    allowed = _allowed(mask, causal, *raw.shape)  # (Tq, Tk)
    masked = np.where(allowed, scaled, -math.inf)  # (Tq, Tk)
    has_key = allowed.any(axis=-1)  # (Tq,)
    shift = np.where(has_key, masked.max(axis=-1), 0.0)  # (Tq,)
    with np.errstate(over="ignore"):  # so may their sum (2 * exp(709.5))
        exps = np.exp(masked)  # (Tq, Tk), unshifted: may overflow to inf
        exp_sum = exps.sum(axis=-1)  # (Tq,)
    shifted = np.exp(masked - shift[:, None])  # (Tq, Tk), 0 where masked
    shifted_sum = shifted.sum(axis=-1)  # (Tq,)
    weights = shifted / np.where(has_key, shifted_sum, 1.0)[:, None]  # masked rows stay 0
    context = weights @ v  # (Tq, Dv)
    return AttentionTrace(
        score=name,
        single_query=single,
        query=q.tolist(),
        keys=k.tolist(),
        values=v.tolist(),
        raw_scores=raw.tolist(),
        scale=scale,
        scaled_scores=scaled.tolist(),
        mask=None if mask is None and not causal else allowed.tolist(),
        masked_scores=masked.tolist(),
        shift=[m if ok else None for m, ok in zip(shift.tolist(), has_key.tolist(), strict=True)],
        exponentials=exps.tolist(),
        exp_sum=exp_sum.tolist(),
        shifted_exponentials=shifted.tolist(),
        shifted_sum=shifted_sum.tolist(),
        weights=weights.tolist(),
        weighted_values=(weights[:, :, None] * v[None]).tolist(),  # (Tq, Tk, Dv)
        context=context.tolist(),
        score_parts=parts,
    )


def _as_matrix(arg: str, x: Any, vector_ok: bool = False) -> tuple[np.ndarray, bool]:
    """``x`` as a finite float64 matrix; a vector becomes one row when allowed."""
    if hasattr(x, "detach"):  # a torch tensor: torch is loaded already
        x = x.detach().cpu().double().numpy()
    try:
        t = np.array(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{arg} must be a rectangular array of real numbers: {err}") from None
    except OverflowError:  # a Python int beyond float64, such as 10**400
        raise ValueError(f"{arg} has a number too large for float64 (over 1.8e308)") from None
    single = t.ndim == 1 and vector_ok
    if single:
        t = t[None]  # (1, D)
    if t.ndim != 2:
        need = "(D,) or (Tq, D)" if vector_ok else "(T, D)"
        raise ValueError(f"{arg} must have shape {need}, got {tuple(t.shape)}")
    if t.size == 0:
        raise ValueError(f"{arg} is empty (shape {tuple(t.shape)})")
    if not bool(np.isfinite(t).all()):
        raise ValueError(f"{arg} has a non-finite entry (nan or inf)")
    return t, single


def _scores(
    score: str | Score, q: np.ndarray, k: np.ndarray
) -> tuple[str, np.ndarray, float, dict[str, Any] | None]:
    """(name, raw scores (Tq, Tk), scale, a learned score's parts or None)."""
    if isinstance(score, str):
        if score in ("dot", "scaled_dot"):
            return _dot_scores(score, q, k)
        from ..attention.scores import SCORES

        if score in SCORES:
            raise ValueError(
                f"score {score!r} has learned weights: pass the module itself, e.g. "
                f"score=attnkit.make_score({score!r}, query_dim=..., key_dim=...)"
            )
        raise ValueError(f"unknown score {score!r}; choose dot, scaled_dot or a Score module")
    return _module_scores(score, q, k)


def _module_scores(
    score: Score, q: np.ndarray, k: np.ndarray
) -> tuple[str, np.ndarray, float, dict[str, Any] | None]:
    """Scores of an attnkit Score module (torch is loaded: the caller built the module)."""
    import torch

    from ..attention.scores import DotScore, ScaledDotScore, Score

    if isinstance(score, ScaledDotScore):
        return _dot_scores("scaled_dot", q, k)
    if isinstance(score, DotScore):
        return _dot_scores("dot", q, k)
    if not isinstance(score, Score):
        raise TypeError(f"score must be a name or an attnkit Score module, got {type(score)}")
    param = next(score.parameters(), None)
    dtype, device = (torch.float64, "cpu") if param is None else (param.dtype, param.device)
    qt, kt = (torch.from_numpy(x).to(device, dtype)[None] for x in (q, k))
    with torch.no_grad():
        raw = score(qt, kt)[0]  # (Tq, Tk)
        parts = _score_parts(score, qt, kt)
    return score.name or type(score).__name__, raw.to("cpu", torch.float64).numpy(), 1.0, parts


def _score_parts(score: Score, qt: Any, kt: Any) -> dict[str, Any] | None:
    """What a general, concat or additive score computed on the way to its scores, from
    the module's own projections (``qt`` ``(1, Tq, Dq)``, ``kt`` ``(1, Tk, Dk)``); None
    for any other module."""
    import torch

    from ..attention.scores import AdditiveScore, GeneralScore

    def plain(t: torch.Tensor) -> list:
        return t.to("cpu", torch.float64).tolist()

    if isinstance(score, GeneralScore):
        return {"W": plain(score.weight.weight), "key_proj": plain(score.prepare_keys(kt)[0])}
    if not isinstance(score, AdditiveScore):  # ConcatScore is one
        return None
    key_proj = score.prepare_keys(kt)[0]  # W_k k_j: (Tk, A)
    query_proj = score.query_proj(qt)[0]  # W_q q: (Tq, A)
    hidden = torch.tanh(query_proj[:, None] + key_proj[None])  # (Tq, Tk, A)
    return {
        "W_q": plain(score.query_proj.weight),  # (A, Dq)
        "W_k": plain(score.key_proj.weight),  # (A, Dk)
        "query_proj": plain(query_proj),
        "key_proj": plain(key_proj),
        "hidden": plain(hidden),
        "v": plain(score.v.weight[0]),  # (A,)
    }


def _check_scores(raw: np.ndarray) -> None:
    """Finite inputs can still give a score float64 cannot hold (``1e200 * 1e200``)."""
    bad = np.argwhere(~np.isfinite(raw))
    if len(bad):
        i, j = bad[0]
        raise ValueError(
            f"the score of query q{i + 1} and key k{j + 1} is {raw[i, j]}: the product "
            "overflows float64; use smaller numbers"
        )


def _dot_scores(name: str, q: np.ndarray, k: np.ndarray) -> tuple[str, np.ndarray, float, None]:
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"keys has Dk={k.shape[-1]} but query has Dq={q.shape[-1]} for score {name!r}"
        )
    scale = 1.0 / math.sqrt(q.shape[-1]) if name == "scaled_dot" else 1.0
    with np.errstate(over="ignore", invalid="ignore"):  # _check_scores names an overflow
        return name, q @ k.T, scale, None  # (Tq, Tk)


def _allowed(mask: Any, causal: bool, tq: int, tk: int) -> np.ndarray:
    """The (Tq, Tk) bool mask of allowed keys (all True when nothing is masked).

    The causal part is :func:`~attnkit.causal_mask`'s bottom-right rule,
    ``j <= i + (Tk - Tq)``.
    """
    allowed = np.ones((tq, tk), dtype=bool)
    if mask is not None:
        try:
            user = np.asarray(mask.cpu() if hasattr(mask, "cpu") else mask)
        except ValueError as err:  # ragged rows typed by hand: [[1, 0], [1, 1, 1]]
            raise ValueError(
                f"mask must be a rectangular array of booleans or 0/1: {err}"
            ) from None
        if user.dtype != np.bool_:
            if user.dtype.kind not in "iubf" or not bool(((user == 0) | (user == 1)).all()):
                shown = list(dict.fromkeys(user.ravel().tolist()))[:4]  # None does not sort
                raise ValueError(
                    f"mask must hold booleans or 0/1 (1 = may attend), got {user.dtype} "
                    f"values {shown}"
                )
            user = user.astype(bool)
        try:
            allowed &= np.broadcast_to(user, (tq, tk))
        except ValueError:
            raise ValueError(
                f"mask has shape {tuple(user.shape)}, which does not broadcast to "
                f"(Tq, Tk) = {(tq, tk)}"
            ) from None
    if causal:
        allowed &= np.tri(tq, tk, k=tk - tq, dtype=bool)
    return allowed


def _encode(x: Any, precision: int | None) -> Any:
    if isinstance(x, dict):
        return {k: _encode(v, precision) for k, v in x.items()}
    if isinstance(x, list):
        return [_encode(e, precision) for e in x]
    if isinstance(x, float):
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x if precision is None else round(x, precision) + 0.0
    return x


def _decode(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decode(e) for e in x]
    if x in ("inf", "-inf"):
        return float(x)
    if isinstance(x, int) and not isinstance(x, bool):
        return float(x)
    return x
