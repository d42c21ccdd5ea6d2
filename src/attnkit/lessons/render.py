"""Render an :class:`~attnkit.lessons.trace.AttentionTrace` as text or Markdown.

The text follows the order of a lesson: raw scores (dot products written out
term by term for small widths), the scale, the mask, the softmax (the plain
exponentials and their sum, then the shift of the stable form), the check that
the weights sum to 1, and the context vector as a weighted sum of value rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, localcontext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .trace import AttentionTrace

__all__ = ["fmt", "fmt_vec", "to_markdown", "to_text"]

#: Widths and key counts up to which products and sums are written out in full.
EXPAND_MAX = 8
#: Widths up to this get their dot products written out, wrapped, TERMS_PER_LINE a line.
WRAP_MAX = 64
TERMS_PER_LINE = 8
#: Numbers this large or larger are printed in scientific notation.
SCIENTIFIC_FROM = 1e6
SUM_TOLERANCE = 1e-9

_SCORE_TITLES = {
    "scaled_dot": "scaled dot-product score s_j = q·k_j / sqrt(D)  (Vaswani et al. 2017, eq. 1)",
    "dot": "dot-product score s_j = q·k_j  (Luong et al. 2015, sec. 3.1)",
    "general": "general score s_j = q^T W k_j  (Luong et al. 2015, sec. 3.1)",
    "concat": "concat score s_j = v^T tanh(W [q; k_j])  (Luong et al. 2015, sec. 3.1)",
    "additive": "additive score s_j = v^T tanh(W_q q + W_k k_j)  (Bahdanau et al. 2015, eq. 6)",
}


_SCORE_MATRIX = {
    "dot": "Score matrix S = Q·K^T (rows = queries):",
    "scaled_dot": "Score matrix S = Q·K^T (rows = queries):",
    "general": "Score matrix S = Q·W·K^T (rows = queries):",
}


# digits of the whole part of any finite float64 (1.8e+308), and a few to spare
_DECIMAL_DIGITS = 320


def fmt(x: float | None, precision: int, integral: bool = False, *, small: bool = False) -> str:
    """One number: ``-inf``/``inf``, an integer when ``integral``, fixed-point, or
    scientific (``1.238e+307``) from :data:`SCIENTIFIC_FROM` on, where fixed-point
    would print a wall of digits (``exp(707.1)`` has 308). With ``small``, a nonzero
    number below ``10**-precision`` is scientific too (``exp(-15) = 3.059e-07``, not
    ``0.000``): for the exponentials that a softmax worked by hand divides."""
    if x is None:
        return "-"
    if math.isinf(x):
        return "-inf" if x < 0 else "inf"
    if integral:
        return str(int(x))
    if abs(x) >= SCIENTIFIC_FROM or (small and 0 < abs(x) < 10.0**-precision):
        return f"{x:.{max(precision, 1)}e}"
    if round(x, precision) == 0:
        x = 0.0  # no "-0.000"
    return f"{x:.{precision}f}"


def _is_integral(xs: Sequence[float]) -> bool:
    finite = [x for x in xs if math.isfinite(x)]
    return bool(finite) and all(x.is_integer() and abs(x) < 1e15 for x in finite)


def fmt_vec(xs: Sequence[float], precision: int, *, small: bool = False) -> str:
    """``[2, 0, 1]`` when every entry is a whole number, else ``[1.155, 0.000, 0.577]``
    (``small`` as for :func:`fmt`)."""
    integral = _is_integral(xs)
    return "[" + ", ".join(fmt(x, precision, integral, small=small) for x in xs) + "]"


def _factor(x: float, integral: bool, precision: int) -> str:
    s = fmt(x, precision, integral)
    return f"({s})" if s.startswith("-") else s


def _dot_terms(q: Sequence[float], k: Sequence[float], precision: int) -> str:
    qi, ki = _is_integral(q), _is_integral(k)
    return " + ".join(
        f"{_factor(a, qi, precision)}×{_factor(b, ki, precision)}"
        for a, b in zip(q, k, strict=True)
    )


def _wrapped_dot(lead: str, q: Sequence[float], k: Sequence[float], p: int) -> list[str]:
    """A long dot product written out, TERMS_PER_LINE products a line."""
    qi, ki = _is_integral(q), _is_integral(k)
    terms = [f"{_factor(a, qi, p)}×{_factor(b, ki, p)}" for a, b in zip(q, k, strict=True)]
    rows = [terms[n : n + TERMS_PER_LINE] for n in range(0, len(terms), TERMS_PER_LINE)]
    return [(lead if n == 0 else "      + ") + " + ".join(row) for n, row in enumerate(rows)]


def _header(trace: AttentionTrace, p: int) -> list[str]:
    tq, tk = len(trace.query), len(trace.keys)
    lines = [f"Attention, worked example: {_SCORE_TITLES.get(trace.score, trace.score)}"]
    for i, q in enumerate(trace.query):
        name = "q" if trace.single_query else f"q{i + 1}"
        lines.append(f"  query  {name} = {fmt_vec(q, p)}")
    lines += [f"  key    k{j + 1} = {fmt_vec(k, p)}" for j, k in enumerate(trace.keys)]
    if trace.values == trace.keys:
        lines.append("  values = keys (v_j = k_j)")
    else:
        lines += [f"  value  v{j + 1} = {fmt_vec(v, p)}" for j, v in enumerate(trace.values)]
    dq, dk = len(trace.query[0]), len(trace.keys[0])
    width = f"D = {dq}" if dq == dk else f"Dq = {dq}, Dk = {dk}"  # a learned score's widths
    lines.append(f"  Tq = {tq} quer{'y' if tq == 1 else 'ies'}, Tk = {tk} keys, {width}")
    return lines


def _scores_step(trace: AttentionTrace, i: int, q_name: str, p: int) -> list[str]:
    raw = trace.raw_scores[i]
    integral = _is_integral(raw)
    lines = ["Step 1  raw scores"]
    learned = trace.score not in ("dot", "scaled_dot")
    if learned:
        lines += _learned_terms(trace, i, q_name, p)
    elif len(trace.query[i]) <= EXPAND_MAX:
        for j, k in enumerate(trace.keys):
            terms = _dot_terms(trace.query[i], k, p)
            lines.append(f"  {q_name}·k{j + 1} = {terms} = {fmt(raw[j], p, integral)}")
    elif len(trace.query[i]) <= WRAP_MAX:
        for j, k in enumerate(trace.keys):
            lines += _wrapped_dot(f"  {q_name}·k{j + 1} = ", trace.query[i], k, p)
            lines.append(f"      = {fmt(raw[j], p, integral)}")
    else:
        lines += [
            f"  (term-by-term products skipped: D = {len(trace.query[i])} is more than the "
            f"{WRAP_MAX} shown;",
            "   each score is the sum of the products q_d×k_d)",
        ]
    lines.append(f"  scores = {fmt_vec(raw, p)}")
    return lines


def _learned_terms(trace: AttentionTrace, i: int, q_name: str, p: int) -> list[str]:
    """A general, concat or additive score worked out for query ``i`` from the parts its
    module computed (:attr:`AttentionTrace.score_parts`), when ``Dq``, ``Dk`` and the hidden
    width are at most :data:`EXPAND_MAX`; otherwise one line saying the module computed
    the scores."""
    parts, raw = trace.score_parts, trace.raw_scores[i]
    widths = (len(trace.query[0]), len(trace.keys[0]), len(parts["key_proj"][0]) if parts else 0)
    if not parts or max(widths) > EXPAND_MAX:  # Dq, Dk and A (Dq for general)
        return [f"  computed by the {trace.score} score module, used as is (no 1/sqrt(D))"]
    q, integral = trace.query[i], _is_integral(raw)
    if "query_proj" not in parts:  # general: s_j = q . (W k_j), Luong et al. 2015, sec. 3.1
        lines = [f"  W = {_fmt_rows(parts['W'], p)}  (the module's weights, Dq x Dk)"]
        for j, wk in enumerate(parts["key_proj"]):
            lines.append(f"  W k{j + 1} = {fmt_vec(wk, p)}")
            lines.append(
                f"  {q_name}·(W k{j + 1}) = {_dot_terms(q, wk, p)} = {fmt(raw[j], p, integral)}"
            )
        return lines
    # additive / concat: s_j = v . tanh(W_q q + W_k k_j), Bahdanau et al. 2015, eq. 6
    v, hidden = parts["v"], parts["hidden"][i]
    lines = [
        f"  W_q = {_fmt_rows(parts['W_q'], p)}  (the module's weights, A = {len(v)} hidden units)",
        f"  W_k = {_fmt_rows(parts['W_k'], p)}",
        f"  v = {fmt_vec(v, p)}",
        f"  W_q {q_name} = {fmt_vec(parts['query_proj'][i], p)}",
    ]
    if trace.score == "concat":
        lines.append(f"  (W [{q_name}; k_j] = W_q {q_name} + W_k k_j, W split by columns)")
    for j, (wk, h) in enumerate(zip(parts["key_proj"], hidden, strict=True)):
        lines += [
            f"  W_k k{j + 1} = {fmt_vec(wk, p)}",
            f"  tanh(W_q {q_name} + W_k k{j + 1}) = {fmt_vec(h, p)}",
            f"  s{j + 1} = v·tanh(...) = {_dot_terms(v, h, p)} = {fmt(raw[j], p, integral)}",
        ]
    return lines


def _fmt_rows(rows: Sequence[Sequence[float]], p: int) -> str:
    """A small matrix on one line: ``[[0.1, 0.2], [0.3, 0.4]]``."""
    return "[" + ", ".join(fmt_vec(r, p) for r in rows) + "]"


def _scale_step(trace: AttentionTrace, i: int, p: int) -> list[str]:
    if trace.score != "scaled_dot":
        return ["Step 2  scale: none (factor 1), scaled = scores"]
    d, root = len(trace.query[0]), _root(trace, p)
    lines = [f"Step 2  scale by 1/sqrt(D) = 1/sqrt({d}) = 1/{root}"]
    raw, integral = trace.raw_scores[i], _is_integral(trace.raw_scores[i])
    if len(raw) <= EXPAND_MAX:
        parts = ", ".join(f"{fmt(s, p, integral)}/{root}" for s in raw)
        lines.append(f"  scaled = [{parts}]")
        lines.append(f"         = {fmt_vec(trace.scaled_scores[i], p)}")
        note = _scale_note(trace, i, p)
        if note:
            lines.append(f"  {note}")
    else:
        lines.append(f"  scaled = {fmt_vec(trace.scaled_scores[i], p)}")
    return lines


def _scale_note(trace: AttentionTrace, i: int, p: int) -> str | None:
    """A note when the scores shown, divided by hand by the rounded root shown, print
    differently from the exact scaled scores (7/1.732 = 4.042, but 7/sqrt(3) = 4.041);
    None otherwise."""
    raw, exact = trace.raw_scores[i], trace.scaled_scores[i]
    by_hand = _divided_by_hand([fmt(s, p, _is_integral(raw)) for s in raw], _root(trace, p), p)
    if by_hand == [fmt(x, p) for x in exact]:
        return None
    shown = "[" + ", ".join(by_hand) + "]"
    return f"(by hand from the rounded numbers shown: {shown}; the scaled scores are exact)"


def _divided_by_hand(numerators: Sequence[str], denominator: str, p: int) -> list[str]:
    """Each number as printed divided by the one printed below it, as a student would:
    in decimal and rounded half up to ``p`` decimals (-3.573/2 = -1.7865 is -1.787,
    where the binary float nearest -1.7865 prints -1.786). Worked with every digit a
    float64 can print (a score of 1e+28 rounded to 3 decimals has 32; Decimal's default
    28 digits would raise InvalidOperation)."""
    quantum = Decimal(1).scaleb(-p)
    with localcontext() as ctx:
        ctx.prec = _DECIMAL_DIGITS + p
        return [
            fmt(float((Decimal(n) / Decimal(denominator)).quantize(quantum, ROUND_HALF_UP)), p)
            for n in numerators
        ]


def _root(trace: AttentionTrace, p: int) -> str:
    """``sqrt(D)`` as shown: ``2`` for D = 4, ``1.732`` for D = 3."""
    root = math.sqrt(len(trace.query[0]))
    return fmt(root, p, root.is_integer())


def _mask_step(trace: AttentionTrace, i: int, p: int) -> list[str]:
    if trace.mask is None:
        return []
    row = trace.mask[i]
    blocked = [f"k{j + 1}" for j, ok in enumerate(row) if not ok]
    allowed = "[" + ", ".join("1" if ok else "0" for ok in row) + "]"
    if not blocked:
        return [f"Step 3  mask {allowed} (1 = may attend): no key masked for this query"]
    return [
        f"Step 3  mask {allowed} (1 = may attend): {', '.join(blocked)} masked, score -> -inf",
        f"  masked = {fmt_vec(trace.masked_scores[i], p)}",
    ]


def hand_exponentials(trace: AttentionTrace, i: int, p: int) -> tuple[list[float], float] | None:
    """``exp`` of the scores as shown (rounded to ``p``) and the sum of the results, each
    number as it is printed (:func:`_exp_shown`).

    This is the arithmetic of a lesson done by hand, so each printed line can be
    checked with a calculator; None when an exponential or their sum overflows
    (``exp(709.5)`` fits in float64, twice that does not).
    """
    try:
        exps = [
            _as_shown(math.exp(round(s, p)), p) if math.isfinite(s) else 0.0
            for s in trace.masked_scores[i]
        ]
        return exps, _as_shown(math.fsum(exps), p)
    except OverflowError:
        return None


def _exp_shown(x: float, p: int) -> str:
    """An exponential or a sum of them as printed: a tiny one keeps its digits."""
    return fmt(x, p, small=True)


def _as_shown(x: float, p: int) -> float:
    """``x`` as :func:`_exp_shown` prints it, back as a number to calculate with."""
    return float(_exp_shown(x, p))


def _full_precision_note(trace: AttentionTrace, i: int, p: int) -> str | None:
    """A note with the unrounded exponentials when they differ from the hand values."""
    hand = hand_exponentials(trace, i, p)
    exact = (trace.exponentials[i], trace.exp_sum[i])
    if hand is None or not math.isfinite(exact[1]):
        return None
    shown = [_exp_shown(x, p) for x in hand[0]] + [_exp_shown(hand[1], p)]
    if shown == [_exp_shown(x, p) for x in exact[0]] + [_exp_shown(exact[1], p)]:
        return None
    return (
        "(as by hand, each exp uses the score shown and the sum adds the rounded exps;\n"
        f"   at full precision exp(s) = {fmt_vec(exact[0], p, small=True)}, "
        f"sum = {_exp_shown(exact[1], p)}; the weights are exact)"
    )


def _softmax_step(trace: AttentionTrace, i: int, p: int) -> list[str]:
    n = "4" if trace.mask is not None else "3"
    lines = [f"Step {n}  softmax  w_j = exp(s_j) / sum_k exp(s_k)"]
    if not trace.row_has_key(i):
        return lines + [
            "  this row has no allowed key: every key is masked,",
            "  so every weight is 0 and the context is the zero vector",
        ]
    s, w = trace.masked_scores[i], trace.weights[i]
    hand = hand_exponentials(trace, i, p)
    problem = _plain_exp_problem(trace, i, hand)
    if problem:
        lines.append(f"  {problem}; the stable form below is what is computed")
    elif len(s) <= EXPAND_MAX:
        e, total = hand
        lines.append(
            "  "
            + "   ".join(
                f"exp({fmt(a, p)}) = {_exp_shown(b, p)}" for a, b in zip(s, e, strict=True)
            )
        )
        lines.append(f"  sum = {' + '.join(_exp_shown(b, p) for b in e)} = {_exp_shown(total, p)}")
        parts = ", ".join(f"{_exp_shown(b, p)}/{_exp_shown(total, p)}" for b in e)
        lines.append(f"  weights = [{parts}]")
        lines.append(f"          = {fmt_vec(w, p)}")
        lines += _division_note(w, e, total, p)
    else:
        lines.append(
            f"  exp(s) = {fmt_vec(hand[0], p, small=True)}, sum = {_exp_shown(hand[1], p)}"
        )
        lines.append(f"  weights = {fmt_vec(w, p)}")
    note = _full_precision_note(trace, i, p)
    if note:
        lines.append(f"  {note}")
    lines += _scientific_note(hand[0] if hand and not problem else (), p)
    m = fmt(trace.shift[i], p, _is_integral(s))
    lines.append(
        f"  stable softmax: subtract the row maximum m = {m} before exp (same weights, no overflow)"
    )
    lines.append(
        f"  exp(s_j - m) = {fmt_vec(trace.shifted_exponentials[i], p)}, "
        f"sum = {fmt(trace.shifted_sum[i], p)}, weights = {fmt_vec(w, p)}"
    )
    lines.append(_sum_check(trace, i, p))
    return lines


def _division_note(w: Sequence[float], e: Sequence[float], total: float, p: int) -> list[str]:
    """A note when the divisions shown, ``e_j / total`` of the exponentials as printed,
    print differently from the exact weights ``w`` (0.002/0.003 = 0.667, but
    exp(-6) / (exp(-6) + exp(-7)) = 0.731); no line otherwise."""
    by_hand = _divided_by_hand([_exp_shown(b, p) for b in e], _exp_shown(total, p), p)
    if by_hand == [fmt(x, p) for x in w]:
        return []
    shown = "[" + ", ".join(by_hand) + "]"
    return [f"  (by hand these divisions give {shown}; the weights are exact)"]


def _plain_exp_problem(
    trace: AttentionTrace, i: int, hand: tuple[list[float], float] | None
) -> str | None:
    """Why the plain ``exp(s_j) / sum`` cannot be worked out for row ``i``, or None:
    an overflow, or every exponential underflowing to 0 (``exp(-800)``), a 0/0."""
    if hand is None or not math.isfinite(trace.exp_sum[i]):
        return "exp(s_j) or their sum overflows float64 here"
    if hand[1] == 0.0:
        return "every exp(s_j) underflows to 0 in float64 here"
    return None


def _scientific_note(exps: Sequence[float], p: int) -> list[str]:
    """What the scientific notation of the exponentials shown means, when there is some."""
    lines = []
    if any(b >= SCIENTIFIC_FROM for b in exps):
        lines += [
            "  (large numbers in scientific notation: 1.5e+17 = 1.5 × 10^17; attnkit's",
            "   softmax never forms them: it subtracts the row maximum m first, below)",
        ]
    if any(0 < b < 10.0**-p for b in exps):
        lines.append("  (small numbers in scientific notation: 4.5e-05 = 4.5 × 10^-5 = 0.000045)")
    return lines


def _sum_check(trace: AttentionTrace, i: int, p: int) -> str:
    """The check that row ``i``'s weights sum to 1, with a note when the rounded
    weights shown add up to another printed number (0.506 + 0.307 + 0.186 = 0.999)."""
    w, total = trace.weights[i], trace.weight_sums()[i]
    shown = " + ".join(fmt(x, p) for x in w) if len(w) <= EXPAND_MAX else "sum of weights"
    verdict = "ok, the weights sum to 1" if abs(total - 1.0) <= SUM_TOLERANCE else "NOT 1"
    line = f"  check: {shown} = {fmt(total, p)}  ({verdict})"
    by_hand = math.fsum(round(x, p) for x in w)
    if len(w) <= EXPAND_MAX and fmt(by_hand, p) != fmt(total, p):
        line += (
            f"\n  (the rounded weights shown add up to {fmt(by_hand, p)}; "
            f"the exact weights sum to {fmt(total, p)})"
        )
    return line


def _context_note(trace: AttentionTrace, i: int, p: int) -> str | None:
    """A note when the context worked out by hand from the rounded weights and
    values shown prints differently from the exact context (None otherwise)."""
    weights, exact = trace.weights[i], trace.context[i]
    by_hand = [
        math.fsum(round(w, p) * round(v[d], p) for w, v in zip(weights, trace.values, strict=True))
        for d in range(len(exact))
    ]
    if [fmt(x, p) for x in by_hand] == [fmt(x, p) for x in exact]:
        return None
    return f"(by hand from the rounded weights shown: {fmt_vec(by_hand, p)}; the context is exact)"


def _context_step(trace: AttentionTrace, i: int, p: int) -> list[str]:
    n = "5" if trace.mask is not None else "4"
    lines = [f"Step {n}  context  c = sum_j w_j v_j"]
    c = fmt_vec(trace.context[i], p)
    if not trace.row_has_key(i):
        return lines + [f"  c = {c}  (no allowed key)"]
    if len(trace.values) <= EXPAND_MAX and len(trace.values[0]) <= EXPAND_MAX:
        terms = " + ".join(
            f"{fmt(w, p)}×{fmt_vec(v, p)}"
            for w, v in zip(trace.weights[i], trace.values, strict=True)
        )
        lines.append(f"  c = {terms}")
        lines.append(f"    = {c}")
        note = _context_note(trace, i, p)
        if note:
            lines.append(f"  {note}")
    else:
        lines.append(f"  c = {c}")
    return lines


def _matrix_lines(title: str, rows: Sequence[Sequence[float]], p: int) -> list[str]:
    return [title] + [f"  {fmt_vec(r, p)}" for r in rows]


def to_text(trace: AttentionTrace, precision: int = 3) -> str:
    """The whole worked example as plain text."""
    p = _check_precision(precision)
    lines = _header(trace, p)
    several = len(trace.query) > 1
    if several:
        lines += [""] + _matrix_lines(
            _SCORE_MATRIX.get(trace.score, "Score matrix S (rows = queries):"), trace.raw_scores, p
        )
    for i in range(len(trace.query)):
        q_name = "q" if trace.single_query else f"q{i + 1}"
        lines += ["", f"Query {i + 1} of {len(trace.query)} ({q_name})"] if several else [""]
        lines += _scores_step(trace, i, q_name, p)
        lines += _scale_step(trace, i, p)
        lines += _mask_step(trace, i, p)
        lines += _softmax_step(trace, i, p)
        lines += _context_step(trace, i, p)
    if several:
        lines += [""] + _matrix_lines(
            "Weights (row-wise softmax, rows = queries):", trace.weights, p
        )
        lines += _matrix_lines("Context vectors (rows = queries):", trace.context, p)
    return "\n".join(lines) + "\n"


def to_markdown(trace: AttentionTrace, precision: int = 3) -> str:
    """The worked example as Markdown: one table per query, then its sums and context."""
    p = _check_precision(precision)
    lines = [
        "## Attention, worked example",
        "",
        f"Score: {_SCORE_TITLES.get(trace.score, trace.score)}.",
    ]
    scaled = trace.score == "scaled_dot"
    if scaled:
        d, root = len(trace.query[0]), _root(trace, p)
        lines.append(f"Scale: 1/sqrt({d}) = 1/{root} = {fmt(trace.scale, p)}.")
    for i, q in enumerate(trace.query):
        lines += ["", f"### Query {i + 1}: q = {fmt_vec(q, p)}", ""]
        lines += _markdown_table(trace, i, p) + [""]
        note = _scale_note(trace, i, p) if scaled else None
        if note:
            lines.append(_sentence(note[1:-1]))
        if not trace.row_has_key(i):
            lines.append("This row has no allowed key: all weights are 0 and the context is 0.")
        else:
            hand = hand_exponentials(trace, i, p)
            total = "overflows" if hand is None else _exp_shown(hand[1], p)
            lines.append(
                f"Sum of exp(s_j) = {total}; stable softmax shift m = {fmt(trace.shift[i], p)}, "
                f"sum of exp(s_j − m) = {fmt(trace.shifted_sum[i], p)}."
            )
            note = _full_precision_note(trace, i, p)
            if note:
                lines.append(_sentence(note[1:-1]))
            lines.append(_sentence(_sum_check(trace, i, p)))
        lines.append(f"Context c = Σ_j w_j v_j = {fmt_vec(trace.context[i], p)}.")
        note = _context_note(trace, i, p) if trace.row_has_key(i) else None
        if note:
            lines.append(_sentence(note[1:-1]))
    return "\n".join(lines) + "\n"


def _markdown_table(trace: AttentionTrace, i: int, p: int) -> list[str]:
    lines = [
        "| key | k_j | v_j | raw score | scaled | exp(s_j) | exp(s_j − m) | weight |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    hand = hand_exponentials(trace, i, p)
    raw_integral = _is_integral(trace.raw_scores[i])
    for j, (k, v) in enumerate(zip(trace.keys, trace.values, strict=True)):
        allowed = trace.mask is None or trace.mask[i][j]
        scaled = fmt(trace.scaled_scores[i][j], p) if allowed else "masked"
        e = _exp_shown(trace.exponentials[i][j] if hand is None else hand[0][j], p)  # inf: overflow
        cells = [
            f"k{j + 1}",
            fmt_vec(k, p),
            fmt_vec(v, p),
            fmt(trace.raw_scores[i][j], p, raw_integral),
            scaled,
            e,
            fmt(trace.shifted_exponentials[i][j], p),
            fmt(trace.weights[i][j], p),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _sentence(text: str) -> str:
    """One Markdown line: whitespace collapsed, first letter upper case, a final full stop."""
    text = " ".join(text.split())
    return text[:1].upper() + text[1:] + "."


def _check_precision(precision: int) -> int:
    if not isinstance(precision, int) or not 0 <= precision <= 15:
        raise ValueError(f"precision must be an int in [0, 15], got {precision!r}")
    return precision
