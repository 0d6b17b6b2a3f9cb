"""Calibration sources that need no download.

* :mod:`qhf.calibration.self_generated`: sequences the model samples itself (seeded, batched).
* :mod:`qhf.calibration.mixture`: the default mixture of those samples and CPython's bundled docs,
  with the accounting and metadata recorded in the saved config.
* :mod:`qhf.calibration.source_default`: building the default for a lazily opened source.
"""

from .mixture import DefaultCalibration, MixedCalibration, build_mixture, tokens_digest
from .self_generated import DEFAULT_PROMPTS, GeneratedSamples, GenerationSettings, generate_samples
from .source_default import default_calibration

__all__ = [
    "DEFAULT_PROMPTS",
    "DefaultCalibration",
    "GeneratedSamples",
    "GenerationSettings",
    "MixedCalibration",
    "build_mixture",
    "default_calibration",
    "generate_samples",
    "tokens_digest",
]
