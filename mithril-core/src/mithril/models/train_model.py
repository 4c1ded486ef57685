"""``TrainModel``: a model plus its losses, regularisation and metrics, as Mithril's published API builds
training graphs. The compiled model has the wrapped model's outputs, each named loss/metric, and
``final_cost``: the loss combiner (sum by default) over ``coef * loss`` terms plus ``coef * regulariser``
terms. ``pm.evaluate(params, data, output_gradients=True)`` differentiates ``final_cost``.

Example:
    >>> import re
    >>> from mithril.models import L2, Linear, Mean, Model, SquaredError, TrainModel
    >>> model = Model()
    >>> model |= Linear(2)(input="input", weight="w", output="output")
    >>> train = TrainModel(model)
    >>> train.add_loss(SquaredError(), reduce_steps=[Mean()], input="output", target="target")
    >>> train.add_regularization(L2(), coef=1e-2, input=re.compile("w"))
    >>> "final_cost" in train.output_keys
    True
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentError, KeyError_
from ..framework.keys import Connection, IOKey
from ..framework.model import Model
from .blocks._util import op

__all__ = ["TrainModel", "L1", "L2"]


class L1(Model):
    """``sum(|input|)``: L1 regularisation (``TrainModel.add_regularization(L1(), coef=...)``)."""

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.expose(op(self, "sum", op(self, "abs", IOKey("input"))), "output")
        self._cin = self._keys["input"]


class L2(Model):
    """``0.5 * sum(input ** 2)``: L2 regularisation (weight decay: its gradient is ``input``)."""

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.expose(op(self, "multiply", op(self, "sum", op(self, "square", IOKey("input"))), 0.5), "output")
        self._cin = self._keys["input"]


def _reduced(train: TrainModel, block: Model, reduce_steps: Sequence[Model] | None, kwargs: dict[str, Any]) -> Connection:
    """Add ``block`` (elementwise) connected by ``kwargs``, then each reduction of ``reduce_steps`` in turn."""
    elementwise = getattr(block, "elementwise", None)
    if reduce_steps is not None and callable(elementwise) and getattr(block, "reduction", "none") != "none":
        block = elementwise()  # our loss blocks reduce by themselves; Mithril's are elementwise
    train |= block(**kwargs)
    result = block.cout
    for step in reduce_steps if reduce_steps is not None else _default_steps(block):
        if not isinstance(step, Model):
            raise ArgumentError(f"reduce_steps takes models (Mean(), Sum(), Max(axis=0)...), got {step!r}")
        train |= step(input=result)
        result = step.cout
    return result


def _default_steps(block: Model) -> list[Model]:
    from .primitive_models import Mean  # type: ignore[attr-defined]

    return [] if getattr(block, "reduction", "none") != "none" else [Mean()]


class TrainModel(Model):
    """Wrap ``model`` for training (Mithril's ``TrainModel``). Its input and output keys stay keys here.

    Methods: :meth:`add_loss`, :meth:`add_regularization`, :meth:`add_metric`, :meth:`set_loss_combiner`;
    the output ``final_cost`` is what ``output_gradients=True`` differentiates.
    """

    def __init__(self, model: Model, *, name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(model, Model):
            raise ArgumentError(f"TrainModel wraps a Model, got {model!r}")
        self.__dict__["wrapped"] = model
        self |= model(**{key: key for key in [*model.input_keys, *model.output_keys]})
        self.__dict__.update(_losses=[], _regularizers=[], _combiner="sum", metric_keys=[], _shown={"final_cost"})
        if model._exposed is not None and model.output_keys:
            # a model under Mithril's exposure rule: its exposed keys (not the losses' results) are the outputs here
            self.expose_keys(*model.output_keys)

    @property
    def _hidden(self) -> set[str]:
        """``final_cost`` and the losses, regularisers and metrics named here stay outputs under Mithril's
        exposure rule too (``train.expose_keys(predictions=...)`` before or after ``add_loss``), as in Mithril."""
        return super()._hidden - self.__dict__.get("_shown", set())

    def add_loss(self, loss: Model, reduce_steps: Sequence[Model] | None = None, key_name: str | None = None, coef: float | None = None, **connections: Any) -> None:
        """Add ``coef * reduce(loss(**connections))`` to the cost. ``reduce_steps`` defaults to ``[Mean()]``;
        our loss blocks' own reduction is used when none is given. ``key_name`` exposes the loss."""
        result = _reduced(self, loss, reduce_steps, connections)
        if key_name is not None:
            self.expose(result, key_name, canonical=False)
            self._shown.add(key_name)
        self._losses.append((result, coef))
        self._update_cost()

    def add_regularization(self, model: Model, coef: float, reduce_steps: Sequence[Model] | None = None, key_name: str | None = None, *, input: str | re.Pattern[str] | Connection) -> None:  # noqa: A002 - Mithril's name
        """Add ``coef * model(input)`` for ``input`` a key, a connection, or a pattern matched (``re.search``)
        against every trainable parameter's key and path (``linear_0.weight``); one copy of ``model`` each."""
        targets = self._regularized(input)
        for i, (key, target) in enumerate(targets):
            block = model if i == 0 else type(model)()
            if key != "input" and "input" in block._keys and key not in block._keys:
                # the block's input takes the parameter's own key, so it keeps the name it has without
                # regularisation when the compiled model names its inputs
                block._keys = {(key if k == "input" else k): v for k, v in block._keys.items()}
            result = _reduced(self, block, reduce_steps or [], {key if key in block._keys else "input": target})
            self._regularizers.append((result, coef))
        if key_name is not None and len(targets) == 1:
            self.expose(self._regularizers[-1][0], key_name, canonical=False)
            self._shown.add(key_name)
        self._update_cost()

    def add_metric(self, model: Model, reduce_steps: Sequence[Model] | None = None, key_name: str | None = None, **connections: Any) -> None:
        """An extra output ``key_name`` (default ``metric_<n>``) computed by ``model``, never differentiated
        into the cost."""
        result = _reduced(self, model, reduce_steps or [], connections)
        count = sum(1 for k in self._keys if k.startswith("metric_"))
        key = key_name or f"metric_{count}"
        self.expose(result, key, canonical=False)
        self._shown.add(key)
        self.metric_keys.append(key)

    def set_loss_combiner(self, combiner: Model | str) -> None:
        """How losses combine into ``final_cost``: ``Sum()`` (default) or ``Mean()`` (or ``"sum"``/``"mean"``)."""
        name = combiner if isinstance(combiner, str) else getattr(combiner, "primitive_name", type(combiner).__name__).lower()
        if name not in ("sum", "mean"):
            raise ArgumentError(f"set_loss_combiner takes Sum() or Mean(), got {combiner!r}")
        self.__dict__["_combiner"] = name
        self._update_cost()

    def _regularized(self, target: Any) -> list[tuple[str, Any]]:
        """``(key, value)`` of each parameter ``target`` names."""
        if isinstance(target, Connection):
            return [(target.key, target)]
        params: dict[str, Any] = {}
        for key, value in self._interface().items():
            if value.find().producer is None:
                params.setdefault(key, value)
        queue = [(name, child) for name, child in self._children]
        while queue:
            path, child = queue.pop(0)
            for key, value in child._interface().items():
                root = value.find()
                if root.producer is None and root.differentiable:
                    params.setdefault(f"{path}.{key}", root)
            queue.extend((f"{path}.{name}", grand) for name, grand in child._children)
        if isinstance(target, str):
            found = [(k, v) for k, v in params.items() if k == target or k.rsplit(".", 1)[-1] == target][:1]
        else:
            found = [(k, v) for k, v in params.items() if target.search(k)]
        unique = list({id(v.find()): (k.rsplit(".", 1)[-1], v.find()) for k, v in reversed(found)}.values())[::-1]
        if not unique:
            raise KeyError_(f"add_regularization: no trainable parameter matches {target!r}; candidates: {sorted(params)}")
        return unique

    def _update_cost(self) -> None:
        """Build ``final_cost`` again from the current terms (the previous chain becomes dead code)."""
        if not self._losses and not self._regularizers:
            return
        with self._transaction():
            terms = [loss * coef if coef is not None else loss for loss, coef in self._losses]
            total: Any = None
            for term in terms:
                total = term if total is None else total + term
            if total is not None and self._combiner == "mean" and len(terms) > 1:
                total = total / float(len(terms))
            for reg, coef in self._regularizers:
                total = reg * coef if total is None else total + reg * coef
            self._keys["final_cost"] = total.value
