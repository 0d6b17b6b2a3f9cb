"""Turning transformers' KV cache off for every config of a model while the layer loop runs.

The loop calls the model's forward and replays the keyword arguments it captured for each decoder layer; a KV
cache built in that forward would be captured too and grow with every replay. qlooper turns off
``model.config.use_cache`` while it captures, but a vision-language model's language model reads its own
config (``config.text_config``), and transformers 5 passes its cache under names qlooper does not drop (Gemma
3's ``cache=``), so every config object the model's modules hold gets ``use_cache = False`` here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn


@contextmanager
def kv_cache_off(model: nn.Module) -> Iterator[None]:
    """While active, ``use_cache`` is False on ``model.config`` and on every other distinct config of its submodules
    that has the attribute; after (also on an error) each gets its value back (``model.config``: None when it
    had none, as before this module existed)."""
    configs: dict[int, Any] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if config is not None and (module is model or hasattr(config, "use_cache")):
            configs.setdefault(id(config), config)
    saved = [(config, getattr(config, "use_cache", None)) for config in configs.values()]
    for config, _ in saved:
        config.use_cache = False
    try:
        yield
    finally:
        for config, value in saved:
            config.use_cache = value
