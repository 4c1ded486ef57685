"""Reading and writing parameter files without pickle: the ``.safetensors`` format (:mod:`.safetensors`), and
the one safe way every writer replaces a file (:mod:`.files`).

Example:
    >>> from mithril.serialization import SafetensorsFile, save_safetensors
"""

from .files import check_output_directory, write_file_atomically
from .safetensors import DTYPES, SafetensorsFile, read_safetensors_index, save_safetensors

__all__ = [
    "DTYPES",
    "SafetensorsFile",
    "check_output_directory",
    "read_safetensors_index",
    "save_safetensors",
    "write_file_atomically",
]
