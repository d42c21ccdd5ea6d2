"""Alignment score functions: dot, scaled dot, general, concat, additive.

Every score is an ``nn.Module`` with one interface: it maps queries
``(..., Tq, Dq)`` and keys ``(..., Tk, Dk)`` to alignment scores (energies)
``(..., Tq, Tk)``. The work that depends only on the keys (for the learned
scores, their projection) is split out into :meth:`Score.prepare_keys`, so a
decoder can do it once per source sentence and hand the result back at every
step with ``prepared_keys=``. Nothing per batch is stored on the module, and the
prepared keys are a plain tensor that beam search can reorder.

Sources: Luong, Pham & Manning 2015, sec. 3.1 (dot, general, concat);
Bahdanau, Cho & Bengio 2015, eq. 6 and appendix A.1.2 (additive);
Vaswani et al. 2017, eq. 1 (scaled dot).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .functional import autocast_dtype, default_scale, dot_scores, score_dtype
from .masks import check_device

__all__ = [
    "AdditiveScore",
    "ConcatScore",
    "DotScore",
    "GeneralScore",
    "SCORES",
    "Score",
    "ScaledDotScore",
    "make_score",
]


class Score(nn.Module):
    """Base class: ``score(query, keys) -> (..., Tq, Tk)``.

    Subclasses implement :meth:`compare`, and :meth:`prepare_keys` when part of
    the score depends on the keys alone.
    """

    name: str = ""

    def prepare_keys(self, keys: Tensor) -> Tensor:
        """Per-source work on the keys, done once per sentence.

        Args:
            keys: encoder states ``(..., Tk, Dk)``.

        Returns:
            prepared keys ``(..., Tk, D')`` to pass back as ``prepared_keys``.
        """
        return keys

    def compare(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        """Scores from queries ``(..., Tq, Dq)`` and prepared keys -> ``(..., Tq, Tk)``."""
        raise NotImplementedError

    def forward(self, query: Tensor, keys: Tensor, prepared_keys: Tensor | None = None) -> Tensor:
        """Alignment scores between every query and every key.

        Args:
            query: decoder states ``(..., Tq, Dq)``, floating.
            keys: encoder states ``(..., Tk, Dk)``, same leading dims.
            prepared_keys: the output of :meth:`prepare_keys` for these keys,
                to skip recomputing it; None computes it here.

        Returns:
            scores ``(..., Tq, Tk)`` in :func:`~attnkit.attention.functional.score_dtype`
            of the query's dtype: float32 for float16/bfloat16 inputs (a float16
            ``q . k`` overflows above 65504), the query's dtype otherwise. Inside
            an autocast region the product scores (``dot``, ``scaled_dot``,
            ``general``) come in the autocast dtype, as autocast's own products
            do (:func:`~attnkit.attention.functional.dot_scores`).

        Raises:
            ValueError: a rank below 2, mismatched leading dims, ``keys`` on
                another device than ``query`` (or ``query`` than the score's
                parameters), widths the score cannot combine, or
                ``prepared_keys`` of another shape than :meth:`prepare_keys`
                gives for ``keys``.
            TypeError: ``query`` or ``keys`` not a floating-point tensor; outside
                autocast, ``keys`` or the score's parameters of another dtype
                than ``query``.
        """
        self.check_inputs(query, keys)
        if prepared_keys is None:
            prepared_keys = self.prepare_keys(keys)
        else:
            self.check_prepared(keys, prepared_keys)
        return self.compare(query, prepared_keys)

    def prepared_width(self, keys: Tensor) -> int:
        """Width ``D'`` of :meth:`prepare_keys`'s output for ``keys`` ``(..., Tk, Dk)``."""
        return keys.shape[-1]

    def check_prepared(self, keys: Tensor, prepared_keys: Tensor) -> None:
        """``prepared_keys`` must be ``(..., Tk, D')`` for ``keys`` ``(..., Tk, Dk)``.

        A batch of 1 would otherwise broadcast one sentence's prepared keys over
        every sentence of the batch, and a stale ``Tk`` fail deep in a product.
        """
        expected = (*keys.shape[:-1], self.prepared_width(keys))
        if tuple(prepared_keys.shape) != expected:
            raise ValueError(
                f"prepared_keys has shape {tuple(prepared_keys.shape)} but keys "
                f"{tuple(keys.shape)} need {expected} for score '{self.name}' "
                "(pass score.prepare_keys(keys) for these keys)"
            )

    def check_inputs(self, query: Tensor, keys: Tensor) -> None:
        """Check ``query`` ``(..., Tq, Dq)`` and ``keys`` ``(..., Tk, Dk)`` for this score.

        Subclasses extend it with their width checks; :meth:`forward` calls it first.

        Raises:
            ValueError, TypeError: as :meth:`forward` lists them (all but the
                ``prepared_keys`` shape, which :meth:`check_prepared` checks).
        """
        for arg, t in (("query", query), ("keys", keys)):
            if not isinstance(t, Tensor):
                raise TypeError(
                    f"{arg} must be a torch.Tensor for score '{self.name}', got {type(t).__name__}"
                )
            if t.dim() < 2:
                raise ValueError(
                    f"{arg} must have shape (..., T, D) for score '{self.name}', "
                    f"got {tuple(t.shape)}"
                )
            if not t.is_floating_point():
                raise TypeError(
                    f"{arg} must be floating point for score '{self.name}', got dtype {t.dtype}"
                )
        if query.shape[:-2] != keys.shape[:-2]:
            raise ValueError(
                f"query {tuple(query.shape)} and keys {tuple(keys.shape)} must share their "
                f"leading (batch) dims for score '{self.name}'"
            )
        check_device("keys", keys, query.device, "query")
        param = next(self.parameters(), None)  # one looked up per call: a decoder step's
        if param is not None:
            check_device("query", query, param.device, f"score '{self.name}'")
        self._check_dtypes(query, keys, param)

    def _check_dtypes(self, query: Tensor, keys: Tensor, param: Tensor | None) -> None:
        """Outside autocast (which casts each product itself) every dtype must be the query's
        (``param``: one of the score's parameters, or None for a score without any)."""
        if autocast_dtype(query.device) is not None:
            return
        if keys.dtype != query.dtype:
            raise TypeError(
                f"keys has dtype {keys.dtype} but query has {query.dtype} for score '{self.name}'"
            )
        if param is not None and param.dtype != query.dtype:
            raise TypeError(
                f"query has dtype {query.dtype} but score '{self.name}' has {param.dtype} "
                f"parameters (convert one of them with .to({query.dtype}))"
            )


class _WidthsMustMatch(Score):
    """Shared check for the parameter-free scores, where q and k meet in a dot product."""

    def check_inputs(self, query: Tensor, keys: Tensor) -> None:
        super().check_inputs(query, keys)
        if query.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"keys has Dk={keys.shape[-1]} but query has Dq={query.shape[-1]} "
                f"for score '{self.name}'"
            )


class DotScore(_WidthsMustMatch):
    """``score(q, k) = q . k`` (Luong et al. 2015, sec. 3.1, "dot"). Needs Dq == Dk."""

    name = "dot"

    def compare(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        return dot_scores(query, prepared_keys)  # (..., Tq, Tk)


class ScaledDotScore(_WidthsMustMatch):
    """``score(q, k) = q . k / sqrt(Dk)`` (Vaswani et al. 2017, eq. 1). Needs Dq == Dk.

    Dividing by ``sqrt(Dk)`` keeps the variance of the score near 1 for unit
    variance inputs, so the softmax does not saturate as the width grows.
    """

    name = "scaled_dot"

    def compare(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        scale = default_scale(prepared_keys.shape[-1])
        return dot_scores(query, prepared_keys, scale)  # (..., Tq, Tk)


class GeneralScore(Score):
    """Bilinear score ``score(q, k) = q^T W k`` (Luong et al. 2015, sec. 3.1, "general").

    ``W k`` is the prepared key, so each step costs one dot product per key.

    Args:
        query_dim: Dq.
        key_dim: Dk (defaults to Dq).
    """

    name = "general"

    def __init__(self, query_dim: int, key_dim: int | None = None) -> None:
        super().__init__()
        key_dim = query_dim if key_dim is None else key_dim
        _check_positive(query_dim=query_dim, key_dim=key_dim)
        self.weight = nn.Linear(key_dim, query_dim, bias=False)  # W: (Dq, Dk)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.weight(keys)  # (..., Tk, Dq)

    def prepared_width(self, keys: Tensor) -> int:
        return self.weight.out_features

    def compare(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        return dot_scores(query, prepared_keys)  # (..., Tq, Tk)

    def check_inputs(self, query: Tensor, keys: Tensor) -> None:
        super().check_inputs(query, keys)
        _check_width("query", query, self.weight.out_features, self.name)
        _check_width("keys", keys, self.weight.in_features, self.name)


class AdditiveScore(Score):
    """Additive score ``score(q, k) = v^T tanh(W_q q + W_k k)``.

    Bahdanau et al. 2015, eq. 6 / appendix A.1.2 (``v_a^T tanh(W_a s + U_a h)``).
    ``W_k k`` is the prepared key: computed once per source sentence, it turns
    each decoder step into one small projection of the query plus a broadcast
    add. Memory per call is ``(..., Tq, Tk, A)``.

    Args:
        query_dim: Dq.
        key_dim: Dk (defaults to Dq).
        hidden_dim: A, the width of the hidden layer (defaults to Dq).
    """

    name = "additive"

    def __init__(
        self, query_dim: int, key_dim: int | None = None, hidden_dim: int | None = None
    ) -> None:
        super().__init__()
        key_dim = query_dim if key_dim is None else key_dim
        hidden_dim = query_dim if hidden_dim is None else hidden_dim
        _check_positive(query_dim=query_dim, key_dim=key_dim, hidden_dim=hidden_dim)
        self.query_proj = nn.Linear(query_dim, hidden_dim, bias=False)  # W_q: (A, Dq)
        self.key_proj = nn.Linear(key_dim, hidden_dim, bias=False)  # W_k: (A, Dk)
        self.v = nn.Linear(hidden_dim, 1, bias=False)  # v: (1, A)

    def prepare_keys(self, keys: Tensor) -> Tensor:
        return self.key_proj(keys)  # (..., Tk, A)

    def prepared_width(self, keys: Tensor) -> int:
        return self.key_proj.out_features

    def compare(self, query: Tensor, prepared_keys: Tensor) -> Tensor:
        q = self.query_proj(query)  # (..., Tq, A)
        hidden = torch.tanh(q.unsqueeze(-2) + prepared_keys.unsqueeze(-3))  # (..., Tq, Tk, A)
        return self.v(hidden).squeeze(-1).to(score_dtype(query.dtype))  # (..., Tq, Tk)

    def check_inputs(self, query: Tensor, keys: Tensor) -> None:
        super().check_inputs(query, keys)
        _check_width("query", query, self.query_proj.in_features, self.name)
        _check_width("keys", keys, self.key_proj.in_features, self.name)


class ConcatScore(AdditiveScore):
    """Concat score ``score(q, k) = v^T tanh(W [q; k])`` (Luong et al. 2015, sec. 3.1).

    Splitting ``W = [W_q, W_k]`` column-wise gives ``W [q; k] = W_q q + W_k k``,
    so this is the additive form with the same per-source key projection;
    :attr:`weight` returns the concatenated ``W`` of the paper's notation.
    """

    name = "concat"

    @property
    def weight(self) -> Tensor:
        """``W``: ``(A, Dq + Dk)``."""
        return torch.cat([self.query_proj.weight, self.key_proj.weight], dim=1)


SCORES: dict[str, type[Score]] = {
    cls.name: cls for cls in (DotScore, ScaledDotScore, GeneralScore, ConcatScore, AdditiveScore)
}


def make_score(
    name: str,
    query_dim: int | None = None,
    key_dim: int | None = None,
    hidden_dim: int | None = None,
) -> Score:
    """Build a score by name: ``dot``, ``scaled_dot``, ``general``, ``concat``, ``additive``.

    Args:
        name: the score's name.
        query_dim: Dq (needed by the learned scores).
        key_dim: Dk (defaults to Dq).
        hidden_dim: A for ``concat`` and ``additive`` (defaults to Dq); the other
            scores have no hidden layer and ignore it, so one call can build any score.

    Raises:
        ValueError: an unknown name, a learned score without ``query_dim``,
            ``query_dim != key_dim`` for ``dot`` or ``scaled_dot``, or a width
            that is not a positive int.
    """
    if name not in SCORES:
        raise ValueError(f"unknown score {name!r}; choose one of {', '.join(SCORES)}")
    if name in ("dot", "scaled_dot"):
        given = {k: v for k, v in (("query_dim", query_dim), ("key_dim", key_dim)) if v is not None}
        _check_positive(**given)
        if None not in (query_dim, key_dim) and query_dim != key_dim:
            raise ValueError(
                f"score {name!r} compares q and k in a dot product and needs "
                f"query_dim == key_dim, got {query_dim} and {key_dim}"
            )
        return SCORES[name]()
    if query_dim is None:
        raise ValueError(f"score {name!r} has learned weights and needs query_dim")
    if name == "general":
        return GeneralScore(query_dim, key_dim)
    return SCORES[name](query_dim, key_dim, hidden_dim)


def _check_positive(**dims: int) -> None:
    for arg, value in dims.items():
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{arg} must be a positive int, got {value!r}")


def _check_width(arg: str, t: Tensor, expected: int, name: str) -> None:
    if t.shape[-1] != expected:
        raise ValueError(
            f"{arg} has width {t.shape[-1]} but score '{name}' was built for {expected} "
            f"(got shape {tuple(t.shape)})"
        )
