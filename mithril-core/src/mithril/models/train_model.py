"""``TrainModel``: a model plus its losses, regularisation and metrics, as Mithril's published API builds
training graphs. The compiled model has the wrapped model's outputs, each named loss/metric, and
``final_cost``: the loss combiner (sum by default) over ``coef * loss`` terms plus ``coef * regulariser``
terms. ``pm.evaluate(params, data, output_gradients=True)`` differentiates ``final_cost``.

As in Mithril, each regularisation term is divided by the number of elements the losses that depend on its
parameter average over (their ``Mean``/``Min``/``Max`` reduce steps; the geometric mean of those counts when
several losses depend on it), so ``coef`` does not depend on the batch size.

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

from ..compiler.graph import Value
from ..deprecation import warn_deprecated
from ..errors import ArgumentError, ModelKeyError
from ..framework.arithmetic import build
from ..framework.keys import Connection, IOKey
from ..framework.model import Model
from .blocks._util import op
from .primitive_models import Mean  # type: ignore[attr-defined]

__all__ = ["L1", "L2", "TrainModel"]


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


_COUNTED = ("mean", "min", "max")
"""Reduce steps whose element count divides the regularisation terms (Mithril counts ``Mean``/``Min``/``Max``)."""


def _reduced(
    train: TrainModel, block: Model, reduce_steps: Sequence[Model] | None, kwargs: dict[str, Any], where: str
) -> tuple[Connection, list[tuple[Connection, Connection]]]:
    """Add ``block`` (elementwise) connected by ``kwargs``, then each reduction of ``reduce_steps`` in turn.

    Returns the result and the ``(input, output)`` of each counted reduction (``Mean``/``Min``/``Max``)."""
    elementwise = getattr(block, "elementwise", None)
    if reduce_steps is None and callable(elementwise) and getattr(block, "reduction", "none") == "mean":
        block, reduce_steps = elementwise(), None  # our block's own mean is Mithril's default Mean() step
    elif reduce_steps is not None and callable(elementwise) and getattr(block, "reduction", "none") != "none":
        block = elementwise()  # our loss blocks reduce by themselves; Mithril's are elementwise
    train |= block(**kwargs)
    result = block.cout
    counted: list[tuple[Connection, Connection]] = []
    for step in reduce_steps if reduce_steps is not None else _default_steps(block):
        if not isinstance(step, Model):
            raise ArgumentError(f"{where}: reduce_steps takes models (Mean(), Sum(), Max(axis=0)...), got {step!r}")
        train |= step(input=result)
        if getattr(step, "primitive_name", None) in _COUNTED:
            counted.append((result, step.cout))
        result = step.cout
    return result, counted


def _default_steps(block: Model) -> list[Model]:
    return [] if getattr(block, "reduction", "none") != "none" else [Mean()]


def _depends(value: Value, target: Value) -> bool:
    """Whether ``value`` is computed from ``target`` (both graph values; merges followed)."""
    goal = target.find()
    seen: set[int] = set()
    stack = [value.find()]
    while stack:
        current = stack.pop()
        if current is goal:
            return True
        if id(current) in seen or current.producer is None:
            continue
        seen.add(id(current))
        stack.extend(v.find() for v in current.producer.inputs.values() if v is not None)
    return False


class TrainModel(Model):
    """Wrap ``model`` for training (Mithril's ``TrainModel``). Its input and output keys stay keys here.

    Methods: :meth:`add_loss`, :meth:`add_regularization`, :meth:`add_metric`, :meth:`set_loss_combiner`,
    :meth:`finalize`; the output ``final_cost`` is what ``output_gradients=True`` differentiates.

    Example (a regularisation term is divided by the number of elements its loss averages, as in Mithril):
        >>> import mithril as ml
        >>> from mithril.models import L2, Linear, Mean, SquaredError
        >>> train = TrainModel(Linear(1))
        >>> train.add_loss(SquaredError(), [Mean()], input="output", target="target")
        >>> train.add_regularization(L2(), 0.1, input="weight")
        >>> train.finalize()
        >>> backend = ml.NumpyBackend(dtype=ml.float64)
        >>> pm = ml.compile(train, backend, shapes={"input": [4, 1]}, jit=False)
        >>> params = {"weight": backend.array([[2.0]]), "bias": backend.array([0.0])}
        >>> out = pm.evaluate(params, {"input": [[1.0]] * 4, "target": [[2.0]] * 4})
        >>> round(float(out["final_cost"]), 6)  # 0 + 0.1 * (0.5 * 2**2) / 4
        0.05
    """

    # set in ``__init__`` through ``__dict__`` (a Model's attributes are otherwise its connections)
    wrapped: Model
    metric_keys: list[str]
    _losses: list[tuple[Connection, Any, list[tuple[Connection, Connection]]]]  # (loss, coef, counted reductions)
    _regularizers: list[tuple[Connection, Any, Value]]  # (term, coef, the parameter it regularises)
    _combiner: str
    _shown: set[str]
    _finalized: bool

    def __init__(self, model: Model, *, name: str | None = None) -> None:
        super().__init__(name=name)
        if not isinstance(model, Model):
            raise ArgumentError(f"TrainModel wraps a Model, got {model!r}")
        self.__dict__["wrapped"] = model
        self |= model(**{key: key for key in [*model.input_keys, *model.output_keys]})
        self.__dict__.update(
            _losses=[], _regularizers=[], _combiner="sum", metric_keys=[], _shown={"final_cost"}, _finalized=False
        )
        if model._exposed is not None and model.output_keys:
            # a model under Mithril's exposure rule: its exposed keys (not the losses' results) are the outputs here
            self.expose_keys(*model.output_keys)

    @property
    def _hidden(self) -> set[str]:
        """``final_cost`` and the losses, regularisers and metrics named here stay outputs under Mithril's
        exposure rule too (``train.expose_keys(predictions=...)`` before or after ``add_loss``), as in Mithril."""
        shown: set[str] = self.__dict__.get("_shown", set())
        return super()._hidden - shown

    def _check_open(self, where: str) -> None:
        if self._finalized:
            raise ArgumentError(f"TrainModel.{where}: the model is finalized (finalize() was called); add terms before")

    def add_loss(
        self,
        loss_model: Model | None = None,
        reduce_steps: Sequence[Model] | None = None,
        key_name: str | None = None,
        coef: float | Any | None = None,
        **connections: Any,
    ) -> None:
        """Add ``coef * reduce(loss_model(**connections))`` to the cost.

        ``reduce_steps`` (models applied in turn) defaults to ``[Mean()]``, an empty list included, as in Mithril;
        ``key_name`` exposes the loss. ``loss=`` is the deprecated name of ``loss_model``.

        >>> from mithril.models import Linear, Mean, SquaredError
        >>> train = TrainModel(Linear(1))
        >>> train.add_loss(SquaredError(), [Mean()], key_name="mse", input="output", target="target")
        >>> "mse" in train.output_keys
        True
        """
        if loss_model is None and isinstance(connections.get("loss"), Model):
            warn_deprecated("TrainModel.add_loss(loss=...)", "TrainModel.add_loss(loss_model=...)")
            loss_model = connections.pop("loss")
        if not isinstance(loss_model, Model):
            raise ArgumentError(
                f"TrainModel.add_loss: loss_model must be a Model (SquaredError()...), got {loss_model!r}"
            )
        self._check_open("add_loss")
        result, counted = _reduced(
            self, loss_model, list(reduce_steps) if reduce_steps else None, connections, "TrainModel.add_loss"
        )
        if key_name is not None:
            self.expose(result, key_name, canonical=False)
            self._shown.add(key_name)
        self._losses.append((result, coef, counted))
        self._update_cost()

    def add_regularization(
        self,
        model: Model,
        coef: float | Any,
        reg_key: str | Connection | None = None,
        key_name: str | None = None,
        *,
        reduce_steps: Sequence[Model] | None = None,
        **connections: Any,
    ) -> None:
        """Add ``coef * model(**connections) / n`` to the cost, ``n`` being the number of elements the losses
        depending on the regularised parameter average over (Mithril's scaling; ``n = 1`` without such a loss).

        ``connections`` fill the regulariser's keys (``input=`` for ``L1``/``L2``; ``input=`` and ``kernel=`` for
        ``QuadraticFormRegularizer``); each is a key, a connection, or, for a regulariser with one key, a pattern
        matched (``re.search``) against every trainable parameter's key and path (``linear_0.weight``): one copy
        of ``model`` per match. ``reg_key`` names the regulariser's key that takes the parameter (its canonical
        input by default). ``reduce_steps`` (this project's extension) reduces the regulariser's output.

        >>> import re
        >>> from mithril.models import L1, L2, Linear, SquaredError
        >>> train = TrainModel(Linear(2))
        >>> train.add_loss(SquaredError(), input="output", target="target")
        >>> train.add_regularization(L2(), 1e-2, input=re.compile("weight|bias"))
        >>> train.add_regularization(L1(), 1e-3, key_name="l1_w", input="weight")
        """
        where = "TrainModel.add_regularization"
        if isinstance(reg_key, (list, tuple)):  # this project's former third parameter
            warn_deprecated(f"{where}(model, coef, reduce_steps)", f"{where}(model, coef, reduce_steps=...)")
            reduce_steps, reg_key = reg_key, None
        if not isinstance(model, Model):
            raise ArgumentError(f"{where}: model must be a Model (L1(), L2()...), got {model!r}")
        self._check_open("add_regularization")
        if not connections:
            raise ArgumentError(f"{where}: give the regulariser's keys (input=...); its keys are {model.input_keys}")
        unknown = sorted(set(connections) - set(model.input_keys) - set(model._keys))
        if unknown:
            raise ModelKeyError(
                f"{where}: {type(model).__name__} has no key(s) {unknown}; its input keys are {model.input_keys}"
            )
        reg_name = reg_key.key if isinstance(reg_key, Connection) else reg_key
        if reg_name is None:
            reg_name = "input" if "input" in connections or len(connections) != 1 else next(iter(connections))
        if reg_name not in connections:
            raise ModelKeyError(f"{where}: reg_key {reg_name!r} is not among the given keys {sorted(connections)}")
        patterns = [k for k, v in connections.items() if isinstance(v, re.Pattern)]
        if patterns and len(connections) > 1:
            raise ArgumentError(
                f"{where}: a pattern ({patterns[0]}=re.compile(...)) is only for a regulariser given one key, got "
                f"{sorted(connections)}"
            )
        targets = self._regularized(connections[reg_name])
        steps = list(reduce_steps) if reduce_steps else []
        added = []
        for i, (key, target) in enumerate(targets):
            block = model if i == 0 else type(model)()
            kwargs = {k: self._reg_target(v) for k, v in connections.items() if k != reg_name}
            if reg_name == "input" and key != "input" and "input" in block._keys and key not in block._keys:
                # the block's input takes the parameter's own key, so it keeps the name it has without
                # regularisation when the compiled model names its inputs
                block._keys = {(key if k == "input" else k): v for k, v in block._keys.items()}
                kwargs[key] = target
            else:
                kwargs[reg_name] = target
            result, _ = _reduced(self, block, steps, kwargs, where)
            self._regularizers.append(
                (result, coef, target.find() if isinstance(target, Value) else target.value.find())
            )
            added.append(result)
        if key_name is not None and len(added) == 1:
            self.expose(added[0], key_name, canonical=False)
            self._shown.add(key_name)
        self._update_cost()

    def _reg_target(self, value: Any) -> Any:
        """A regulariser's other key (``kernel=``): a trainable parameter found by name, else as given."""
        if isinstance(value, str):
            try:
                return self._regularized(value)[0][1]
            except ModelKeyError:
                return value
        return value

    def add_metric(
        self, model: Model, reduce_steps: Sequence[Model] | None = None, key_name: str | None = None, **connections: Any
    ) -> None:
        """An extra output ``key_name`` (default ``metric_<n>``) computed by ``model``, never differentiated
        into the cost."""
        self._check_open("add_metric")
        result, _ = _reduced(self, model, reduce_steps or [], connections, "TrainModel.add_metric")
        count = sum(1 for k in self._keys if k.startswith("metric_"))
        key = key_name or f"metric_{count}"
        self.expose(result, key, canonical=False)
        self._shown.add(key)
        self.metric_keys.append(key)

    def set_loss_combiner(self, combiner: Model | str) -> None:
        """How losses combine into ``final_cost``: ``Sum()`` (default) or ``Mean()`` (or ``"sum"``/``"mean"``)."""
        self._check_open("set_loss_combiner")
        name = (
            combiner
            if isinstance(combiner, str)
            else getattr(combiner, "primitive_name", type(combiner).__name__).lower()
        )
        if name not in ("sum", "mean"):
            raise ArgumentError(f"set_loss_combiner takes Sum() or Mean(), got {combiner!r}")
        self.__dict__["_combiner"] = name
        self._update_cost()

    def finalize(self) -> None:
        """Build ``final_cost`` for good (Mithril's ``TrainModel.finalize``); terms cannot be added afterwards.
        ``ml.compile`` works without it (the cost is kept up to date as terms are added). Calling it twice is
        harmless.

        >>> from mithril.models import Linear, SquaredError
        >>> train = TrainModel(Linear(1))
        >>> train.add_loss(SquaredError(), input="output", target="target")
        >>> train.finalize(); train.finalize()
        >>> "final_cost" in train.output_keys
        True
        """
        if self._finalized:
            return
        if not self._losses:
            raise ModelKeyError("TrainModel.finalize: requires at least one loss (add_loss); none was added")
        self._update_cost()
        self.__dict__["_finalized"] = True

    def _regularized(self, target: Any) -> list[tuple[str, Any]]:
        """``(key, value)`` of each parameter ``target`` names."""
        if isinstance(target, Connection):
            return [(target.key, target)]
        if not isinstance(target, (str, re.Pattern)):
            raise ArgumentError(
                f"TrainModel.add_regularization: the regularised key takes a key name, a connection or "
                f"re.compile(...), got {target!r}"
            )
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
            raise ModelKeyError(
                f"add_regularization: no trainable parameter matches {target!r}; candidates: {sorted(params)}"
            )
        return unique

    def _count(self, counted: list[tuple[Connection, Connection]]) -> Any:
        """The number of elements a loss's counted reductions average over (``size(in) / size(out)`` each)."""
        total: Any = None
        for source, result in counted:
            n = build(self, "size", [source], {}) / build(self, "size", [result], {})
            total = n if total is None else total * n
        return total

    def _update_cost(self) -> None:
        """Build ``final_cost`` again from the current terms (the previous chain becomes dead code)."""
        if not self._losses and not self._regularizers:
            return
        with self._transaction():
            terms = [loss * coef if coef is not None else loss for loss, coef, _ in self._losses]
            total: Any = None
            for term in terms:
                total = term if total is None else total + term
            if total is not None and self._combiner == "mean" and len(terms) > 1:
                total = total / float(len(terms))
            for reg, coef, param in self._regularizers:
                if reg.value.find().shape.static() != ():  # QuadraticFormRegularizer's [1, 1]: summed, as Mithril does
                    reg = build(self, "sum", [reg], {})
                counts = [self._count(counted) for loss, _, counted in self._losses if _depends(loss.value, param)]
                counts = [c for c in counts if c is not None] + [1.0] * sum(1 for c in counts if c is None)
                if any(not isinstance(c, float) for c in counts):
                    divisor: Any = None
                    for c in counts:
                        divisor = c if divisor is None else divisor * c
                    if len(counts) > 1:
                        divisor = divisor ** (1.0 / len(counts))
                    reg = reg / divisor
                total = reg * coef if total is None else total + reg * coef
            self._keys["final_cost"] = total.value
