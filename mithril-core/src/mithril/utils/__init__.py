"""Helpers of Mithril's published API that are not models: packing variable-length sequences into the time
slots of the recurrent models (``ManyToOne``, ``EncoderDecoder``) and back.

Example:
    >>> import mithril as ml
    >>> from mithril.utils.utils import pack_data_into_time_slots
    >>> backend = ml.NumpyBackend()
    >>> data = [(backend.ones(2, 1),), (backend.zeros(3, 1),)]
    >>> slots, data_sorted = pack_data_into_time_slots(data, backend, key=("input",))
    >>> {k: v.shape for k, v in slots.items()}
    {'input0': (2, 1, 1), 'input1': (2, 1, 1), 'input2': (1, 1, 1)}
"""

from __future__ import annotations

from .utils import pack_data_into_time_slots, unpack_time_slot_data

__all__ = ["pack_data_into_time_slots", "unpack_time_slot_data"]
