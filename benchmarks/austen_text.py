"""Jane Austen's novels as plain text, read from Debian's ``r-cran-janeaustenr`` package without R.

An out-of-domain evaluation text (public domain) that this machine can reach: ``apt-get download
r-cran-janeaustenr && dpkg-deb -x r-cran-janeaustenr_*.deb austen`` and pass
``austen/usr/lib/R/site-library/janeaustenr``; an installed package is found at its usual place.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from pathlib import Path
from typing import Any

DEBIAN_AUSTEN = Path("/usr/lib/R/site-library/janeaustenr")


class _RReader:
    """R's XDR serialization, enough for the package's data: vectors, strings, pairlists, symbols."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos, self.refs = data, 0, []  # type: list[Any]

    def int(self) -> int:
        (value,) = struct.unpack(">i", self.data[self.pos : self.pos + 4])
        self.pos += 4
        return value

    def take(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def header(self) -> None:
        if self.take(2) != b"X\n":
            raise ValueError("not an XDR R serialization")
        version = self.int()
        self.int(), self.int()
        if version == 3:
            self.take(self.int())

    def item(self) -> Any:
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, bool(flags & (1 << 9)), bool(flags & (1 << 10))
        if kind in (254, 242, 251, 252, 253):  # NULL, empty/base/global env, missing arg
            return None
        if kind == 255:  # reference to an earlier symbol
            return self.refs[(flags >> 8) - 1]
        if kind == 1:  # symbol
            name = self.item()
            self.refs.append(name)
            return name
        if kind == 2:  # pairlist: (tag, value) pairs
            pairs = []
            while True:
                if has_attr:
                    self.item()
                tag = self.item() if has_tag else None
                pairs.append((tag, self.item()))
                flags = self.int()
                kind, has_attr, has_tag = flags & 0xFF, bool(flags & (1 << 9)), bool(flags & (1 << 10))
                if kind == 254:
                    return dict(pairs)
        if kind == 9:  # CHARSXP
            n = self.int()
            return None if n == -1 else self.take(n).decode("utf-8", "replace")
        if kind in (10, 13, 14, 16, 19):
            n = self.int()
            if kind in (16, 19):
                values: Any = [self.item() for _ in range(n)]
            elif kind == 14:
                values = list(struct.unpack(f">{n}d", self.take(8 * n)))
            else:
                values = list(struct.unpack(f">{n}i", self.take(4 * n)))
            attrs = self.item() if has_attr else None
            names = attrs.get("names") if isinstance(attrs, dict) else None
            return dict(zip(names, values, strict=True)) if names else values
        raise ValueError(f"unsupported R object type {kind} at byte {self.pos}")


def _unserialize(data: bytes) -> Any:
    reader = _RReader(data)
    reader.header()
    return reader.item()


def austen_book(package_dir: Path, book: str) -> str:
    """The text of ``book`` (e.g. ``persuasion``) from the janeaustenr package's data: paragraphs
    joined by blank lines, the lines of a paragraph by spaces."""
    base = package_dir / "data" / "Rdata"
    index = _unserialize(gzip.decompress(base.with_suffix(".rdx").read_bytes()))
    offset, length = index["variables"][book]
    blob = base.with_suffix(".rdb").read_bytes()[offset : offset + length]
    lines = _unserialize(zlib.decompress(blob[4:]))
    paragraphs, current = [], []  # type: list[str], list[str]
    for line in lines:
        if line and line.strip():
            current.append(line.strip())
        elif current:
            paragraphs.append(" ".join(current))
            current = []
    if current:
        paragraphs.append(" ".join(current))
    return "\n\n".join(paragraphs)
