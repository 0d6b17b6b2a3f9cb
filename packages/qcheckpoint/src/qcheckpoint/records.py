"""The two JSON records of a store: manifests (one per generation, stored as objects) and CURRENT.

Both are canonical JSON (sorted keys, compact separators, ASCII, no NaN/Infinity). Parsing is strict: exact key
sets, no duplicate keys, typed fields; any deviation raises :class:`CheckpointCorrupt` naming the file and field.

Manifest: ``{"version":1,"identity":{...},"cursor":int>=0,"continuation":sha,"artifacts":{name:sha}}``.
CURRENT: ``{"version":1,"generations":[newest sha, ...]}`` (non-empty, unique).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .errors import CheckpointCorrupt, CommitError
from .objects import is_object_name, require_object_name

STORE_VERSION = 1
_MANIFEST_KEYS = frozenset({"version", "identity", "cursor", "continuation", "artifacts"})
_CURRENT_KEYS = frozenset({"version", "generations"})


def canonical_json(value: Any, where: str) -> bytes:
    """Canonical JSON bytes of ``value``; a value JSON cannot hold exactly raises :class:`CommitError`."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True).encode()
    except (TypeError, ValueError, RecursionError) as exc:
        raise CommitError(f"{where}: expected a JSON value (finite numbers, str keys), {exc}") from None


def json_identity(identity: Mapping[str, Any], where: str = "identity") -> dict[str, Any]:
    """``identity`` as it will read back from disk (tuples become lists); validates it is a str-keyed JSON dict."""
    if not isinstance(identity, Mapping):
        raise CommitError(f"{where}: expected a dict, found {type(identity).__name__}")
    for key in identity:
        if not isinstance(key, str):
            raise CommitError(f"{where}: expected str keys, found key {key!r}")
    loaded = json.loads(canonical_json(dict(identity), where))
    if not isinstance(loaded, dict):  # pragma: no cover - a Mapping always dumps to an object
        raise CommitError(f"{where}: expected a dict")
    return loaded


def _reject_constant(token: str) -> Any:
    raise ValueError(f"non-finite number {token} is not allowed")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def parse_json(data: bytes, where: str) -> Any:
    """Strict JSON parse (UTF-8, no NaN, no duplicate keys); failures raise :class:`CheckpointCorrupt`."""
    try:
        text = data.decode("utf-8")
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointCorrupt(f"{where}: not valid JSON ({exc})") from None


@dataclass(frozen=True)
class Manifest:
    """One generation: the run's identity, the cursor reached, the continuation object and every artifact."""

    identity: dict[str, Any]
    cursor: int
    continuation: str
    artifacts: dict[str, str]

    def encode(self) -> bytes:
        """Canonical JSON bytes (the manifest object's content)."""
        return canonical_json(
            {
                "version": STORE_VERSION,
                "identity": self.identity,
                "cursor": self.cursor,
                "continuation": self.continuation,
                "artifacts": self.artifacts,
            },
            "manifest",
        )

    def objects(self) -> set[str]:
        """Every object the manifest references (continuation and artifacts)."""
        return {self.continuation, *self.artifacts.values()}

    @classmethod
    def decode(cls, data: bytes, where: str) -> Manifest:
        """Parse and validate manifest bytes; ``where`` names the manifest in errors."""
        raw = parse_json(data, where)
        if not isinstance(raw, dict):
            raise CheckpointCorrupt(f"{where}: expected a JSON object, found {type(raw).__name__}")
        if set(raw) != _MANIFEST_KEYS:
            raise CheckpointCorrupt(f"{where}: expected keys {sorted(_MANIFEST_KEYS)}, found {sorted(raw)}")
        if type(raw["version"]) is not int or raw["version"] != STORE_VERSION:
            raise CheckpointCorrupt(f"{where}: field 'version' expected {STORE_VERSION}, found {raw['version']!r}")
        if not isinstance(raw["identity"], dict):
            raise CheckpointCorrupt(f"{where}: field 'identity' expected an object, found {raw['identity']!r:.80}")
        cursor = raw["cursor"]
        if type(cursor) is not int or cursor < 0:
            raise CheckpointCorrupt(f"{where}: field 'cursor' expected an int >= 0, found {cursor!r:.80}")
        continuation = require_object_name(raw["continuation"], f"{where}: field 'continuation'")
        artifacts = raw["artifacts"]
        if not isinstance(artifacts, dict):
            raise CheckpointCorrupt(f"{where}: field 'artifacts' expected an object, found {artifacts!r:.80}")
        for name, sha in artifacts.items():
            if name == "":
                raise CheckpointCorrupt(f"{where}: field 'artifacts' has an empty artifact name")
            require_object_name(sha, f"{where}: artifact {name!r}")
        return cls(identity=raw["identity"], cursor=cursor, continuation=continuation, artifacts=dict(artifacts))


def encode_current(generations: list[str]) -> bytes:
    """CURRENT's content for ``generations`` (newest first)."""
    return canonical_json({"version": STORE_VERSION, "generations": generations}, "CURRENT") + b"\n"


def decode_current(data: bytes, where: str) -> list[str]:
    """Validate CURRENT; a malformed file raises :class:`CheckpointCorrupt` (the store fails closed)."""
    raw = parse_json(data, where)
    if not isinstance(raw, dict) or set(raw) != _CURRENT_KEYS:
        found = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise CheckpointCorrupt(f"{where}: expected an object with keys {sorted(_CURRENT_KEYS)}, found {found}")
    if type(raw["version"]) is not int or raw["version"] != STORE_VERSION:
        raise CheckpointCorrupt(f"{where}: field 'version' expected {STORE_VERSION}, found {raw['version']!r:.80}")
    generations = raw["generations"]
    if not isinstance(generations, list) or not generations:
        raise CheckpointCorrupt(f"{where}: field 'generations' expected a non-empty list, found {generations!r:.80}")
    for index, name in enumerate(generations):
        if not is_object_name(name):
            raise CheckpointCorrupt(f"{where}: generations[{index}] expected a 64-hex object name, found {name!r:.80}")
    if len(set(generations)) != len(generations):
        raise CheckpointCorrupt(f"{where}: field 'generations' lists a generation twice")
    return list(generations)
