"""A disk cache of self-generated calibration rows, per model, tokenizer and generation settings.

Where: ``$LOWBIT_CACHE_DIR/calibration/`` when the variable is set, else ``~/.cache/lowbit/calibration/``;
one JSON file per entry, named by its key.

The key is a SHA-256 over (JSON, sorted keys):

* the model's identity without reading the whole model: for every file of the source (a Hugging Face
  directory's ``*.json``, ``*.safetensors``, ``*.bin``, ``*.gguf``, ``*.model`` files, or the one ``.gguf``)
  its name, its size and a SHA-256 of :data:`SAMPLES` chunks of :data:`CHUNK` bytes at evenly spaced offsets
  (the first chunk holds a safetensors / GGUF header: tensor names, shapes and offsets). At most 1 MiB is read
  per file; files up to that size (configs, tokenizer files) are hashed whole. Modification times are not
  used (a copied model keeps its key);
* the compute dtype and device type the rows are generated in;
* the tokenizer: a SHA-256 of its vocabulary (token -> id) and special ids;
* every generation setting (count, length, temperature, top_p, seed, batch size, the openers' text);
* the torch and transformers versions (a kernel change can move a logit's last bits and so a draw).

An entry is written atomically (a temporary file in the same directory, then ``os.replace``). An entry that
cannot be read, is not the expected JSON, names another key, or whose rows do not match their recorded
SHA-256, count, length or vocabulary is ignored with a logged warning and regenerated: never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .self_generated import GenerationSettings

log = logging.getLogger(__name__)

#: Chunks sampled per weight file, and their size in bytes (16 x 64 KiB = 1 MiB read per file at most).
SAMPLES = 16
CHUNK = 64 * 1024
#: Bumped when the entry format or the generation's numerics change in a way the key does not see.
FORMAT = 1
MODEL_SUFFIXES = (".json", ".safetensors", ".bin", ".gguf", ".model", ".txt")


def cache_root() -> Path:
    """``$LOWBIT_CACHE_DIR/calibration`` or ``~/.cache/lowbit/calibration`` (not created here)."""
    base = os.environ.get("LOWBIT_CACHE_DIR")
    return Path(base) / "calibration" if base else Path.home() / ".cache" / "lowbit" / "calibration"


def file_fingerprint(path: Path) -> dict[str, Any]:
    """Name, size and a SHA-256 of sampled chunks of one file (the whole file when it is at most 1 MiB)."""
    size = path.stat().st_size
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        if size <= SAMPLES * CHUNK:
            digest.update(handle.read())
        else:
            step = (size - CHUNK) // (SAMPLES - 1)
            for index in range(SAMPLES):
                handle.seek(index * step)
                digest.update(handle.read(CHUNK))
    return {"name": path.name, "size": size, "sha256": digest.hexdigest()}


def source_fingerprint(path: Path) -> list[dict[str, Any]]:
    """The fingerprints of a source: the file itself, or a directory's model files in name order."""
    if path.is_file():
        return [file_fingerprint(path)]
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in MODEL_SUFFIXES)
    return [file_fingerprint(p) for p in files]


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of the tokenizer's vocabulary (sorted token -> id pairs), its class and special ids."""
    get_vocab = getattr(tokenizer, "get_vocab", None)
    vocab = sorted(get_vocab().items()) if callable(get_vocab) else []
    specials = sorted(int(i) for i in getattr(tokenizer, "all_special_ids", []) or [])
    named = [getattr(tokenizer, a, None) for a in ("bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id")]
    text = json.dumps([type(tokenizer).__name__, vocab, specials, named], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedRows:
    """Rows read from a valid entry (``rows``: count lists of length ids) and the entry's path."""

    rows: tuple[tuple[int, ...], ...]
    drawn_tokens: int
    path: Path


def _rows_digest(rows: Any) -> str:
    return hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode("ascii")).hexdigest()


class SampleCache:
    """The cache entry of one (model, tokenizer, settings) combination under ``root``."""

    def __init__(self, root: Path, identity: dict[str, Any], settings: GenerationSettings, vocab: int) -> None:
        from importlib.metadata import version

        self.key_fields = {
            "format": FORMAT,
            **identity,
            "settings": {**settings.as_meta(), "batch_size": settings.batch_size, "prompts": list(settings.prompts)},
            "torch": version("torch"),
            "transformers": version("transformers"),
        }
        text = json.dumps(self.key_fields, sort_keys=True, ensure_ascii=False)
        self.key = hashlib.sha256(text.encode("utf-8")).hexdigest()
        self.path = root / f"{self.key}.json"
        self.settings = settings
        self.vocab = vocab

    def load(self) -> CachedRows | None:
        """The entry's rows, or None when there is none or it is invalid (a warning says which and why)."""
        if not self.path.exists():
            return None
        try:
            entry = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            self._reject(f"unreadable ({exc})")
            return None
        problem = self._check(entry)
        if problem is not None:
            self._reject(problem)
            return None
        rows = tuple(tuple(int(t) for t in row) for row in entry["rows"])
        return CachedRows(rows, int(entry["drawn_tokens"]), self.path)

    def _check(self, entry: Any) -> str | None:
        if not isinstance(entry, dict) or entry.get("key") != self.key:
            return "not an entry for this key"
        rows, drawn = entry.get("rows"), entry.get("drawn_tokens")
        if not isinstance(rows, list) or len(rows) != self.settings.count:
            return f"expected {self.settings.count} rows"
        if not isinstance(drawn, int) or isinstance(drawn, bool) or drawn < 0:
            return "drawn_tokens is not a count"
        for row in rows:
            if not isinstance(row, list) or len(row) != self.settings.length:
                return f"a row is not {self.settings.length} tokens"
            if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < self.vocab for t in row):
                return f"a row holds a value that is not a token id below {self.vocab}"
        if entry.get("rows_sha256") != _rows_digest(rows):
            return "its rows do not match their recorded SHA-256"
        return None

    def _reject(self, why: str) -> None:
        log.warning("calibration cache: ignoring %s: %s; the rows are generated again", self.path, why)

    def store(self, rows: tuple[tuple[int, ...], ...], drawn_tokens: int) -> Path:
        """Write the entry atomically (temporary file + rename in the cache directory); returns its path."""
        plain = [list(row) for row in rows]
        entry = {
            "key": self.key,
            "identity": self.key_fields,
            "drawn_tokens": drawn_tokens,
            "rows_sha256": _rows_digest(plain),
            "rows": plain,
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.key[:16]}.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(entry, out, separators=(",", ":"))
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        return self.path
