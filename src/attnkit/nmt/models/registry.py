"""The translator architectures a run config can name, and the one place that builds them.

``model.arch`` in a run config picks the architecture (``rnn``, the default, or
``transformer``); :data:`ModelConfig` is the validated union of the
architectures' configs and :func:`build_translator` turns one into a
:class:`~attnkit.nmt.models.translator.Translator`. Nothing else in attnkit branches on
the architecture.

The registry imports only the architectures' configs (plain pydantic): a run
config validates without loading torch, and :func:`build_translator` imports
the chosen architecture's model code when it builds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, Discriminator, Tag

from .rnn.config import RNNConfig
from .transformer.config import TransformerConfig

if TYPE_CHECKING:
    from torch import Tensor

    from .translator import Translator

__all__ = [
    "ARCHITECTURES",
    "DEFAULT_ARCH",
    "ModelConfig",
    "build_translator",
    "default_model_config",
    "translator_for_weights",
    "weights_misfit",
]

# arch tag -> its config class
ARCHITECTURES: dict[str, type[BaseModel]] = {"rnn": RNNConfig, "transformer": TransformerConfig}

DEFAULT_ARCH = "rnn"


def _arch_of(value: Any) -> str | None:
    """The ``arch`` tag of a raw mapping or a config object (missing = the default).

    An unknown tag gives None (pydantic then reports the allowed tags); a value
    that is no mapping at all is validated as the default architecture, whose
    error then says what a model section must be.
    """
    if isinstance(value, dict):
        arch = value.get("arch", DEFAULT_ARCH)
    else:
        arch = getattr(value, "arch", DEFAULT_ARCH)
    return arch if isinstance(arch, str) and arch in ARCHITECTURES else None


ModelConfig = Annotated[
    Annotated[RNNConfig, Tag("rnn")] | Annotated[TransformerConfig, Tag("transformer")],
    Discriminator(_arch_of),
]


def default_model_config() -> BaseModel:
    """The model section of a run config that names none: the default architecture's defaults."""
    return ARCHITECTURES[DEFAULT_ARCH]()


def build_translator(
    config: RNNConfig | TransformerConfig, src_vocab_size: int, tgt_vocab_size: int
) -> Translator:
    """A freshly initialised translator of the architecture ``config.arch``.

    Args:
        config: a validated model config (:class:`RNNConfig` or :class:`TransformerConfig`).
        src_vocab_size: source vocabulary size, including the special tokens.
        tgt_vocab_size: target vocabulary size, including the special tokens.

    Raises:
        ValueError: a vocabulary smaller than the special tokens plus one symbol,
            or sizes the architecture cannot take (e.g. shared embeddings over
            vocabularies of different sizes).
    """
    return _translator_class(config.arch)(config, src_vocab_size, tgt_vocab_size)


def translator_for_weights(
    config: RNNConfig | TransformerConfig, src_vocab_size: int, tgt_vocab_size: int
) -> Translator:
    """A translator to load saved weights into: :func:`build_translator`, with torch's global
    RNG left as it was (the random initialisation it draws is overwritten by the weights).

    Loading a run is then no random draw of the caller's: ``torch.manual_seed(0)``
    followed by a load gives the numbers the seed alone gives.

    Raises:
        ValueError: as :func:`build_translator`.
    """
    import torch

    with torch.random.fork_rng(devices=[]):  # the model is initialised on the CPU
        return build_translator(config, src_vocab_size, tgt_vocab_size)


def weights_misfit(
    config: RNNConfig | TransformerConfig,
    src_vocab_size: int,
    tgt_vocab_size: int,
    weights: Mapping[str, Tensor],
) -> list[str]:
    """How ``weights`` (a saved ``state_dict``) differ from the tensors of a translator of
    ``config`` over these vocabularies: one line per tensor missing, unexpected, of
    another shape (``encoder.rnn.weight_hh_l0 (3, 3) in the checkpoint, (192, 64) here``)
    or not of floating point where the model's is; ``[]`` when they fit.

    The translator is built on the meta device (no memory, no RNG), so a config that
    asks for a model far larger than its weights (``hidden_size: 100000000``) is found
    out before anything of that size is allocated; one with more layers than the weights
    have tensors is not built at all.

    Raises:
        ValueError: as :func:`build_translator`.
    """
    import torch

    layers = config.encoder_layers + config.decoder_layers  # each holds a tensor or more
    if layers > len(weights):  # building a million layers, even on meta, would take hours
        return [
            f"model.encoder_layers + model.decoder_layers are {layers} layers, more than the "
            f"checkpoint's {len(weights)} tensors"
        ]
    try:
        with torch.device("meta"):
            wanted = build_translator(config, src_vocab_size, tgt_vocab_size).state_dict()
    except RuntimeError as err:  # sizes past what even the meta device counts (2**63 bytes)
        return [f"the model is too large to build ({err})"]
    misfits = [_misfit(key, value, weights.get(key)) for key, value in wanted.items()]
    return [line for line in misfits if line] + [
        f"{key} unexpected in the checkpoint" for key in weights if key not in wanted
    ]


def _misfit(key: str, wanted: Tensor, saved: Tensor | None) -> str | None:
    """Why the saved tensor cannot be the model's tensor ``key`` (``wanted``); None when it can.

    A floating-point tensor saved as integers, booleans or complex numbers does not fit:
    ``load_state_dict`` would cast it without a word (the imaginary part dropped).
    """
    shape = tuple(wanted.shape)
    if saved is None or tuple(saved.shape) != shape:
        found = "missing" if saved is None else tuple(saved.shape)
        return f"{key} {found} in the checkpoint, {shape} here"
    if wanted.is_floating_point() and not saved.is_floating_point():
        return f"{key} is {saved.dtype} in the checkpoint, a floating-point tensor here"
    return None


def _translator_class(arch: str) -> type[Translator]:
    """The translator class of ``arch``, its model code (and torch) imported only now."""
    if arch == "transformer":
        from .transformer.model import TransformerTranslator

        return TransformerTranslator
    from .rnn.model import RNNTranslator

    return RNNTranslator
