"""One safetensors shard written as its tensors arrive, holding none of them in memory.

A safetensors file starts with a header that names every tensor and its byte range, and lays the bytes out in
:func:`~qformats.checkpoint.safetensors_io.file_order` (wider dtypes first, then by name), not in arrival order.
:class:`StreamedShard` appends each tensor's stored bytes to a hidden body file next to the shard as it arrives
(with its crc32), and :meth:`StreamedShard.finish` writes the header and copies the byte ranges from the body in
file order (``os.copy_file_range`` where the kernel has it, 64 MiB reads otherwise), fsyncs and renames: the same
bytes as :func:`~qformats.checkpoint.safetensors_io.write_safetensors` of the whole dict, with at most one tensor
in memory instead of the shard (up to ``max_shard_size``: 4 GB by default). The price is writing each byte twice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from .durable_files import open_new, temp_path, write_all
from .fault_points import reach
from .safetensors_io import file_order, header_bytes, stored_array, tensor_crc32

#: bytes copied per read when the kernel cannot copy between the files itself
COPY_CHUNK = 64 * 2**20


def open_body(path: Path) -> int:
    """Create the body file ``path`` for reading and writing (fails if it exists; mode 0o600: it never outlives
    the shard)."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)


class StreamedShard:
    """A shard at ``path`` being filled: :meth:`add` each tensor, then :meth:`finish` (or :meth:`abort`).

    ``metadata``: the header's ``__metadata__``; ``dtypes``: name -> stored dtype tag
    (:func:`~qformats.checkpoint.safetensors_io.stored_array`); ``checksums``: record each tensor's crc32.
    """

    def __init__(
        self,
        path: Path,
        metadata: Mapping[str, str] | None = None,
        dtypes: Mapping[str, str] | None = None,
        checksums: bool = False,
    ) -> None:
        self.path = Path(path)
        self.metadata = dict(metadata or {})
        self.dtypes = dtypes
        self.checksums = checksums
        #: ``(name, safetensors dtype, shape, byte count, offset in the body)`` in arrival order
        self.entries: list[tuple[str, str, tuple[int, ...], int, int]] = []
        self.crc32s: dict[str, int] = {}
        self.size = 0
        self._body_path = temp_path(self.path.with_name(self.path.name + ".body"))
        self._body = open_body(self._body_path)

    @property
    def names(self) -> list[str]:
        """The tensor names added so far, in arrival order."""
        return [entry[0] for entry in self.entries]

    def add(self, name: str, value: np.ndarray) -> None:
        """Append tensor ``name``'s stored bytes to the body (``value`` may be freed once this returns)."""
        st_dtype, data = stored_array(name, value, self.dtypes)
        if self.checksums:
            self.crc32s[name] = tensor_crc32(st_dtype, data.shape, data)
        write_all(self._body, data.reshape(-1).view(np.uint8).data)
        self.entries.append((name, st_dtype, tuple(data.shape), data.nbytes, self.size))
        self.size += data.nbytes

    def finish(self) -> int:
        """Write the shard (header, then the bytes in file order), fsync, rename it into place, delete the body;
        returns the file's bytes. On failure nothing is left at ``path`` and the temporaries are removed."""
        order = file_order([(name, st, shape) for name, st, shape, _, _ in self.entries])
        placed = [self.entries[i] for i in order]
        head = header_bytes(
            [(name, st, shape, nbytes) for name, st, shape, nbytes, _ in placed],
            self.metadata,
            self.crc32s if self.checksums else None,
        )
        tmp = temp_path(self.path)
        try:
            out = open_new(tmp)
            try:
                write_all(out, head)
                for _, _, _, nbytes, offset in placed:
                    _copy_range(self._body, out, offset, nbytes)
                os.fsync(out)
            finally:
                os.close(out)
            reach("file.fsynced")
            os.replace(tmp, self.path)
            reach("file.renamed")
        except BaseException:
            tmp.unlink(missing_ok=True)
            self.abort()
            raise
        self.abort()  # the body is no longer needed
        return len(head) + self.size

    def abort(self) -> None:
        """Close and delete the body file (idempotent)."""
        if self._body >= 0:
            os.close(self._body)
            self._body = -1
        self._body_path.unlink(missing_ok=True)


def _copy_range(source: int, target: int, offset: int, count: int) -> None:
    """Append ``count`` bytes of file ``source`` from ``offset`` to file ``target`` (at its current position)."""
    copy = getattr(os, "copy_file_range", None)
    while count > 0 and copy is not None:
        try:
            done = copy(source, target, count, offset)
        except OSError:  # a file system or kernel without it: copy through memory from here on
            break
        if done == 0:
            break
        offset += done
        count -= done
    while count > 0:
        data = os.pread(source, min(count, COPY_CHUNK), offset)
        if not data:
            raise OSError(f"body file ended {count} bytes early at offset {offset}")
        write_all(target, data)
        offset += len(data)
        count -= len(data)
