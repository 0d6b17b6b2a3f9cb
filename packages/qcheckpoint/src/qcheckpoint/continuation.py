"""The continuation codec: a value tree plus its tensors in one safetensors blob, without pickle.

``encode_continuation(tree) -> bytes``; ``decode_continuation(bytes) -> tree``. Tensors are stored as
``"0"``, ``"1"``, … and ``__metadata__["continuation"]`` holds ``{"version": 2, "tree": node}`` where a node is
``[tag, value]``:

- ``["scalar", v]``: None, bool, int, str or finite float;
- ``["tensor", {"name", "kind": "numpy"|"torch", "device", "requires_grad"[, "parameter"]}]``;
- ``["device", "cpu"|"cuda"|"cuda:<n>"]`` (a ``torch.device``);
- ``["dict", [[key_node, value_node], ...]]`` with scalar str/int/bool keys; ``["list", [...]]``;
  ``["tuple", [...]]``.

Only exact builtin types are accepted (a subclass would not come back as itself). The same tensor object
referenced twice is stored once and restored as one object. torch is imported only if the tree holds torch
values (encode) or the blob names them (decode); no code named by data is ever imported.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any

import numpy as np

from .errors import ContinuationError
from .numpy_tensors import numpy_from_blob, numpy_to_blob
from .safetensors_blob import BlobTensor, read_blob, write_blob

VERSION = 2
METADATA_FIELD = "continuation"
MAX_DEPTH = 200
_SCALARS = (type(None), bool, int, str, float)
_KEY_TYPES = (str, int, bool)


def _torch_loaded() -> bool:
    return "torch" in sys.modules


class _Encoder:
    """Walks a tree depth-first, collecting tensors (deduplicated by object identity) and building nodes."""

    def __init__(self) -> None:
        self.tensors: list[tuple[str, BlobTensor]] = []
        self.infos: dict[int, dict[str, Any]] = {}
        self.keep_alive: list[object] = []  # holds encoded tensors so their ids cannot be reused mid-walk
        self.active: set[int] = set()

    def scalar(self, value: object, path: str) -> list[Any]:
        if type(value) is float and not math.isfinite(value):
            raise ContinuationError(f"{path}: non-finite float {value!r} cannot be stored")
        return ["scalar", value]

    def tensor(self, value: object, path: str) -> list[Any]:
        known = self.infos.get(id(value))
        if known is not None:
            return ["tensor", known]
        name = str(len(self.tensors))
        if type(value) is np.ndarray:
            blob = numpy_to_blob(value, path)
            info: dict[str, Any] = {"name": name, "kind": "numpy", "device": "cpu", "requires_grad": False}
        else:
            from .torch_tensors import torch_to_blob

            blob, extra = torch_to_blob(value, path)  # type: ignore[arg-type]
            info = {"name": name, "kind": "torch", **extra}
        self.tensors.append((name, blob))
        self.infos[id(value)] = info
        self.keep_alive.append(value)
        return ["tensor", info]

    def node(self, value: object, path: str, depth: int) -> list[Any]:
        if depth > MAX_DEPTH:
            raise ContinuationError(f"{path}: nesting deeper than {MAX_DEPTH} levels")
        kind = type(value)
        if kind in _SCALARS:
            return self.scalar(value, path)
        if kind is np.ndarray:
            return self.tensor(value, path)
        if _torch_loaded():
            from .torch_tensors import device_to_text, is_torch_device, is_torch_tensor

            if is_torch_tensor(value):
                return self.tensor(value, path)
            if is_torch_device(value):
                return ["device", device_to_text(value, path)]  # type: ignore[arg-type]
        if kind in (dict, list, tuple) and isinstance(value, (dict, list, tuple)):
            if id(value) in self.active:
                raise ContinuationError(f"{path}: cycle detected (a container contains itself)")
            self.active.add(id(value))
            try:
                return self.container(value, path, depth)
            finally:
                self.active.discard(id(value))
        hint = " (convert numpy scalars with .item())" if isinstance(value, np.generic) else ""
        raise ContinuationError(f"{path}: unsupported value of type {kind.__module__}.{kind.__qualname__}{hint}")

    def container(self, value: dict[Any, Any] | list[Any] | tuple[Any, ...], path: str, depth: int) -> list[Any]:
        if isinstance(value, dict):
            items: list[Any] = []
            for key, item in value.items():
                if type(key) not in _KEY_TYPES:
                    raise ContinuationError(f"{path}: dict key {key!r:.80} must be str, int or bool")
                items.append([self.scalar(key, path), self.node(item, f"{path}[{key!r}]", depth + 1)])
            return ["dict", items]
        tag = "list" if type(value) is list else "tuple"
        return [tag, [self.node(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]]


def encode_continuation(tree: Any) -> bytes:
    """Encode a value tree (see module docstring) into one safetensors blob."""
    encoder = _Encoder()
    root = encoder.node(tree, "tree", 0)
    try:
        text = json.dumps({"version": VERSION, "tree": root}, separators=(",", ":"), allow_nan=False, ensure_ascii=True)
    except (ValueError, RecursionError) as exc:  # pragma: no cover - the walk already rejects these
        raise ContinuationError(f"tree: cannot be written as JSON ({exc})") from None
    return write_blob(encoder.tensors, {METADATA_FIELD: text})


class _Decoder:
    """Rebuilds a tree from its JSON nodes and the blob's tensors; every malformation names its tree path."""

    def __init__(self, tensors: dict[str, BlobTensor]) -> None:
        self.tensors = tensors
        self.restored: dict[str, Any] = {}

    def node(self, node: object, path: str, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise ContinuationError(f"{path}: nesting deeper than {MAX_DEPTH} levels")
        if not isinstance(node, list) or len(node) != 2 or not isinstance(node[0], str):
            raise ContinuationError(f"{path}: expected a [tag, value] node, found {node!r:.80}")
        tag, value = node
        if tag == "scalar":
            if type(value) not in _SCALARS or (type(value) is float and not math.isfinite(value)):
                raise ContinuationError(f"{path}: invalid scalar {value!r:.80}")
            return value
        if tag == "tensor":
            return self.tensor(value, path)
        if tag == "device":
            from .torch_tensors import device_from_text

            return device_from_text(value, path)
        if tag in ("list", "tuple"):
            if not isinstance(value, list):
                raise ContinuationError(f"{path}: {tag} node must hold a list, found {value!r:.80}")
            items = [self.node(item, f"{path}[{i}]", depth + 1) for i, item in enumerate(value)]
            return items if tag == "list" else tuple(items)
        if tag == "dict":
            return self.mapping(value, path, depth)
        raise ContinuationError(f"{path}: unknown node tag {tag!r:.80}")

    def mapping(self, value: object, path: str, depth: int) -> dict[Any, Any]:
        if not isinstance(value, list):
            raise ContinuationError(f"{path}: dict node must hold a list of pairs, found {value!r:.80}")
        result: dict[Any, Any] = {}
        for index, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise ContinuationError(f"{path}: dict entry {index} must be a [key, value] pair")
            key_node = pair[0]
            if not (isinstance(key_node, list) and len(key_node) == 2 and key_node[0] == "scalar"):
                raise ContinuationError(f"{path}: dict entry {index} key must be a scalar node")
            key = key_node[1]
            if type(key) not in _KEY_TYPES:
                raise ContinuationError(f"{path}: dict entry {index} key {key!r:.80} must be str, int or bool")
            if key in result:
                raise ContinuationError(f"{path}: duplicate dict key {key!r:.80}")
            result[key] = self.node(pair[1], f"{path}[{key!r}]", depth + 1)
        return result

    def tensor(self, info: object, path: str) -> Any:
        if not isinstance(info, dict) or not {"name", "kind", "device", "requires_grad"} <= set(info):
            raise ContinuationError(f"{path}: tensor node needs name, kind, device, requires_grad; found {info!r:.120}")
        name, kind = info["name"], info["kind"]
        if not isinstance(name, str) or name not in self.tensors:
            raise ContinuationError(f"{path}: tensor {name!r:.40} is not in the blob")
        if name in self.restored:
            return self.restored[name]
        requires_grad, parameter = info["requires_grad"], info.get("parameter", False)
        if type(requires_grad) is not bool or type(parameter) is not bool:
            raise ContinuationError(f"{path}: requires_grad/parameter must be booleans")
        if kind == "numpy":
            if info["device"] != "cpu" or requires_grad or parameter:
                raise ContinuationError(f"{path}: a numpy tensor must be recorded on cpu without grad flags")
            value: Any = numpy_from_blob(self.tensors[name], path)
        elif kind == "torch":
            from .torch_tensors import torch_from_blob

            value = torch_from_blob(self.tensors[name], info["device"], requires_grad, parameter, path)
        else:
            raise ContinuationError(f"{path}: unknown tensor kind {kind!r:.40}; expected numpy or torch")
        self.restored[name] = value
        return value


def decode_continuation(data: bytes | memoryview) -> Any:
    """Decode a blob made by :func:`encode_continuation`; tensors return to their recorded devices."""
    metadata, tensors = read_blob(data)
    text = metadata.get(METADATA_FIELD)
    if text is None:
        raise ContinuationError(f"continuation blob: __metadata__ has no {METADATA_FIELD!r} entry")
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ContinuationError(f"continuation blob: the tree is not valid JSON ({exc})") from None
    if not isinstance(document, dict) or set(document) != {"version", "tree"}:
        raise ContinuationError("continuation blob: expected {'version', 'tree'} in the continuation metadata")
    if type(document["version"]) is not int or document["version"] != VERSION:
        raise ContinuationError(f"continuation blob: version {document['version']!r:.40} is not {VERSION}")
    decoder = _Decoder(tensors)
    tree = decoder.node(document["tree"], "tree", 0)
    unused = sorted(set(tensors) - set(decoder.restored))
    if unused:
        raise ContinuationError(f"continuation blob: tensors {unused[:5]} are not referenced by the tree")
    return tree


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not allowed")


class ContinuationCodec:
    """Namespace form of the codec: ``ContinuationCodec.encode(tree)`` / ``ContinuationCodec.decode(data)``."""

    VERSION = VERSION

    @staticmethod
    def encode(tree: Any) -> bytes:
        """See :func:`encode_continuation`."""
        return encode_continuation(tree)

    @staticmethod
    def decode(data: bytes | memoryview) -> Any:
        """See :func:`decode_continuation`."""
        return decode_continuation(data)
