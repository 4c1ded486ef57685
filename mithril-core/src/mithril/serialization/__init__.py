"""Reading and writing parameter files without pickle: the ``.safetensors`` format (:mod:`.safetensors`).

Example:
    >>> from mithril.serialization import SafetensorsFile, save_safetensors
"""

from .safetensors import DTYPES, SafetensorsFile, save_safetensors

__all__ = ["DTYPES", "SafetensorsFile", "save_safetensors"]
