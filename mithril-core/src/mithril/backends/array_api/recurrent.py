"""The LSTM time loop (``lstm_recurrence``) and its backpropagation through time
(``lstm_recurrence_grad``, the helper manual-gradient backends run) written once against ``xp``.

The forward is one step function run by the binding's ``scan`` (``jax.lax.scan``'s contract): a Python
loop by default, ``jax.lax.scan`` on JAX (one traced step however long the sequence; its vjp is a reverse
scan). :func:`forward` with ``keep=True`` also returns every step's activations, from which PyTorch's
backward runs :func:`backprop` directly. The helper recomputes every step's gates in one product from
the forward ``output``, then :func:`backprop` loops backwards over the steps with one product each.

Example:
    >>> import numpy as np
    >>> from mithril.backends.array_api import op_table
    >>> lstm = op_table(np)["lstm_recurrence"]
    >>> output, hidden, cell = lstm(np.zeros((2, 3, 8)), np.zeros((8, 2)), np.zeros((2, 2)), np.zeros((2, 2)))
    >>> output.shape, float(hidden[0, 0])
    ((2, 3, 2), 0.0)
"""

from __future__ import annotations

from typing import Any

from ._binding import Binding, Impl

__all__ = ["backprop", "build", "forward"]


def backprop(b: Binding) -> Impl:
    """Backpropagation through time from every step's activations, bound to ``b.xp``:
    ``backprop(output_grad, hidden_grad, cell_grad, weight_hh, initial_hidden, initial_cell, output,
    activated, g, cell)`` with ``activated`` the sigmoid of every step's gates ``[B, T, 4H]`` (its i, f and
    o quarters are read), ``g`` the tanh of the cell quarter and ``cell`` every cell state ``[B, T, H]``;
    returns the gradients of the gates ``[B, T, 4H]``, ``weight_hh``, ``initial_hidden`` and
    ``initial_cell``. A backend whose forward keeps the activations (PyTorch) calls it directly."""
    xp = b.xp
    matmul, swapaxes, stack, concatenate, tanh = (
        xp.matmul,
        xp.swapaxes,
        xp.stack,
        xp.concatenate,
        b.pick("tanh", xp.tanh),
    )

    def lstm_backprop(
        output_grad: Any, hidden_grad: Any, cell_grad: Any, weight_hh: Any, initial_hidden: Any, initial_cell: Any,
        output: Any, activated: Any, g: Any, cell: Any,
    ) -> tuple[Any, Any, Any, Any]:  # fmt: skip
        n, steps = output.shape[-1], output.shape[1]
        i, f, o = activated[..., :n], activated[..., n : 2 * n], activated[..., 3 * n :]
        cell_tanh = tanh(cell)
        through = o * (1 - cell_tanh * cell_tanh)  # d cell / d hidden of each step
        # d gates = [dc, dc, dc, dh] * local: everything but the carried dc and dh, for all steps at once
        c_prev = concatenate([initial_cell[:, None], cell[:, :-1]], axis=1)
        local = concatenate([g * i * (1 - i), c_prev * f * (1 - f), i * (1 - g * g), cell_tanh * o * (1 - o)], axis=-1)
        dh, dc = hidden_grad, cell_grad
        d_gates = []
        for t in reversed(range(steps)):
            dh = dh + output_grad[:, t]
            dc = dc + dh * through[:, t]
            step = concatenate([dc, dc, dc, dh], axis=-1) * local[:, t]
            d_gates.append(step)
            dc = dc * f[:, t]
            dh = matmul(step, weight_hh)
        d_input = stack(d_gates[::-1], axis=1)
        previous = concatenate([initial_hidden[:, None], output[:, :-1]], axis=1)  # h_{t-1}, [B, T, H]
        d_weight = matmul(swapaxes(d_input.reshape(-1, 4 * n), 0, 1), previous.reshape(-1, n))
        return d_input, d_weight, dh, dc

    return lstm_backprop


def forward(b: Binding) -> Impl:
    """The LSTM time loop bound to ``b.xp`` and ``b.scan``: ``forward(input, weight_hh, initial_hidden,
    initial_cell, keep=False)`` -> every hidden state ``[B, T, H]`` and the final hidden and cell, plus with
    ``keep`` the activations :func:`backprop` reads: the sigmoid of every step's gates ``[B, T, 4H]``, the
    tanh of the cell gate and every cell state ``[B, T, H]``."""
    xp, scan = b.xp, b.scan
    matmul, swapaxes = xp.matmul, xp.swapaxes
    sigmoid, tanh = b.pick("sigmoid", None), b.pick("tanh", xp.tanh)
    addmm = b.pick("addmm", lambda bias, left, right: bias + matmul(left, right))  # torch fuses the two

    def lstm_forward(input: Any, weight_hh: Any, initial_hidden: Any, initial_cell: Any, keep: bool = False) -> Any:
        n = initial_hidden.shape[-1]
        recurrent = swapaxes(weight_hh, -1, -2)

        def step(state: tuple[Any, Any], gates_in: Any) -> tuple[tuple[Any, Any], Any]:
            h, c = state
            gates = addmm(gates_in, h, recurrent)
            if keep:  # one sigmoid call over all four gates, kept whole (the g quarter is unused)
                activated = sigmoid(gates)
                i, f, o = activated[:, :n], activated[:, n : 2 * n], activated[:, 3 * n :]
            else:  # no wasted quarter (a jitted backward pays for it too)
                input_forget, o = sigmoid(gates[:, : 2 * n]), sigmoid(gates[:, 3 * n :])
                i, f = input_forget[:, :n], input_forget[:, n:]
            g = tanh(gates[:, 2 * n : 3 * n])
            c = f * c + i * g
            h = o * tanh(c)
            return (h, c), ((h, activated, g, c) if keep else h)

        (hidden, cell), steps = scan(step, (initial_hidden, initial_cell), swapaxes(input, 0, 1))
        if not keep:
            return swapaxes(steps, 0, 1), hidden, cell
        output, activated, g, cells = (swapaxes(y, 0, 1) for y in steps)
        return output, hidden, cell, (activated, g, cells)

    return lstm_forward


def build(b: Binding) -> dict[str, Impl]:
    """``lstm_recurrence`` and ``lstm_recurrence_grad`` bound to ``b.xp`` (``sigmoid``/``tanh`` are the
    backend's own primitives, so the numbers match the unrolled cells)."""
    xp = b.xp
    matmul, swapaxes, stack, concatenate = xp.matmul, xp.swapaxes, xp.stack, xp.concatenate
    sigmoid, tanh = b.pick("sigmoid", None), b.pick("tanh", xp.tanh)
    lstm_forward, lstm_backprop = forward(b), backprop(b)

    def lstm_recurrence(input: Any, weight_hh: Any, initial_hidden: Any, initial_cell: Any) -> tuple[Any, Any, Any]:
        """Every step's hidden state ``[B, T, H]`` and the final hidden and cell ``[B, H]`` of an LSTM
        whose projected gates (i, f, g, o) are ``input`` ``[B, T, 4H]``."""
        result: tuple[Any, Any, Any] = lstm_forward(input, weight_hh, initial_hidden, initial_cell)
        return result

    def lstm_recurrence_grad(
        output_grad: Any, hidden_grad: Any, cell_grad: Any, input: Any, weight_hh: Any, initial_hidden: Any,
        initial_cell: Any, output: Any,
    ) -> tuple[Any, Any, Any, Any]:  # fmt: skip
        """Gradients of ``input``, ``weight_hh``, ``initial_hidden`` and ``initial_cell`` for the cotangents
        of ``output`` ``[B, T, H]``, ``hidden`` and ``cell`` ``[B, H]``: every step's gates recomputed in
        one product from the hidden states ``output``, then :func:`backprop`."""
        n, steps = output.shape[-1], output.shape[1]
        previous = concatenate([initial_hidden[:, None], output[:, :-1]], axis=1)  # h_{t-1}, [B, T, H]
        gates = input + matmul(previous, swapaxes(weight_hh, -1, -2))
        activated = sigmoid(gates)  # i, f, o (one contiguous call; the g quarter is unused)
        g = tanh(gates[..., 2 * n : 3 * n])
        written, c, cells = activated[..., :n] * g, initial_cell, []
        for t in range(steps):
            c = activated[:, t, n : 2 * n] * c + written[:, t]
            cells.append(c)
        cell = stack(cells, axis=1)
        grads: tuple[Any, Any, Any, Any] = lstm_backprop(
            output_grad, hidden_grad, cell_grad, weight_hh, initial_hidden, initial_cell, output, activated, g, cell
        )
        return grads

    return {"lstm_recurrence": lstm_recurrence, "lstm_recurrence_grad": lstm_recurrence_grad}
