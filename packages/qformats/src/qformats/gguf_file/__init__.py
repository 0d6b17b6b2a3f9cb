"""Native .gguf container: reader, writer, and the architecture table mapping files onto Hugging Face models
(numpy only)."""

from .architecture_table import KNOWN_ARCHITECTURES
from .dense import DenseGGUF, read_gguf, read_llama_gguf
from .errors import GGUFFileError
from .reader import GGUFReader, TensorInfo
from .values import GGUFValue, ValueType
from .writer import write_gguf

__all__ = [
    "KNOWN_ARCHITECTURES",
    "DenseGGUF",
    "GGUFFileError",
    "GGUFReader",
    "GGUFValue",
    "TensorInfo",
    "ValueType",
    "read_gguf",
    "read_llama_gguf",
    "write_gguf",
]
