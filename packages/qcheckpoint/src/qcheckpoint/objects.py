"""Immutable content-addressed objects: ``objects/<sha256 hex>``.

An object is written to ``objects/.<uuid32>.tmp`` (exclusive create) while its SHA-256 is computed, fsynced,
then renamed to its digest. Renames become durable at :meth:`ObjectStore.sync` (one fsync of ``objects/``),
which the store calls before publishing any manifest that references them. Hashing runs in a helper thread
beside the writes and the fsync (``hashlib`` releases the GIL), so a put costs about max(hash, write + fsync)
rather than their sum; verification of many objects is spread over a few threads for the same reason.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from .durable_io import create_exclusive, fsync_dir, temp_name, write_all
from .errors import CheckpointCorrupt, CheckpointError
from .faults import FaultHook

CHUNK_BYTES = 8 * 1024 * 1024
MAX_PENDING_CHUNKS = 4
VERIFY_THREADS = max(1, min(4, os.cpu_count() or 1))
_SHA_HEX = re.compile(r"[0-9a-f]{64}")

Chunk = bytes | bytearray | memoryview


def is_object_name(name: object) -> bool:
    """True for a lowercase 64-hex SHA-256 digest (the only names objects may have)."""
    return isinstance(name, str) and _SHA_HEX.fullmatch(name) is not None


def require_object_name(name: object, where: str, error: type[CheckpointError] = CheckpointCorrupt) -> str:
    """Return ``name`` if it is a valid object name, else raise ``error`` naming ``where`` (no path traversal)."""
    if not is_object_name(name):
        raise error(f"{where}: expected a 64-character lowercase hex SHA-256 object name, found {name!r}")
    return str(name)


def _split_for_fault(data: memoryview) -> Iterator[memoryview]:
    """Chunks of ``data``; the first is at most half, so ``object.mid_write`` falls inside the object."""
    first = min(CHUNK_BYTES, max(1, data.nbytes // 2)) if data.nbytes else 0
    if first:
        yield data[:first]
    for start in range(first, data.nbytes, CHUNK_BYTES):
        yield data[start : start + CHUNK_BYTES]


class ObjectStore:
    """The ``objects/`` directory of one store root; remembers what this process verified (name → size)."""

    def __init__(self, directory: Path, faults: FaultHook) -> None:
        self.directory = directory
        self.faults = faults
        self.verified: dict[str, int] = {}
        self._dirty = False

    def path(self, name: str, where: str = "object") -> Path:
        """Path of a validated object name (the file may not exist)."""
        return self.directory / require_object_name(name, where)

    def sync(self) -> None:
        """fsync ``objects/`` if any rename happened since the last sync."""
        if self._dirty:
            fsync_dir(self.directory)
            self._dirty = False

    # ----- writing -------------------------------------------------------------------------------------------
    def put_bytes(self, data: Chunk) -> str:
        """Store ``data`` (not copied; do not mutate it during the call); returns its SHA-256 hex name."""
        return self._write(_split_for_fault(memoryview(data).cast("B")))

    def put_chunks(self, chunks: Iterable[Chunk]) -> str:
        """Store the concatenation of ``chunks`` without holding it in memory; returns its name."""
        return self._write(memoryview(c).cast("B") for c in chunks)

    def put_file(self, source: Path) -> str:
        """Store a copy of file ``source`` (streamed); a file already inside ``objects/`` is verified and reused."""
        source = Path(source)
        if not source.is_file():
            raise FileNotFoundError(f"put_file: {source} is not a regular file")
        if source.resolve().parent == self.directory.resolve() and is_object_name(source.name):
            self.verify(source.name, f"put_file({source})")
            return source.name
        with open(source, "rb") as handle:
            return self._write(_file_chunks(handle))

    def _write(self, chunks: Iterable[memoryview]) -> str:
        """Write ``chunks`` to a fsynced temporary while hashing them, then rename it to its digest.

        An intact object of that name is kept (the temporary is dropped); a corrupt one is replaced.
        """
        tmp = self.directory / temp_name()
        fd = create_exclusive(tmp)
        try:
            self.faults.reach("object.temp_created")
            digest, size = _write_hashing_and_sync(fd, chunks, self.faults)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        self.faults.reach("object.after_fsync")
        if self._intact(digest, size):
            tmp.unlink(missing_ok=True)
            return digest
        os.replace(tmp, self.directory / digest)
        self._dirty = True
        self.verified[digest] = size
        self.faults.reach("object.after_rename")
        return digest

    def _intact(self, name: str, size: int) -> bool:
        """True when ``name`` exists and hashes correctly (a corrupt existing object is reported as absent)."""
        target = self.directory / name
        if not target.exists():
            return False
        if self.verified.get(name) == size and target.stat().st_size == size:
            return True
        try:
            self.verify(name, "existing object")
        except CheckpointCorrupt:
            return False
        return True

    # ----- reading -------------------------------------------------------------------------------------------
    def verify(self, name: str, where: str) -> int:
        """Re-hash object ``name``; returns its size or raises :class:`CheckpointCorrupt` naming ``where``."""
        target = self.path(name, where)
        digest = hashlib.sha256()
        size = 0
        try:
            with open(target, "rb") as handle:
                for chunk in _file_chunks(handle):
                    digest.update(chunk)
                    size += chunk.nbytes
        except FileNotFoundError:
            self.verified.pop(name, None)
            raise CheckpointCorrupt(f"{where}: object {target} is missing") from None
        if digest.hexdigest() != name:
            self.verified.pop(name, None)
            raise CheckpointCorrupt(
                f"{where}: object {target} is corrupt (its SHA-256 is {digest.hexdigest()}, expected its name)"
            )
        self.verified[name] = size
        return size

    def verify_many(self, items: list[tuple[str, str]]) -> None:
        """Re-hash every ``(name, where)`` on :data:`VERIFY_THREADS` threads; the first failure in order raises."""
        if len(items) <= 1:
            for name, where in items:
                self.verify(name, where)
            return
        with ThreadPoolExecutor(max_workers=min(VERIFY_THREADS, len(items))) as pool:
            futures = [pool.submit(self.verify, name, where) for name, where in items]
        for future in futures:
            future.result()

    def verified_cheaply(self, name: str) -> bool:
        """True if this process verified ``name`` and the file still has that size (no re-hash)."""
        size = self.verified.get(name)
        if size is None:
            return False
        try:
            return (self.directory / name).stat().st_size == size
        except FileNotFoundError:
            return False

    def read(self, name: str, where: str = "object") -> bytes:
        """The bytes of object ``name``, verified against its name."""
        target = self.path(name, where)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise CheckpointCorrupt(f"{where}: object {target} is missing") from None
        if hashlib.sha256(data).hexdigest() != name:
            raise CheckpointCorrupt(f"{where}: object {target} is corrupt (SHA-256 does not match its name)")
        self.verified[name] = len(data)
        return data


def _file_chunks(handle: BinaryIO) -> Iterator[memoryview]:
    """Read an open binary file in :data:`CHUNK_BYTES` pieces."""
    while True:
        block = handle.read(CHUNK_BYTES)
        if not block:
            return
        yield memoryview(block)


def _write_hashing_and_sync(fd: int, chunks: Iterable[memoryview], faults: FaultHook) -> tuple[str, int]:
    """Write ``chunks`` to ``fd`` and fsync it while a helper thread hashes them; returns (hex digest, size).

    The helper runs hash updates in order; at most :data:`MAX_PENDING_CHUNKS` chunks wait for it, which bounds
    the memory a streamed put holds. Hashing overlaps both the writes and the fsync.
    """
    digest = hashlib.sha256()
    size = 0
    pending: deque[Future[None]] = deque()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="qcheckpoint-hash") as pool:
        for index, chunk in enumerate(chunks):
            pending.append(pool.submit(digest.update, chunk))
            while len(pending) > MAX_PENDING_CHUNKS:
                pending.popleft().result()
            write_all(fd, chunk)
            size += chunk.nbytes
            if index == 0:
                faults.reach("object.mid_write")
        faults.reach("object.before_fsync")
        os.fsync(fd)
        for future in pending:
            future.result()
    return digest.hexdigest(), size
