"""Native .gguf container: reader, writer, and llama-to-Hugging-Face mapping (numpy only)."""

from .dense import DenseGGUF, read_llama_gguf
from .errors import GGUFFileError
from .reader import GGUFReader, TensorInfo
from .values import GGUFValue, ValueType
from .writer import write_gguf

__all__ = [
    "DenseGGUF",
    "GGUFFileError",
    "GGUFReader",
    "GGUFValue",
    "TensorInfo",
    "ValueType",
    "read_llama_gguf",
    "write_gguf",
]
