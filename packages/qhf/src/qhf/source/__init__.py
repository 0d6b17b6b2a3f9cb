"""Opening model sources (Hugging Face directories) lazily: config, skeleton on meta, tensors per layer."""

from .hf_directory import HFDirectory, open_hf_directory
from .open import open_source
from .opened_source import OpenedSource, open_source_model
from .skeleton import materialize, materialize_names, meta_parameters, meta_skeleton, release
from .tensor_reader import TensorReader

__all__ = [
    "HFDirectory",
    "OpenedSource",
    "TensorReader",
    "materialize",
    "materialize_names",
    "meta_parameters",
    "meta_skeleton",
    "open_hf_directory",
    "open_source",
    "open_source_model",
    "release",
]
