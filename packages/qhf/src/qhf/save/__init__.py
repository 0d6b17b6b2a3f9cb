"""Writing quantized checkpoint directories (shards, index, configs, tokenizer, report)."""

from .checkpoint import config_dict, packed_tensors, save_checkpoint
from .shards import ShardSizeError, parse_size, plan_shards, write_shards

__all__ = [
    "ShardSizeError",
    "config_dict",
    "packed_tensors",
    "parse_size",
    "plan_shards",
    "save_checkpoint",
    "write_shards",
]
