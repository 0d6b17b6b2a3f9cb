"""The default calibration for an opened (lazy) source: budget the generation, read the cache, else load the
weights to sample, then unload them.

Sampling needs every decoder layer at once, while quantization reads one layer at a time. So when the
mixture has self-generated rows that the cache (:mod:`qhf.calibration.sample_cache`) does not hold, the
layers that were still on the meta device are materialized, the model samples its rows, and those layers
are sent back to meta before the layer loop starts: peak memory during generation is the dense model in
the compute dtype; during quantization it is what it was without generation. A cache hit loads nothing.

With ``progress``, what happens is said on stderr before it happens, one line each: the budget's decision,
the cache hit, or the generation about to start (rows x tokens, batches, decode steps).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ..source.opened_source import OpenedSource
from .budget import GenerationBudget, ModelSize
from .mixture import DefaultCalibration, MixedCalibration, build_mixture
from .sample_cache import SampleCache, cache_root, source_fingerprint, tokenizer_fingerprint
from .self_generated import GeneratedSamples, GenerationSettings, generate_samples

log = logging.getLogger(__name__)


def _meta_layers(source: OpenedSource) -> list[int]:
    layers = source.model.get_submodule(source.definition.layers_path)
    return [i for i, layer in enumerate(layers.children()) if any(p.device.type == "meta" for p in layer.parameters())]


def _say(progress: bool, text: str) -> None:
    if progress:
        sys.stderr.write(f"calibration: {text}\n")
        sys.stderr.flush()


def _device_type(source: OpenedSource) -> str:
    devices = {p.device.type for p in source.model.parameters() if p.device.type != "meta"}
    return "cpu" if not devices or devices == {"cpu"} else ",".join(sorted(devices))


def sample_cache(source: OpenedSource, tokenizer: Any, settings: GenerationSettings) -> SampleCache:
    """The cache entry of ``settings`` for ``source`` and ``tokenizer`` (see :mod:`qhf.calibration.sample_cache`)."""
    identity = {
        "model": source_fingerprint(source.path),
        "dtype": str(source.dtype),
        "device": _device_type(source),
        "tokenizer": tokenizer_fingerprint(tokenizer),
    }
    head: Any = source.model.get_output_embeddings()  # type: ignore[operator]
    return SampleCache(cache_root(), identity, settings, int(head.weight.shape[0]))


def _announce(progress: bool, budget: GenerationBudget | None, settings: GenerationSettings) -> None:
    if budget is not None and budget.reason is not None:
        _say(progress, f"generation budget: {budget.reason}")
    if settings.count == 0 and budget is not None:
        _say(progress, "no self-generated rows (skipped: none fit the generation budget)")


def default_calibration(
    source: OpenedSource,
    tokenizer: Any,
    config: DefaultCalibration,
    *,
    progress: bool = False,
    budget: GenerationBudget | None = None,
) -> MixedCalibration:
    """Build ``config`` (resolved, see :meth:`DefaultCalibration.budgeted`) for ``source``; decoder layers loaded
    only for generation are released. ``budget``: the decision that shaped ``config``, recorded."""
    settings = config.generation()
    settings.validate()
    _announce(progress, budget, settings)
    if not settings.count:
        return build_mixture(None, tokenizer, config, progress=progress, budget=budget)
    cache = sample_cache(source, tokenizer, settings) if config.cache else None
    cached = cache.load() if cache is not None else None
    if cache is not None and cached is not None:
        _say(
            progress, f"{settings.count} self-generated rows x {settings.length} tokens from the cache ({cached.path})"
        )
        samples = GeneratedSamples(cached.rows, 0.0, cached.drawn_tokens, settings)
        return build_mixture(None, tokenizer, config, budget=budget, generated=samples, cache="hit")
    batches = -(-settings.count // settings.batch_size)
    _say(
        progress,
        f"generating {settings.count} rows x {settings.length} tokens ({batches} batch(es) of up to "
        f"{settings.batch_size} rows, {batches * (settings.length - 1)} decode steps; estimate after the first step)",
    )
    lazy = _meta_layers(source)
    source.materialize_all()
    try:
        samples = generate_samples(source.model, tokenizer, settings, progress=progress)
    finally:
        for index in lazy:
            source.release_layer(index)
    state = "off"
    if cache is not None:
        state = "miss"
        try:
            cache.store(samples.rows, samples.drawn_tokens)
        except OSError as exc:
            log.warning("calibration cache: could not write %s: %s (the rows are used, not cached)", cache.path, exc)
            state = f"miss, not written ({exc.strerror or exc})"
    return build_mixture(None, tokenizer, config, budget=budget, generated=samples, cache=state)


def size_of(source: OpenedSource) -> ModelSize:
    """The parameter counts the generation budget reads (shapes only; nothing is loaded)."""
    return ModelSize.of(source.model, source.definition.layers_path)
