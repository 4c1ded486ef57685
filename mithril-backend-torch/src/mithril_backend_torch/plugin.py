"""Entry point of the PyTorch backend (``[project.entry-points.mithril] torch``): the backend class and its
op table as lazy ``"module:attr"`` targets, so loading the plugin imports nothing heavy."""

from mithril.extend import backend_plugin

BACKEND, OPS = "mithril_backend_torch.backend:TorchBackend", "mithril_backend_torch.ops:TABLE"
mithril_register_backends, mithril_register_impls = backend_plugin("torch", BACKEND, OPS, ("TorchBackend",))
