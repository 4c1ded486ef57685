"""Upstream Mithril's backend module paths (``mithril.backends.with_autograd.<name>_backend``), kept as aliases."""
