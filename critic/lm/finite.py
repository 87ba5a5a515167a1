"""Non-finite numbers never pass: one check for losses, log-likelihoods, probabilities and weights.

:func:`check_finite` returns its value when every number in it is finite and otherwise raises
:class:`NonFiniteError` (a ``ValueError``, so the command line prints it as one ``critic: error:``
line and exits with status 2) saying what was not finite, how, where, and what to do::

    finetune: the training loss is nan at step 37, lr 0.5: lower --lr (it is 0.5) ...
    runs/lm/best: the total NLL of the documents is inf: the model gives non-finite log-probabilities ...
    runs/lm/best: weight transformer.h.0.attn.c_attn.weight holds 1 nan of 3072 values: ...

Fine-tuning checks each step's loss and gradient norm (before the update, so a bad step never
reaches the weights or a checkpoint) and each validation loss; perplexity checks the total NLL
and the perplexities; sampling checks the model's logits and the (warped) next-token
probabilities at every step; loading a model checks its weights.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["NonFiniteError", "check_finite", "check_weights"]


class NonFiniteError(ValueError):
    """A number that must be finite is NaN or infinite (the message says which, where and why)."""


def _where(where: dict[str, Any]) -> str:
    def show(value: Any) -> str:
        return f"{value:.3g}" if isinstance(value, float) else str(value)

    return ", ".join(f"{key.replace('_', ' ')} {show(value)}" for key, value in where.items() if value is not None)


def _problem(value: Any) -> str | None:
    """``None`` when every number of ``value`` is finite, else how it is not (``"is nan"``, ``"holds 2 nan of
    64 values"``)."""
    if isinstance(value, torch.Tensor):
        if not (value.is_floating_point() or value.is_complex()):
            return None
        finite = torch.isfinite(value)
        if bool(finite.all()):
            return None
        if value.numel() == 1:
            return _problem(value.item())
        nan = int(torch.isnan(value).sum())
        inf = int((~finite).sum()) - nan
        kinds = " and ".join(part for part in (f"{nan} nan" if nan else "", f"{inf} infinite" if inf else "") if part)
        return f"holds {kinds} of {value.numel()} values"
    number = float(value)
    if math.isfinite(number):
        return None
    return f"is {number}"  # "is nan", "is inf", "is -inf"


def check_finite(value: Any, what: str, *, fix: str | None = None, **where: Any) -> Any:
    """``value`` (a number or a tensor) when all finite; else :class:`NonFiniteError`:
    ``"{what} is nan at {key} {value}, ...: {fix}"`` (``where`` items with value ``None`` are left out)."""
    problem = _problem(value)
    if problem is None:
        return value
    place = _where(where)
    raise NonFiniteError(f"{what} {problem}" + (f" at {place}" if place else "") + (f": {fix}" if fix else ""))


def check_weights(model, source: str) -> None:
    """Every parameter of ``model`` finite, else :class:`NonFiniteError` naming ``source`` (the folder or
    file the model came from) and the first damaged parameter."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            check_finite(param, f"{source}: weight {name}",
                         fix="the model's weights are damaged (a diverged fine-tune, or a broken file); "
                             "use another model folder, e.g. the best/ of a healthy run")
