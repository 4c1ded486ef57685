"""Upstream Mithril's backend module paths (``mithril.backends.with_manualgrad.<name>_backend``), kept as aliases."""
