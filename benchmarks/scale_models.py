"""Random-weight models of the sizes people quantize, written to disk from config shapes.

Two shapes (:data:`SHAPES`): ``llama3-8b`` (Llama-3-8B: 32 layers, hidden 4096, MLP 14336, 32 heads / 8 KV
heads, vocab 128256) and ``qwen3-30b-a3b`` (a Qwen3-30B-A3B-like MoE: 48 layers, hidden 2048, 128 experts of
768, top 8, 32 heads / 4 KV heads of 128, vocab 151936). :func:`write_model` writes the embeddings, head, final
norm and the first ``layers`` decoder layers of a shape as float16 safetensors shards (transformers'
``save_pretrained``, so the tensor names are the ones transformers and every quantizer read), with a word-level
tokenizer covering the vocabulary. The quantized part of a model is its decoder layers, all alike, so the first
``layers`` of them measure a per-layer cost that :func:`projected_seconds` extends to the whole depth.

Weights are seeded normal values (std 0.02, norms 1): the numbers are meaningless, the shapes and bytes real.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ScaleShape:
    """A model shape: ``model_type``, transformers config fields, and its full ``depth`` (decoder layers)."""

    name: str
    model_type: str
    depth: int
    fields: dict[str, Any]


SHAPES: dict[str, ScaleShape] = {
    "llama3-8b": ScaleShape(
        "llama3-8b",
        "llama",
        32,
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
    ),
    "qwen3-30b-a3b": ScaleShape(
        "qwen3-30b-a3b",
        "qwen3_moe",
        48,
        {
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_experts": 128,
            "num_experts_per_tok": 8,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
            "num_attention_heads": 32,
            "num_key_value_heads": 4,
            "head_dim": 128,
            "vocab_size": 151936,
            "max_position_embeddings": 4096,
            "rope_theta": 1000000.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "bos_token_id": 0,
            "eos_token_id": 1,
        },
    ),
}


def shape(name: str) -> ScaleShape:
    """The shape called ``name``; a name not in :data:`SHAPES` is refused with the known names."""
    if name not in SHAPES:
        raise SystemExit(f"--shape {name!r}: expected one of {', '.join(SHAPES)}")
    return SHAPES[name]


def _config(spec: ScaleShape, layers: int) -> Any:
    from transformers import AutoConfig

    return AutoConfig.for_model(spec.model_type, num_hidden_layers=layers, **spec.fields)


def _tokenizer(vocab: int) -> Any:
    """A word-level tokenizer whose ids cover ``vocab`` (token ``i`` is ``t{i}``; 0 BOS, 1 EOS, 2 unknown)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {"<s>": 0, "</s>": 1, "<unk>": 2, **{f"t{i}": i for i in range(3, vocab)}}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def write_model(directory: Path, name: str, layers: int, seed: int = 0) -> dict[str, Any]:
    """Write shape ``name`` cut to its first ``layers`` decoder layers into ``directory`` (float16 shards of at
    most 2 GB, index, config, tokenizer); returns ``{"bytes": on-disk bytes of the shards, "parameters": count}``.

    Streams: the model is built on the meta device (names and shapes only) and each tensor is filled and written
    shard by shard, so a 32-layer 8B shape (16 GB) is written with one shard in memory. The values are what the
    in-memory writer gave (one seeded generator over the parameters in order: norms and vectors 1, matrices
    normal(0, 0.02)). Skipped when ``directory/written.json`` records the same shape, layers and seed."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM

    spec = shape(name)
    marker = directory / "written.json"
    wanted = {"shape": name, "layers": layers, "seed": seed}
    if marker.exists():
        done = json.loads(marker.read_text())
        if {k: done.get(k) for k in wanted} == wanted:
            return done
    config = _config(spec, layers)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    directory.mkdir(parents=True, exist_ok=True)
    generator = torch.Generator().manual_seed(seed)
    shard: dict[str, torch.Tensor] = {}
    shard_bytes = 0
    shards: list[list[str]] = []
    count = 0

    def flush() -> None:
        nonlocal shard, shard_bytes
        if shard:
            shards.append(list(shard))
            save_file(shard, str(directory / f"part-{len(shards):05d}.safetensors"), metadata={"format": "pt"})
        shard, shard_bytes = {}, 0

    for pname, param in model.named_parameters():
        count += param.numel()
        value = torch.empty(param.shape, dtype=torch.float16)
        if pname.endswith("norm.weight") or param.dim() == 1:
            value.fill_(1.0)
        else:
            value.normal_(0.0, 0.02, generator=generator)
        if shard_bytes and shard_bytes + value.nbytes > SHARD_BYTES:
            flush()
        shard[pname] = value
        shard_bytes += value.nbytes
    flush()
    total = len(shards)
    weight_map = {}
    for index, names in enumerate(shards, start=1):
        final = f"model-{index:05d}-of-{total:05d}.safetensors"
        (directory / f"part-{index:05d}.safetensors").rename(directory / final)
        weight_map.update({n: final for n in names})
    written = sum(p.stat().st_size for p in directory.glob("model-*.safetensors"))
    index_file = {"metadata": {"total_size": count * 2}, "weight_map": weight_map}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2))
    config.dtype = torch.float16
    config.architectures = [type(model).__name__]
    config.save_pretrained(directory)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(directory)
    _tokenizer(int(spec.fields["vocab_size"])).save_pretrained(directory)
    result = {**wanted, "bytes": written, "parameters": count}
    marker.write_text(json.dumps(result))
    return result


#: the largest shard :func:`write_model` writes (bytes; transformers' "2GB")
SHARD_BYTES = 2 * 10**9


def full_model_bytes(name: str) -> int:
    """float16 bytes of the whole shape (every layer), from a meta-device model: what the full checkpoint holds."""
    import torch
    from transformers import AutoModelForCausalLM

    spec = shape(name)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(_config(spec, spec.depth), dtype=torch.float16)
    return sum(p.numel() for p in model.parameters()) * 2


def calibration_ids(vocab: int, rows: int, length: int, seed: int = 0) -> list[list[int]]:
    """``rows`` seeded rows of ``length`` token ids in ``[3, vocab)`` (no special tokens)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (rows, length), generator=generator).tolist()


def projected_seconds(per_layer: list[float], setup: float, depth: int) -> float:
    """Whole-model seconds: ``setup`` (everything outside the layer loop) plus ``depth`` times the mean of the
    measured layers after the first (the first carries one-time costs) or the only one measured."""
    steady = per_layer[1:] or per_layer
    return setup + depth * sum(steady) / len(steady)
