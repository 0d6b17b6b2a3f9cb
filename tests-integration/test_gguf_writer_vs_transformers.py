"""qformats' .gguf writer against the llama.cpp layout and transformers' own GGUF loading, one tiny model per
architecture it writes.

For each, a tiny random transformers model (non-trivial norms and biases) is written twice: by qformats' writer
from its state dict and config (``write_model_gguf``, F32) and the way llama.cpp's converter lays it out
(``test_gguf_architectures_vs_transformers._write``: gguf-py's tensor names, llama.cpp's stored conversions,
the converter's metadata keys), independently of qformats' table. Then:

* the two files hold the same tensors (names, shapes, types, values bit for bit) and every metadata key both
  write has the same value; the keys only one writes are the documented ones (qformats adds ``vocab_size``
  and Gemma 3's ``rope.freq_base_swa``, as llama.cpp's converter does; it leaves out ``key_length`` /
  ``value_length`` where they equal llama.cpp's default, and a sliding window llama.cpp does not apply);
* transformers' ``from_pretrained(..., gguf_file=...)`` of qformats' file gives the source model's logits.
  Through qhf's reading instead (qformats' table) where transformers' loader cannot: llama stored as
  ``mistral`` (its tensor loading asks gguf-py for a ``mistral`` architecture llama.cpp does not have) and the
  MoE models (it leaves ``expert_feed_forward_length`` unread, so any expert size but the class default fails
  to load).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

from qformats.gguf_file import GGUFReader  # noqa: E402
from qformats.gguf_file.architecture_table import ARCHITECTURES  # noqa: E402
from qformats.gguf_file.model_writer import write_model_gguf  # noqa: E402
from qformats.gguf_file.values import GGUFValue, ValueType  # noqa: E402
from test_gguf_architectures_vs_transformers import CASES, _tiny, _write  # noqa: E402

WRITTEN = sorted(record.key for record in ARCHITECTURES if record.write.refused is None)
# Gemma: head_dim 256 so that the class default query_pre_attn_scalar (256, which transformers' GGUF loading
# leaves at its default) is the 1/sqrt(head_dim) scale llama.cpp uses; Qwen3: head_dim 128, the class default
# (transformers' GGUF loading leaves attention.key_length unread)
OVERRIDES = {"gemma2": {"head_dim": 256, "query_pre_attn_scalar": 256},
             "gemma3": {"head_dim": 256, "sliding_window": 64, "query_pre_attn_scalar": 256},
             "qwen3": {"head_dim": 128}}  # fmt: skip
# nemotron: the epsilon also under the rms key, which transformers reads (llama.cpp reads layer_norm_epsilon)
ONLY_OURS = {"vocab_size", "rope.freq_base_swa", "attention.layer_norm_rms_epsilon"}
THROUGH_QHF = {"mistral", "qwen2moe", "qwen3moe"}
ONLY_CONVERTER = {"attention.key_length", "attention.value_length", "attention.sliding_window"}


def _tokenizer(config) -> dict[str, GGUFValue]:
    tokens = [f"t{i}" for i in range(config.vocab_size)]
    return {
        "tokenizer.ggml.model": GGUFValue(ValueType.STRING, "gpt2"),
        "tokenizer.ggml.tokens": GGUFValue(ValueType.ARRAY, tokens, ValueType.STRING),
        "tokenizer.ggml.bos_token_id": GGUFValue(ValueType.UINT32, 2),
        "tokenizer.ggml.eos_token_id": GGUFValue(ValueType.UINT32, 1),
        "tokenizer.ggml.padding_token_id": GGUFValue(ValueType.UINT32, 0),
    }


def _metadata(reader: GGUFReader, arch: str) -> dict:
    return {k[len(arch) + 1 :]: reader.value(k) for k in reader.metadata if k.startswith(f"{arch}.")}


@pytest.mark.parametrize("key", WRITTEN)
def test_writer_matches_the_converter_layout_and_transformers_loads_it(tmp_path, key: str) -> None:
    record, config, model = _tiny(key, OVERRIDES.get(key))
    converter = tmp_path / "converter.gguf"
    _write(converter, key, record, config, model)
    ours = tmp_path / "ours.gguf"
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    name = CASES[key].get("name", f"tiny {record.gguf}")
    write_model_gguf(ours, config.to_dict(), state.items(), _tokenizer(config), qtype="F32", embed_qtype="F32",
                     name=name)  # fmt: skip

    a, b = GGUFReader(ours), GGUFReader(converter)
    assert sorted(a.tensors) == sorted(b.tensors), sorted(set(a.tensors) ^ set(b.tensors))
    for tensor in a.tensors:
        assert a.tensors[tensor].dims == b.tensors[tensor].dims, tensor
        assert a.tensors[tensor].type.name == b.tensors[tensor].type.name == "F32", tensor
        assert np.array_equal(a.array(tensor), b.array(tensor)), f"{key}: {tensor} differs from the converter's"
    mine, theirs = _metadata(a, record.gguf), _metadata(b, record.gguf)
    for field in set(mine) & set(theirs):
        assert mine[field] == pytest.approx(theirs[field], rel=1e-6), f"{key}: {field}"
    assert set(mine) - set(theirs) <= ONLY_OURS, sorted(set(mine) - set(theirs))
    assert set(theirs) - set(mine) <= ONLY_CONVERTER, sorted(set(theirs) - set(mine))
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if "attention.key_length" not in mine:
        assert head_dim == config.hidden_size // config.num_attention_heads  # llama.cpp's default then
    if "attention.sliding_window" in theirs and "attention.sliding_window" not in mine:
        assert key in ("mistral", "phi3"), key  # the windows llama.cpp's llama / phi3 graphs do not apply

    ids = torch.arange(3, 40).unsqueeze(0)
    with torch.no_grad():
        reference = model(ids).logits
    if key in THROUGH_QHF:
        from qhf.source import open_source

        loaded = open_source(ours).materialize_all().eval()
    else:
        loaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=ours.name, dtype=torch.float32)
    assert type(loaded).__name__ == record.hf_class
    with torch.no_grad():
        logits = loaded.eval()(ids).logits
    assert torch.allclose(logits, reference, rtol=0, atol=1e-4), (key, (logits - reference).abs().max())
