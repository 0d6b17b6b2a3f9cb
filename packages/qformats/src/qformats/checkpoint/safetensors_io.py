"""A pure-numpy safetensors reader and writer with strict header validation (no code execution).

File format: 8-byte little-endian header length ``N``; ``N`` bytes of UTF-8 JSON (padded with spaces);
then the data buffer. The JSON maps each tensor name to ``{"dtype", "shape", "data_offsets": [begin,
end]}`` (offsets relative to the buffer) plus an optional ``"__metadata__"`` string->string map.

The reader refuses: a file shorter than its header, a header that is not a JSON object, duplicate tensor
names, unknown dtypes, a byte range that disagrees with dtype x shape, ranges outside the buffer or
overlapping, and a buffer with holes or trailing bytes (the checks of the reference library), and, when
the file records them (``__metadata__["qformats.crc32"]``, written by the checkpoint writer), a tensor
whose dtype, shape or bytes do not match their crc32. Every error names the file and the tensor.
Tensors are read through ``numpy.memmap`` one at a time.

The writer lays tensors out like the reference writer (by dtype, widest first, then by name), writes
compact JSON with ``__metadata__`` first, pads the header with spaces to a multiple of 8, and writes
to a temporary name in the same directory (mode from the umask), fsyncs it, then renames it atomically.
"""

from __future__ import annotations

import json
import math
import os
import struct
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CheckpointFormatError
from ..file_access import open_regular
from .dtypes import (
    DTYPE_RANK,
    SAFETENSORS_DTYPES,
    bf16_bits_to_float32,
    float32_to_bf16_bits,
    safetensors_dtype,
)
from .durable_files import open_new, temp_path
from .fault_points import reach

MAX_HEADER_BYTES = 100 * 1024 * 1024
#: ``__metadata__`` key holding ``{"tensor": crc32}`` (compact JSON) of every tensor's stored bytes.
CHECKSUM_KEY = "qformats.crc32"


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lives: dtype name, shape and absolute byte range in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    start: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.start


def tensor_crc32(dtype: str, shape: tuple[int, ...], data: np.ndarray) -> int:
    """crc32 of ``"<dtype>:<shape>"`` followed by the tensor's stored (little-endian) bytes."""
    head = zlib.crc32(f"{dtype}:{list(shape)}".encode("ascii"))
    return zlib.crc32(np.ascontiguousarray(data).reshape(-1).view(np.uint8).data, head)


def _reject_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise CheckpointFormatError(f"duplicate tensor name {key!r} in the header")
        seen[key] = value
    return seen


def _error(path: Path, message: str) -> CheckpointFormatError:
    return CheckpointFormatError(f"{path}: {message}")


class SafetensorsFile:
    """A validated safetensors file; :meth:`load` reads one tensor (memory-mapped) at a time."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with open_regular(self.path) as fh:  # a FIFO or device is refused, never blocked on
            size = os.fstat(fh.fileno()).st_size
            prefix = fh.read(8)
            if len(prefix) < 8:
                raise _error(self.path, f"truncated: {size} bytes, shorter than the 8-byte header length")
            (header_len,) = struct.unpack("<Q", prefix)
            if header_len > MAX_HEADER_BYTES or 8 + header_len > size:
                raise _error(
                    self.path, f"header length {header_len} exceeds the file ({size} bytes): truncated or corrupt"
                )
            raw = fh.read(header_len)
        try:
            header = json.loads(raw.decode("utf-8"), object_pairs_hook=_reject_duplicates)
        except CheckpointFormatError as exc:
            raise _error(self.path, str(exc)) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise _error(self.path, f"header is not valid UTF-8 JSON ({exc})") from None
        except RecursionError:
            raise _error(self.path, "header JSON is nested too deeply; expected a flat object of tensors") from None
        if not isinstance(header, dict):
            raise _error(self.path, f"header must be a JSON object, found {type(header).__name__}")
        self.data_start = 8 + header_len
        self.metadata = self._read_metadata(header.pop("__metadata__", None))
        self.tensors = self._read_entries(header, size - self.data_start)
        self.checksums = self._read_checksums()

    def _read_metadata(self, meta: object) -> dict[str, str]:
        if meta is None:
            return {}
        if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
            raise _error(self.path, "__metadata__ must map strings to strings")
        return dict(meta)

    def _read_checksums(self) -> dict[str, int]:
        """The ``qformats.crc32`` map when present: exactly one non-negative integer per tensor."""
        raw = self.metadata.get(CHECKSUM_KEY)
        if raw is None:
            return {}
        try:
            sums = json.loads(raw)
        except (json.JSONDecodeError, RecursionError):
            raise _error(self.path, f"__metadata__[{CHECKSUM_KEY!r}] is not JSON; expected tensor -> crc32") from None
        if (
            not isinstance(sums, dict)
            or set(sums) != set(self.tensors)
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32 for v in sums.values())
        ):
            raise _error(
                self.path, f"__metadata__[{CHECKSUM_KEY!r}] must give one crc32 for each of the file's tensors"
            )
        return sums

    def _read_entries(self, header: dict[str, object], buffer_len: int) -> dict[str, TensorInfo]:
        infos: dict[str, TensorInfo] = {}
        for name, entry in header.items():
            if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
                raise _error(self.path, f"tensor {name!r}: entry must have exactly dtype, shape, data_offsets")
            dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
            if dtype not in SAFETENSORS_DTYPES:
                raise _error(self.path, f"tensor {name!r}: unknown dtype {dtype!r}")
            if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
                raise _error(
                    self.path, f"tensor {name!r}: shape must be a list of non-negative integers, found {shape!r}"
                )
            if (
                not isinstance(offsets, list)
                or len(offsets) != 2
                or not all(isinstance(o, int) and o >= 0 for o in offsets)
                or offsets[1] < offsets[0]
            ):
                raise _error(self.path, f"tensor {name!r}: data_offsets must be [begin, end], found {offsets!r}")
            expected = math.prod(shape) * SAFETENSORS_DTYPES[dtype][1]
            if offsets[1] - offsets[0] != expected:
                raise _error(
                    self.path,
                    f"tensor {name!r}: header says {offsets[1] - offsets[0]} bytes, {dtype} x {shape} needs {expected}",
                )
            if offsets[1] > buffer_len:
                raise _error(
                    self.path,
                    f"tensor {name!r}: bytes [{offsets[0]}, {offsets[1]}) lie past the data "
                    f"({buffer_len} bytes): truncated",
                )
            infos[name] = TensorInfo(
                name, dtype, tuple(shape), self.data_start + offsets[0], self.data_start + offsets[1]
            )
        cursor = self.data_start
        for info in sorted(infos.values(), key=lambda i: (i.start, i.end)):
            if info.start != cursor:
                kind = "overlaps another tensor" if info.start < cursor else "leaves a hole before it"
                raise _error(self.path, f"tensor {info.name!r}: byte range {kind}")
            cursor = info.end
        if cursor != self.data_start + buffer_len:
            raise _error(self.path, f"{self.data_start + buffer_len - cursor} trailing bytes after the last tensor")
        return infos

    def keys(self) -> list[str]:
        """Tensor names in header order."""
        return list(self.tensors)

    def load(self, name: str) -> np.ndarray:
        """Read tensor ``name`` (BF16 as exact float32; FP8 as raw uint8). Raises naming file and tensor."""
        try:
            info = self.tensors[name]
        except KeyError:
            raise _error(self.path, f"no tensor named {name!r}") from None
        np_dtype = SAFETENSORS_DTYPES[info.dtype][0]
        if info.nbytes == 0:
            arr = np.zeros(info.shape, dtype=np_dtype)
        else:
            with open_regular(self.path) as fh:
                mm = np.memmap(fh, dtype=np.uint8, mode="r", offset=info.start, shape=(info.nbytes,))
                arr = np.array(mm.view(np_dtype).reshape(info.shape), copy=True)
                del mm
        expected = self.checksums.get(name)
        if expected is not None and tensor_crc32(info.dtype, info.shape, arr) != expected:
            raise _error(
                self.path, f"tensor {name!r}: dtype, shape or bytes do not match the crc32 recorded when it was written"
            )
        return bf16_bits_to_float32(arr) if info.dtype == "BF16" else arr

    def load_all(self) -> dict[str, np.ndarray]:
        """Every tensor of the file (for small files and tests)."""
        return {name: self.load(name) for name in self.tensors}


#: FP8 dtype tags a uint8 array of bit patterns can be written under (its bytes unchanged; read back as uint8).
FP8_TAGS = ("F8_E4M3", "F8_E5M2")


def stored_array(name: str, value: np.ndarray, dtypes: Mapping[str, str] | None = None) -> tuple[str, np.ndarray]:
    """``(safetensors dtype, little-endian C-ordered array of the stored bytes)`` of tensor ``name``.

    ``dtypes`` maps names to ``"BF16"`` (float32 stored as bfloat16) or an FP8 tag of :data:`FP8_TAGS` (uint8 bit
    patterns stored under that dtype, as engines read FP8 weights)."""
    arr = np.asarray(value)
    wanted = (dtypes or {}).get(name)
    if wanted == "BF16":
        data = float32_to_bf16_bits(arr)
        st_dtype = "BF16"
    elif wanted in FP8_TAGS:
        if arr.dtype != np.uint8:
            raise CheckpointFormatError(
                f"tensor {name!r}: {wanted} is written from uint8 bit patterns, found {arr.dtype}"
            )
        data, st_dtype = arr, wanted
    else:
        st_dtype = safetensors_dtype(arr, name)
        data = arr
    return st_dtype, np.asarray(data, dtype=data.dtype.newbyteorder("<"), order="C")  # keeps a 0-d tensor 0-d


def file_order(entries: list[tuple[str, str, tuple[int, ...]]]) -> list[int]:
    """Positions of ``(name, safetensors dtype, shape)`` entries in the order their bytes lie in the file: wider
    dtypes first (alignment), then by name."""
    return sorted(range(len(entries)), key=lambda i: (-DTYPE_RANK[entries[i][1]], entries[i][0]))


def header_bytes(
    entries: list[tuple[str, str, tuple[int, ...], int]],
    metadata: Mapping[str, str] | None = None,
    crc32s: Mapping[str, int] | None = None,
) -> bytes:
    """The header (length prefix included) of a file holding ``(name, safetensors dtype, shape, byte count)``
    entries in this order; ``crc32s`` (name -> :func:`tensor_crc32`) adds ``__metadata__["qformats.crc32"]``."""
    if crc32s is not None:
        metadata = {**(metadata or {}), CHECKSUM_KEY: json.dumps(dict(crc32s), separators=(",", ":"), sort_keys=True)}
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in sorted(metadata.items())}
    offset = 0
    for name, st_dtype, shape, nbytes in entries:
        header[name] = {"dtype": st_dtype, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def encode_safetensors(
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
    dtypes: Mapping[str, str] | None = None,
    checksums: bool = False,
) -> tuple[bytes, list[tuple[str, np.ndarray]]]:
    """Header bytes (length prefix included) and the ordered ``(name, little-endian array)`` payload.

    ``dtypes``: see :func:`stored_array`. ``checksums`` adds ``__metadata__["qformats.crc32"]``: each tensor's
    :func:`tensor_crc32` (dtype, shape and stored bytes) (readers verify it on load; other readers ignore the key).
    """
    stored = [(name, *stored_array(name, value, dtypes)) for name, value in tensors.items()]
    entries = [stored[i] for i in file_order([(name, st, data.shape) for name, st, data in stored])]
    sums = {name: tensor_crc32(st, data.shape, data) for name, st, data in entries} if checksums else None
    head = header_bytes([(name, st, data.shape, data.nbytes) for name, st, data in entries], metadata, sums)
    return head, [(name, data) for name, _, data in entries]


def write_safetensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, np.ndarray],
    metadata: Mapping[str, str] | None = None,
    dtypes: Mapping[str, str] | None = None,
    checksums: bool = False,
) -> int:
    """Write a safetensors file atomically (temp name in the same directory, fsync, rename); returns bytes.

    ``checksums``: record each tensor's crc32 (see :func:`encode_safetensors`).

    The file is created with mode ``0o666`` minus the umask (not ``tempfile``'s 0600).
    """
    target = Path(path)
    head, payload = encode_safetensors(tensors, metadata, dtypes, checksums)
    tmp = temp_path(target)
    fd = open_new(tmp)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(head)
            for _, data in payload:
                fh.write(np.ascontiguousarray(data).reshape(-1).view(np.uint8).data)
            fh.flush()
            os.fsync(fh.fileno())
        reach("file.fsynced")
        os.replace(tmp, target)
        reach("file.renamed")
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return len(head) + sum(data.nbytes for _, data in payload)
