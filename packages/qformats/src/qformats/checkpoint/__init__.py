"""Checkpoint directories: safetensors reading/writing, shards and index, configs, modules, dense export."""

from .config_files import CONFIG_PRIORITY, QuantFields, find_quant_config, read_quant_fields
from .dequantize import dequantize_checkpoint, iter_dense_tensors
from .modules import ModuleEntry
from .reader import Checkpoint, open_checkpoint
from .safetensors_io import SafetensorsFile, write_safetensors
from .shard_size import parse_shard_size
from .transcode_dir import transcode_checkpoint
from .writer import WriteReport, write_checkpoint

__all__ = [
    "CONFIG_PRIORITY",
    "Checkpoint",
    "ModuleEntry",
    "QuantFields",
    "SafetensorsFile",
    "WriteReport",
    "dequantize_checkpoint",
    "find_quant_config",
    "iter_dense_tensors",
    "open_checkpoint",
    "parse_shard_size",
    "read_quant_fields",
    "transcode_checkpoint",
    "write_checkpoint",
    "write_safetensors",
]
