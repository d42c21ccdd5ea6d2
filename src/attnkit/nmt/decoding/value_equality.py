"""Value equality for the result records that hold tensors (:class:`~.steps.Hypothesis`,
:class:`~.translate.Translation`).

A dataclass's own ``==`` compares its fields as a tuple, and a tensor field with more
than one element makes that raise ("Boolean value of Tensor with more than one value
is ambiguous"); so ``greedy_decode(...) == beam_search(..., beam_size=1)`` failed
instead of answering. Here two records are equal when every field is: tensors by
shape, dtype and value (:func:`torch.equal`; NaN equals nothing, as for floats).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

import torch

__all__ = ["compared_by_value"]

T = TypeVar("T", bound=type)


def compared_by_value(cls: T) -> T:
    """Class decorator (after ``@dataclass``): ``==`` compares the fields by value."""

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return all(_equal(getattr(self, f.name), getattr(other, f.name)) for f in fields(self))

    cls.__eq__ = __eq__
    cls.__hash__ = None  # equal by value and mutable: not hashable, as a plain dataclass
    return cls


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    return a == b
