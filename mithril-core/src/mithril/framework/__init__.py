"""The logical layer: :class:`~mithril.framework.model.Model` (composition, naming, connect-time shape
inference) and :class:`~mithril.framework.keys.IOKey` / ``Connection`` (what keys are connected to)."""
