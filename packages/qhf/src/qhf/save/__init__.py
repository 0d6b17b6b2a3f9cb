"""Writing quantized checkpoint directories (shards, index, configs, tokenizer, report)."""

from .checkpoint import config_dict, packed_tensors, save_checkpoint
from .tensor_stream import TensorEntry, numpy_stream

__all__ = ["TensorEntry", "config_dict", "numpy_stream", "packed_tensors", "save_checkpoint"]
