"""The embedded default text: CPython's bundled documentation (``pydoc_data.topics.topics``).

Every CPython ships it, so it is available offline. Documents are taken in sorted key order and split
by alternation: even positions are the calibration slice, odd positions the evaluation slice, so the two
never share a document and the split is the same on every run. The text differs between Python versions;
:func:`corpus_identity` records which one was used.
"""

from __future__ import annotations

import hashlib
import platform
from dataclasses import dataclass
from typing import Literal

Split = Literal["calibration", "evaluation"]


@dataclass(frozen=True)
class CorpusSlice:
    """Documents of one slice: ``names`` (topic keys) and ``texts``, parallel and in sorted key order."""

    split: Split
    names: tuple[str, ...]
    texts: tuple[str, ...]

    @property
    def characters(self) -> int:
        return sum(len(t) for t in self.texts)

    def joined(self, separator: str = "\n\n") -> str:
        """All documents as one string."""
        return separator.join(self.texts)


def _topics() -> dict[str, str]:
    from pydoc_data.topics import topics

    return dict(topics)


def bundled_docs(split: Split) -> CorpusSlice:
    """The calibration (even documents) or evaluation (odd documents) slice of the bundled docs."""
    if split not in ("calibration", "evaluation"):
        raise ValueError(f"split: expected 'calibration' or 'evaluation', found {split!r}")
    topics = _topics()
    keys = sorted(topics)
    offset = 0 if split == "calibration" else 1
    chosen = keys[offset::2]
    return CorpusSlice(split=split, names=tuple(chosen), texts=tuple(topics[k] for k in chosen))


def corpus_identity() -> dict[str, str]:
    """Which text was used: the Python version and a SHA-256 of the whole bundled corpus."""
    topics = _topics()
    digest = hashlib.sha256()
    for key in sorted(topics):
        digest.update(key.encode("utf-8") + b"\0" + topics[key].encode("utf-8") + b"\0")
    return {"source": "pydoc_data.topics", "python": platform.python_version(), "sha256": digest.hexdigest()}
