"""A Hugging Face style config dict from a .gguf file's metadata, through its architecture record.

The dict holds the keys of the transformers config class of the record's ``model_type`` (no transformers
import): ``model_type``, ``architectures``, the record's defaults, every metadata key the record maps (under
``<architecture>.``), the token ids (``tokenizer.ggml.{bos,eos,unknown,padding}_token_id``),
``vocab_size`` (from the token list when the file has no ``<architecture>.vocab_size``),
``tie_word_embeddings`` (no ``output.weight`` tensor) and the record's tensor flags.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from .architecture import GGUFArchitecture
from .errors import GGUFFileError

TOKEN_KEYS = (
    ("tokenizer.ggml.bos_token_id", "bos_token_id"),
    ("tokenizer.ggml.eos_token_id", "eos_token_id"),
    ("tokenizer.ggml.unknown_token_id", "unk_token_id"),
    ("tokenizer.ggml.padding_token_id", "pad_token_id"),
)
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads")


def _scalar(value: Any, key: str, source: str) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    raise GGUFFileError(f"{source}: metadata {key!r}: expected a single number or string, found {type(value).__name__}")


def hf_config(
    arch: GGUFArchitecture, metadata: Mapping[str, Any], tensor_names: Collection[str], source: str
) -> dict[str, Any]:
    """The config dict for plain metadata values (``GGUFReader.value``) and the file's tensor names."""
    config: dict[str, Any] = {"model_type": arch.model_type, "architectures": [arch.hf_class], **dict(arch.defaults)}
    for key, field in arch.config_keys:
        full = f"{arch.gguf}.{key}"
        if full in metadata:
            config[field] = _scalar(metadata[full], full, source)
    for key, field in TOKEN_KEYS:
        if key in metadata:
            config[field] = _scalar(metadata[key], key, source)
    if "vocab_size" not in config and isinstance(metadata.get("tokenizer.ggml.tokens"), list):
        config["vocab_size"] = len(metadata["tokenizer.ggml.tokens"])
    config["tie_word_embeddings"] = arch.always_tied or "output.weight" not in tensor_names
    for flag in arch.flags:
        present = any(name.startswith("blk.") and name.endswith("." + flag.tensor) for name in tensor_names)
        config[flag.field] = flag.when_present if present else not flag.when_present
    missing = [field for field in REQUIRED if not isinstance(config.get(field), int)]
    if missing:
        keys = {field: f"{arch.gguf}.{key}" for key, field in arch.config_keys}
        raise GGUFFileError(
            f"{source}: {arch.gguf} metadata lacks an integer for "
            + ", ".join(f"{keys.get(f, f)} ({f})" for f in missing)
        )
    config.setdefault("num_key_value_heads", config["num_attention_heads"])  # llama.cpp's default
    for field, only, why in arch.limits:
        if config.get(field) != only:
            found = config.get(field)
            raise GGUFFileError(f"{source}: {arch.gguf} with {field} {found!r} is not read: only {only!r} ({why})")
    return config
