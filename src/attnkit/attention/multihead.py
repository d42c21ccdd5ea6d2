"""Multi-head attention: learned Q/K/V projections, heads in parallel, concat, project.

Vaswani et al. 2017, sec. 3.2.2:
``MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O`` with
``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)`` and ``Attention`` the scaled
dot-product attention of eq. 1. Grouped-query attention (Ainslie et al. 2023,
sec. 2.2) lets each group of ``G`` query heads share one key/value head;
multi-query attention (Shazeer 2019) is the case of a single key/value head.

Notation: ``B`` batch, ``Tq`` queries, ``Tk`` keys, ``E`` model width,
``H`` query heads, ``Hkv`` key/value heads, ``G = H / Hkv`` query heads per
key/value head, ``Dh = E / H`` head size.

Mask convention: a bool mask is True where attention is ALLOWED.
``torch.nn.MultiheadAttention`` uses the opposite polarity (True = ignore);
:meth:`MultiHeadAttention.to_torch_masks` converts at that boundary.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor, nn

from .dropout import check_rate
from .functional import attend, autocast_mixes, takes_fused_kernel, zero_dead_keys
from .kv_cache import KVCache
from .masks import ResolvedMask, check_device, check_float_mask, host_can_read, resolve_mask
from .torch_interop import TorchInterop

__all__ = ["KVCache", "MultiHeadAttention"]


class MultiHeadAttention(TorchInterop, nn.Module):
    """Multi-head scaled dot-product attention, batch first.

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_H) W^O``,
    ``head_i = softmax(Q W_i^Q (K W_g(i)^K)^T / sqrt(Dh) + M) V W_g(i)^V``
    (Vaswani et al. 2017, sec. 3.2.2 and eq. 1), where query head ``i`` uses
    key/value head ``g(i) = i // G``: ``G = 1`` is standard multi-head
    attention, ``Hkv = 1`` multi-query attention (Shazeer 2019), anything
    between grouped-query attention (Ainslie et al. 2023).

    The projections are separate ``nn.Linear`` layers: ``q_proj`` E -> E,
    ``k_proj`` kdim -> Hkv*Dh, ``v_proj`` vdim -> Hkv*Dh, ``out_proj`` E -> E.

    Args:
        embed_dim: model width ``E``, the width of queries and of the output.
        num_heads: query heads ``H``; must divide ``E``.
        kdim: width of ``key`` inputs; defaults to ``E``.
        vdim: width of ``value`` inputs; defaults to ``E``.
        num_kv_heads: key/value heads ``Hkv``; must divide ``H``; defaults to ``H``.
        bias: add biases to the four projections.
        dropout: dropout probability on the attention weights, training mode only.
        device, dtype: where and how to create the parameters.

    Raises:
        ValueError: a non-positive size, ``E`` not divisible by ``H``, ``H`` not
            divisible by ``Hkv``, or ``dropout`` outside [0, 1).
        TypeError: ``dropout`` not a number.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        *,
        kdim: int | None = None,
        vdim: int | None = None,
        num_kv_heads: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        kdim = embed_dim if kdim is None else kdim
        vdim = embed_dim if vdim is None else vdim
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        sizes = dict(embed_dim=embed_dim, num_heads=num_heads, kdim=kdim, vdim=vdim)
        for name, size in {**sizes, "num_kv_heads": num_kv_heads}.items():
            if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                raise ValueError(f"{name} must be a positive int, got {size!r}")
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim={embed_dim} is not divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads={num_heads} is not divisible by num_kv_heads={num_kv_heads}"
            )
        dropout = check_rate("dropout", dropout)
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.kdim, self.vdim, self.dropout = kdim, vdim, dropout
        self.head_dim = embed_dim // num_heads
        kv_width = num_kv_heads * self.head_dim
        factory = dict(bias=bias, device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self.k_proj = nn.Linear(kdim, kv_width, **factory)
        self.v_proj = nn.Linear(vdim, kv_width, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, **factory)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """As ``torch.nn.MultiheadAttention``: Xavier-uniform input projections, zero biases.

        With ``kdim == vdim == E`` PyTorch draws ``W^Q, W^K, W^V`` as one packed
        ``(3E, E)`` matrix, whose Xavier bound ``sqrt(6 / (E + 3E))`` is ``1/sqrt(2)``
        of a separate ``(E, E)`` one's; the bound here is the packed matrix's
        (``E + 2 Hkv Dh`` rows with grouped heads), so the weights, and the
        spread of the initial scores, are PyTorch's.
        """
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if self.kdim == self.vdim == self.embed_dim:
            rows = sum(proj.out_features for proj in projections)  # the packed (rows, E)
            bound = math.sqrt(6.0 / (self.embed_dim + rows))
            for proj in projections:
                nn.init.uniform_(proj.weight, -bound, bound)
        else:  # PyTorch keeps three matrices, each with its own Xavier bound
            for proj in projections:
                nn.init.xavier_uniform_(proj.weight)
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, kdim={self.kdim}, vdim={self.vdim}, "
            f"dropout={self.dropout}"
        )

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        key_padding_mask: Tensor | None = None,
        attn_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_weights: bool = True,
        cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` to ``key``/``value`` (or to ``query`` itself).

        Self-attention when ``key`` and ``value`` are None; cross-attention
        otherwise (``value`` defaults to ``key``). Without ``need_weights`` the
        heads go through PyTorch's fused kernel; with it, through an explicit
        masked softmax. Both give the same output.

        Causal masking is aligned bottom-right: query ``i`` may attend to key
        ``j`` when ``j <= i + (Tk - Tq)``, so the newest query sees every key
        (what incremental decoding needs). For ``Tq == Tk`` this is the usual
        lower triangle, identical to ``torch.nn.MultiheadAttention``'s.

        A head whose query row has no allowed key contributes zero to the
        concatenation; a query row with no allowed key in any head has an
        output of exactly 0 (the output bias is not added) and zero weights.
        Keys that no query may attend to (padding, cached ones included) are
        zeroed before any product, so a NaN or inf there reaches no output (see
        :func:`~attnkit.attention.functional.scaled_dot_product_attention`).

        Args:
            query: ``(B, Tq, E)``, floating, the parameters' dtype (inside
                ``torch.autocast`` also autocast's dtype, e.g. a bf16 activation
                with float32 parameters); a single step may be ``(B, E)`` (then
                ``Tq = 1`` and the outputs lose that dim).
            key: ``(B, Tk, kdim)`` for cross-attention, or None.
            value: ``(B, Tk, vdim)``; defaults to ``key``.
            key_padding_mask: ``(B, Tk)`` bool, True = real token (the opposite of
                ``torch.nn.MultiheadAttention``; convert with
                :func:`~attnkit.attention.functional.invert_mask`). With a cache,
                ``Tk`` counts the cached positions too. A row that masks every
                key (an empty sentence, or torch's polarity by mistake) gives
                zero outputs; on CPU, outside ``torch.compile``, it also warns
                once per process.
            attn_mask: ``(Tq, Tk)`` or ``(B, H, Tq, Tk)`` (size-1 dims broadcast);
                bool (True = may attend) or float (added to the scores, ``-inf``
                = masked).
            is_causal: also apply the bottom-right causal mask.
            need_weights: also return the attention weights (explicit path).
            average_weights: average the weights over heads.
            cache: a :class:`KVCache` for incremental decoding, updated in place.
                A cross-attention cache zeroes the keys its first padding-only
                call's ``key_padding_mask`` masks: later calls may mask more
                keys, never fewer.

        Returns:
            ``(output, weights)``: output ``(B, Tq, E)``; weights ``(B, Tq, Tk)``
            averaged over heads, ``(B, H, Tq, Tk)`` per head, or None without
            ``need_weights``. The weights are the ones that made the heads'
            outputs: in training mode with ``dropout``, after dropout and its
            ``1/(1-p)`` rescaling (as PyTorch returns them). For a ``(B, E)``
            query: ``(B, E)`` and ``(B, Tk)`` / ``(B, H, Tk)``.

        Raises:
            ValueError: wrong ranks, widths, batch sizes or lengths; an input on
                another device than the parameters, a mask on another than
                ``query``; a mask of the wrong shape; a float ``attn_mask``
                holding NaN or ``+inf``, or 0.0 and 1.0 only, both present (checked on CPU:
                :func:`~attnkit.attention.masks.check_float_mask`); a cache
                of another batch size, kind or key/value head layout; masks that
                allow a key a cross-attention cache has zeroed
                (:attr:`KVCache.zeroed`, checked on CPU).
            TypeError: non-tensor or non-floating inputs, a dtype other than the
                parameters' (outside autocast), a non-bool ``key_padding_mask``, an ``attn_mask``
                neither bool nor floating, or ``cache`` not a :class:`KVCache`.
        """
        step = isinstance(query, Tensor) and query.dim() == 2
        if step:
            query = query.unsqueeze(1)  # (B, 1, E)
        self._check_inputs(query, key, value, cache)
        b, tq, _ = query.shape
        q = self._split_heads(self.q_proj(query), self.num_heads)  # (B, H, Tq, Dh)
        k, v = self._keys_values(query, key, value, cache)  # (B, Hkv, Tk, Dh) each
        dropout_p = self.dropout if self.training else 0.0
        fused = takes_fused_kernel(q, k, v, dropout_p, need_weights)
        resolved = self._mask(key_padding_mask, attn_mask, is_causal, fused, q, k)
        cross = cache is not None and (cache.cross if cache.cross is not None else key is not None)
        if cross:
            _check_zeroed_keys(cache, key_padding_mask, resolved)
        zeroed = cross and _padding_only(resolved, attn_mask, is_causal)
        if zeroed and not cache.zeroed:  # the first cross-attention step: zero them once
            k, v = zero_dead_keys(resolved.allowed, k, v)  # (B, Hkv, Tk, Dh) each
        heads, weights = attend(
            q,
            self._share_kv_heads(k),  # (B, H, Tk, Dh)
            self._share_kv_heads(v),  # (B, H, Tk, Dh)
            resolved,
            1.0 / math.sqrt(self.head_dim),
            dropout_p,
            need_weights,
            dead_keys_zeroed=zeroed,
        )  # (B, H, Tq, Dh), (B, H, Tq, Tk) or None
        concat = heads.transpose(1, 2).reshape(b, tq, self.embed_dim)  # (B, Tq, E)
        output = self.out_proj(concat)  # (B, Tq, E)
        if resolved.row_has_key is not None:  # rows no head may attend from: exactly 0
            output = torch.where(_any_head(resolved.row_has_key), output, 0.0)  # (B, Tq, E)
        if weights is not None and average_weights:
            weights = weights.mean(dim=1)  # (B, Tq, Tk)
        if cache is not None:
            cache.key, cache.value, cache.steps = k, v, cache.steps + tq
            cache.cross = cache.cross if cache.cross is not None else key is not None
            if zeroed and not cache.zeroed:  # padding-only: key_padding_mask did the zeroing
                cache.kept = key_padding_mask  # (B, Tk)
            cache.zeroed = cache.zeroed or zeroed  # zeroed keys stay zero
        if step:
            output = output.squeeze(1)  # (B, E)
            weights = None if weights is None else weights.squeeze(-2)  # (B, [H,] Tk)
        return output, weights

    def _split_heads(self, x: Tensor, heads: int) -> Tensor:
        """``(B, T, heads*Dh) -> (B, heads, T, Dh)``."""
        return x.unflatten(-1, (heads, self.head_dim)).transpose(1, 2)  # (B, heads, T, Dh)

    def _share_kv_heads(self, x: Tensor) -> Tensor:
        """``(B, Hkv, Tk, Dh) -> (B, H, Tk, Dh)``: query head ``i`` reads K/V head ``i // G``."""
        group = self.num_heads // self.num_kv_heads
        return x if group == 1 else x.repeat_interleave(group, dim=1)  # (B, H, Tk, Dh)

    def _keys_values(
        self, query: Tensor, key: Tensor | None, value: Tensor | None, cache: KVCache | None
    ) -> tuple[Tensor, Tensor]:
        """Projected keys and values ``(B, Hkv, Tk, Dh)``, cached ones included."""
        cross = key is not None if cache is None or cache.cross is None else cache.cross
        if cache is not None and cross and cache.key is not None:
            return cache.key, cache.value  # encoder states, projected on the first call
        source_k = query if key is None else key
        source_v = source_k if value is None else value
        k = self._split_heads(self.k_proj(source_k), self.num_kv_heads)  # (B, Hkv, Tq|Tk, Dh)
        v = self._split_heads(self.v_proj(source_v), self.num_kv_heads)  # (B, Hkv, Tq|Tk, Dh)
        if cache is None or cross or cache.key is None:
            return k, v
        return torch.cat([cache.key, k], dim=2), torch.cat([cache.value, v], dim=2)

    def _mask(
        self,
        key_padding_mask: Tensor | None,
        attn_mask: Tensor | None,
        is_causal: bool,
        fused: bool,
        q: Tensor,
        k: Tensor,
    ) -> ResolvedMask:
        """Check the masks, broadcast them to 4-D and resolve them (:func:`resolve_mask`)."""
        b, _, tq, _ = q.shape
        tk = k.shape[2]
        keep = None
        if key_padding_mask is not None:
            _check_mask("key_padding_mask", key_padding_mask, [(b, tk)], bool_only=True)
            check_device("key_padding_mask", key_padding_mask, q.device, "query")
            _warn_if_all_padding(key_padding_mask)
            keep = key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
        if attn_mask is not None:
            target = (b, self.num_heads, tq, tk)
            _check_mask("attn_mask", attn_mask, [(tq, tk), target], bool_only=False)
            check_device("attn_mask", attn_mask, q.device, "query")
            check_float_mask("attn_mask", attn_mask, q.dtype)
            attn_mask = attn_mask if attn_mask.dim() == 4 else attn_mask[None, None]  # 4-D
        return resolve_mask(keep, attn_mask, query=q, tk=tk, is_causal=is_causal, fused=fused)

    def _check_inputs(
        self, query: Tensor, key: Tensor | None, value: Tensor | None, cache: KVCache | None
    ) -> None:
        dtype, device = _input_dtype_device(self.q_proj)
        for name, t in (("query", query), ("key", key), ("value", value)):
            # before any .device is read; query has no default, so None is no tensor either
            if (t is not None or name == "query") and not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t is not None:
                check_device(name, t, device, "the parameters")
        _check_input("query", query, self.embed_dim, None, dtype)
        b = query.shape[0]
        if key is None and value is not None:
            raise ValueError("value was given without key; pass key too (or neither)")
        if key is not None:
            _check_input("key", key, self.kdim, b, dtype)
        if value is not None:
            _check_input("value", value, self.vdim, b, dtype)
            if value.shape[1] != key.shape[1]:
                raise ValueError(
                    f"value has Tk={value.shape[1]} but key has Tk={key.shape[1]} "
                    f"(key {tuple(key.shape)}, value {tuple(value.shape)})"
                )
        elif key is not None and self.kdim != self.vdim:
            raise ValueError(
                f"value defaults to key, but kdim={self.kdim} differs from vdim={self.vdim}; "
                "pass value"
            )
        if cache is not None and not isinstance(cache, KVCache):
            raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
        has_keys = cache is not None and cache.cross is True and cache.key is not None
        widths = (self.kdim, self.vdim)
        if key is None and not has_keys and widths != (self.embed_dim, self.embed_dim):
            raise ValueError(
                f"self-attention (key=None) needs kdim == vdim == embed_dim, got "
                f"kdim={self.kdim}, vdim={self.vdim}, embed_dim={self.embed_dim}; pass key"
            )
        if cache is not None:
            self._check_cache(cache, query, key)

    def _check_cache(self, cache: KVCache, query: Tensor, key: Tensor | None) -> None:
        """``cache`` must be of this call's kind, batch size and key/value head layout."""
        if cache.cross is False and key is not None:
            raise ValueError("cache holds self-attention keys; pass key=None and value=None")
        if cache.cross and cache.key is None and key is None:
            raise ValueError("cache is a cross-attention cache with no keys yet; pass key")
        if cache.key is None:
            return
        b, (batch, heads, _, size) = query.shape[0], cache.key.shape  # (B, Hkv, Tk, Dh)
        if batch != b:
            raise ValueError(
                f"cache has batch size {batch} but query has B={b} (query {tuple(query.shape)})"
            )
        if (heads, size) != (self.num_kv_heads, self.head_dim):
            raise ValueError(
                f"cache holds keys of {heads} key/value heads of size {size} (shape "
                f"{tuple(cache.key.shape)}), but this module has num_kv_heads="
                f"{self.num_kv_heads}, head_dim={self.head_dim}: was it filled by another layer?"
            )


def _input_dtype_device(proj: nn.Module) -> tuple[torch.dtype, torch.device]:
    """The dtype and device a projection takes its input in: its weight's, or for a
    dynamically quantized Linear (``torch.ao.quantization.quantize_dynamic``, CPU only),
    whose ``weight`` is a method returning int8 or float16 weights, float32 on the CPU."""
    weight = proj.weight
    if isinstance(weight, Tensor):
        return weight.dtype, weight.device
    return torch.float32, torch.device("cpu")


def _any_head(row_has_key: Tensor) -> Tensor:
    """``(B|1, H|1, Tq, 1)`` or ``(Tq, 1)`` -> True where any head has a key for the row."""
    return row_has_key.any(dim=1) if row_has_key.dim() == 4 else row_has_key  # (B|1, Tq, 1)


def _check_input(name: str, x: Tensor, width: int, batch: int | None, dtype: torch.dtype) -> None:
    if x.dim() != 3 or x.shape[-1] != width:
        raise ValueError(f"{name} must have shape (B, T, {width}), got {tuple(x.shape)}")
    if batch is not None and x.shape[0] != batch:
        raise ValueError(f"{name} has batch size {x.shape[0]} but query has B={batch}")
    if x.dtype != dtype and not autocast_mixes(x.device, x.dtype, dtype):
        raise TypeError(f"{name} has dtype {x.dtype} but the parameters are {dtype}")


_warned_all_padding = False  # the polarity warning is given once per process


def _warn_if_all_padding(key_padding_mask: Tensor) -> None:
    """Warn once when some batch row of ``key_padding_mask`` (B, Tk) masks every key.

    That is what torch's polarity (True = ignore) looks like here, where True
    means a real token: full-length sentences would come out as zeros. Checked
    only where :func:`~attnkit.attention.masks.host_can_read` allows it (CPU, outside
    ``torch.compile`` and ``torch.func`` transforms).
    """
    global _warned_all_padding
    if _warned_all_padding or not host_can_read(key_padding_mask):
        return
    if bool(key_padding_mask.any(dim=-1).all()):
        return
    _warned_all_padding = True
    warnings.warn(
        "key_padding_mask masks every key of some batch row; attnkit's mask is True for a "
        "real token (torch.nn.MultiheadAttention's is True for padding): convert a torch "
        "mask with attnkit.invert_mask. Such rows give zero outputs. (Warned once.)",
        UserWarning,
        stacklevel=6,  # the caller of the module: _mask, forward, torch's two call frames
    )


def _check_mask(name: str, mask: Tensor, shapes: list[tuple[int, ...]], *, bool_only: bool) -> None:
    """``mask`` must be bool (or floating unless ``bool_only``) and of one of ``shapes``.

    A 4-D mask may have size 1 where ``(B, H, Tq, Tk)`` has any size.
    """
    if not isinstance(mask, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor or None, got {type(mask).__name__}")
    if mask.dtype != torch.bool and (bool_only or not mask.is_floating_point()):
        kinds = "bool" if bool_only else "bool or floating"
        raise TypeError(f"{name} must be {kinds} (True = may attend), got dtype {mask.dtype}")
    for shape in shapes:
        if mask.dim() == len(shape) and all(
            got == want or (got == 1 and len(shape) == 4)
            for got, want in zip(mask.shape, shape, strict=True)
        ):
            return
    wanted = " or ".join(str(shape) for shape in shapes)
    raise ValueError(f"{name} has shape {tuple(mask.shape)}, expected {wanted}")


def _padding_only(resolved: ResolvedMask, attn_mask: Tensor | None, is_causal: bool) -> bool:
    """Whether the only masked keys are padding (the same at every decoding step)."""
    return resolved.allowed is not None and attn_mask is None and not is_causal


def _check_zeroed_keys(cache: KVCache, key_padding_mask: Tensor | None, r: ResolvedMask) -> None:
    """Refuse masks that allow a key a cross-attention cache has zeroed (``KVCache.kept``).

    Those keys and values are gone: attending to them would silently use zeros.
    Checked where :func:`~attnkit.attention.masks.host_can_read` allows it (CPU,
    outside ``torch.compile`` and ``torch.func`` transforms), and not at all when
    ``key_padding_mask`` is ``cache.kept``.
    """
    kept = cache.kept  # (B, Tk) bool or None
    if not cache.zeroed or kept is None or not host_can_read(kept):
        return
    if key_padding_mask is kept:
        return
    live = True if r.allowed is None else r.allowed.any(dim=-2, keepdim=True)  # (.., 1, Tk)
    revived = ~kept[:, None, None, :] & live  # (B, H|1, 1, Tk)
    if not bool(revived.any()):
        return
    row, _, _, position = revived.nonzero()[0].tolist()
    given = " (None: every key)" if key_padding_mask is None else ""
    raise ValueError(
        f"key_padding_mask{given} lets batch row {row} attend to key {position}, but this "
        "cross-attention cache zeroed that key and its value when its first "
        "key_padding_mask masked it; pass that mask (or one that masks more) at every "
        "step, or start a new KVCache"
    )
