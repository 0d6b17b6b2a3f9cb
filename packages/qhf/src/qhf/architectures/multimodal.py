"""Vision-language models: which transformers class builds them, where their language model is, what stays dense.

A vision-language model (VLM) is a composite transformers model: a config with a ``text_config`` and a
``vision_config``, a language model (``model.language_model`` in transformers 5: Qwen2-VL, Qwen2.5-VL, Gemma 3,
LLaVA, Mistral 3; ``language_model`` for Llama 4), a vision tower and a multimodal projector. qhf quantizes the
language model's decoder layers only; the vision tower, the projector, the embeddings and ``lm_head`` stay
dense (there is no switch to quantize them). Calibration runs the model on text alone.

:func:`model_class` picks transformers' auto class for a config: ``AutoModelForCausalLM`` for every type of its
causal-LM mapping (the types qhf always took), ``AutoModelForImageTextToText`` for a type only that mapping has
(``qwen2_5_vl``, ``llava``) or whose config names that mapping's class where the causal-LM mapping has another
(``Llama4ForConditionalGeneration`` rather than the text-only ``Llama4ForCausalLM``).
:func:`language_model_path` finds the language model inside the skeleton (discovery looks for the decoder layers
there only, so a vision tower with as many layers is never taken for them) and :func:`dense_parts` names the
subtrees beside it that stay dense.
"""

from __future__ import annotations

import re
from typing import Any

from torch import nn

from ..errors import UnsupportedArchitectureError

TEXT_ONLY_NOTE = "calibrated on text only; the vision tower and the multimodal projector are not quantized"
"""The run summary's and report's ``multimodal.note`` for a vision-language model."""

PROCESSOR_FILES = (
    "preprocessor_config.json",
    "processor_config.json",
    "video_preprocessor_config.json",
    "chat_template.json",
)
"""A vision-language model's processor files, carried from the source into its checkpoint (and a dense export) so
that ``AutoProcessor`` loads from the checkpoint as from the source."""

_LAYER_INDEX = re.compile(r"(?:^|\.)layers\.(\d+)\.")
"""A layer index in a tensor name, as qformats' checkpoint rule ``CONFIG-LAYERS`` reads it."""


def text_config(config: Any) -> Any:
    """The text config of ``config`` (itself for a text-only model)."""
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def is_vision_language(config: Any) -> bool:
    """Whether ``config`` is a composite vision-language config (a text sub-config and a ``vision_config``)."""
    text = text_config(config)
    return text is not config and getattr(config, "vision_config", None) is not None


def model_class(config: Any) -> Any:
    """The transformers auto class whose ``from_config`` builds ``config``'s model (module docstring)."""
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText
    from transformers.models.auto.modeling_auto import (
        MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES,
    )

    model_type = str(getattr(config, "model_type", ""))
    causal = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    image_text = MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.get(model_type)
    named = (getattr(config, "architectures", None) or [None])[0]
    if image_text is not None and (causal is None or (named == image_text and named != causal)):
        return AutoModelForImageTextToText
    return AutoModelForCausalLM


def language_model_path(model: Any) -> str | None:
    """Dotted path of a vision-language model's language model (``model.language_model``); None for any other
    model (``model.config`` is not a vision-language config, or the model has no separate language model)."""
    config = getattr(model, "config", None)
    if config is None or not is_vision_language(config) or not hasattr(model, "get_decoder"):
        return None
    decoder = model.get_decoder()
    names = {id(module): name for name, module in model.named_modules()}
    path = names.get(id(decoder))
    return path or None


def dense_parts(model: Any) -> tuple[str, ...]:
    """Dotted paths of the subtrees of a vision-language model outside its language model that hold parameters
    (``model.visual``; ``model.vision_tower``, ``model.multi_modal_projector``), the output projection excepted:
    the siblings of each module on the path from the root to the language model. Empty for any other model."""
    path = language_model_path(model)
    if path is None:
        return ()
    head = model.get_output_embeddings()
    parts: list[str] = []
    parent, prefix = model, ""
    for step in path.split("."):
        for name, child in parent.named_children():
            if name == step or child is head or next(child.parameters(), None) is None:
                continue
            parts.append(prefix + name)
        parent, prefix = parent.get_submodule(step), f"{prefix}{step}."
    return tuple(parts)


def head_tied(model: Any) -> bool | None:
    """Whether a vision-language model's output projection shares its input embedding's weight, as transformers
    decides it: the ``tie_word_embeddings`` of the config of the model holding the output projection (the
    composite's own config for Gemma 3, Qwen2.5-VL and LLaVA, whose text configs may say otherwise; the text
    model's for Llama 4, whose ``lm_head`` is inside ``language_model``). None for any other model."""
    if language_model_path(model) is None:
        return None
    head = model.get_output_embeddings()
    names = {id(module): name for name, module in model.named_modules()}
    owner_path = names.get(id(head), "").rpartition(".")[0]
    while True:
        owner = model.get_submodule(owner_path) if owner_path else model
        config = getattr(owner, "config", None)
        if config is not None and hasattr(config, "tie_word_embeddings"):
            return bool(config.tie_word_embeddings)
        if not owner_path:
            return False
        owner_path = owner_path.rpartition(".")[0]


def text_only_record(model: nn.Module) -> dict[str, Any] | None:
    """The run summary's ``multimodal`` record of a vision-language model: ``language_model`` (its path),
    ``dense`` (:func:`dense_parts`) and ``note`` (:data:`TEXT_ONLY_NOTE`); None for any other model."""
    path = language_model_path(model)
    if path is None:
        return None
    return {"language_model": path, "dense": list(dense_parts(model)), "note": TEXT_ONLY_NOTE}


def refuse_layer_index_clash(model: nn.Module, layers_path: str, num_layers: int) -> None:
    """Refuse a vision-language model whose parameters outside its decoder layers (``layers_path``) carry a
    ``layers.N`` index of ``num_layers`` or more (a vision encoder deeper than the language model: SigLIP's 26
    ``vision_tower.encoder.layers`` beside a 24-layer text model). qformats' ``CONFIG-LAYERS`` rule reads the
    highest ``layers.N`` of every tensor name as the checkpoint's layer count and would refuse the save after
    the whole run; this raises :class:`UnsupportedArchitectureError` before any work instead."""
    inside = layers_path + "."
    deeper = sorted(
        {
            name[: found.end() - 1]
            for name, _ in model.named_parameters()
            if not name.startswith(inside)
            for found in [_LAYER_INDEX.search(name)]
            if found is not None and int(found.group(1)) >= num_layers
        }
    )
    if deeper:
        raise UnsupportedArchitectureError(
            f"{type(model).__name__}: {', '.join(deeper[:3])}{' ...' if len(deeper) > 3 else ''}: a layer list "
            f"outside the language model deeper than its {num_layers} decoder layers; qformats' checkpoint rule "
            "CONFIG-LAYERS takes the highest 'layers.N' of any tensor name for the layer count, so the saved "
            "checkpoint would be refused"
        )
