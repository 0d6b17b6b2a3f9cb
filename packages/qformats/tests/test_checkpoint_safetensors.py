"""The pure-numpy safetensors reader/writer: byte parity with the reference library, corrupt files refused."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from qformats.checkpoint.dtypes import bf16_bits_to_float32, float32_to_bf16_bits
from qformats.checkpoint.safetensors_io import SafetensorsFile, write_safetensors
from qformats.errors import CheckpointFormatError

TENSORS = {
    "b.qweight": np.arange(12, dtype=np.int32).reshape(3, 4),
    "a.scales": np.full((2, 3), 0.5, np.float16),
    "z.flag": np.array([1, 0, 1], np.uint8),
    "c.weight": np.arange(3, dtype=np.float32),
    "d.words": np.arange(4, dtype=np.int16),
    "e.big": np.arange(2, dtype=np.int64),
}


def test_writer_matches_the_reference_library_byte_for_byte(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    save_file(TENSORS, str(tmp_path / "ref.safetensors"), metadata={"format": "pt"})
    write_safetensors(tmp_path / "ours.safetensors", TENSORS, metadata={"format": "pt"})
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()


def test_reader_reads_reference_files(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    save_file(TENSORS, str(tmp_path / "ref.safetensors"))
    f = SafetensorsFile(tmp_path / "ref.safetensors")
    assert sorted(f.keys()) == sorted(TENSORS)
    for name, arr in TENSORS.items():
        got = f.load(name)
        assert got.dtype == arr.dtype and np.array_equal(got, arr)


def test_bf16_is_read_exactly_and_written_back(tmp_path: Path) -> None:
    values = np.array([1.0, -2.5, 3.140625, 0.0], np.float32)
    bits = float32_to_bf16_bits(values)
    assert np.array_equal(bf16_bits_to_float32(bits), values)
    write_safetensors(tmp_path / "b.safetensors", {"w": values}, dtypes={"w": "BF16"})
    f = SafetensorsFile(tmp_path / "b.safetensors")
    assert f.tensors["w"].dtype == "BF16"
    assert np.array_equal(f.load("w"), values)


def test_fp8_bit_patterns_are_written_under_their_fp8_dtype(tmp_path: Path) -> None:
    bits = np.array([[0x38, 0xB8], [0x7E, 0x00]], np.uint8)  # e4m3fn: 1.0, -1.0, 448.0, 0.0
    write_safetensors(tmp_path / "f.safetensors", {"w": bits}, dtypes={"w": "F8_E4M3"})
    f = SafetensorsFile(tmp_path / "f.safetensors")
    assert f.tensors["w"].dtype == "F8_E4M3"
    assert np.array_equal(f.load("w"), bits)  # read back as the same bytes
    with pytest.raises(CheckpointFormatError, match="tensor 'w': F8_E5M2 is written from uint8 bit patterns"):
        write_safetensors(tmp_path / "g.safetensors", {"w": bits.astype(np.float32)}, dtypes={"w": "F8_E5M2"})


def _raw(header: dict[str, object], data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


def _corrupt(tmp_path: Path, payload: bytes) -> Path:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(payload)
    return path


def test_truncated_file_is_refused(tmp_path: Path) -> None:
    write_safetensors(tmp_path / "ok.safetensors", TENSORS)
    data = (tmp_path / "ok.safetensors").read_bytes()
    with pytest.raises(CheckpointFormatError, match="truncated"):
        SafetensorsFile(_corrupt(tmp_path, data[:-5]))
    with pytest.raises(CheckpointFormatError, match="header length"):
        SafetensorsFile(_corrupt(tmp_path, data[:40]))
    with pytest.raises(CheckpointFormatError, match="8-byte"):
        SafetensorsFile(_corrupt(tmp_path, data[:3]))


def test_header_that_lies_about_sizes_is_refused(tmp_path: Path) -> None:
    header = {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}
    with pytest.raises(CheckpointFormatError, match=r"'w'.*12 bytes.*needs 16"):
        SafetensorsFile(_corrupt(tmp_path, _raw(header, b"\0" * 12)))


def test_duplicate_tensor_names_are_refused(tmp_path: Path) -> None:
    text = b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}'
    payload = struct.pack("<Q", len(text)) + text + b"\0\0"
    with pytest.raises(CheckpointFormatError, match="duplicate tensor name 'w'"):
        SafetensorsFile(_corrupt(tmp_path, payload))


def test_overlaps_holes_and_trailing_bytes_are_refused(tmp_path: Path) -> None:
    overlap = {
        "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
        "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]},
    }
    with pytest.raises(CheckpointFormatError, match="overlaps"):
        SafetensorsFile(_corrupt(tmp_path, _raw(overlap, b"\0" * 3)))
    hole = {"a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}
    with pytest.raises(CheckpointFormatError, match="hole"):
        SafetensorsFile(_corrupt(tmp_path, _raw(hole, b"\0" * 2)))
    ok = {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}
    with pytest.raises(CheckpointFormatError, match="trailing"):
        SafetensorsFile(_corrupt(tmp_path, _raw(ok, b"\0" * 4)))


def test_bad_entries_are_named(tmp_path: Path) -> None:
    unknown = {"q": {"dtype": "Q4", "shape": [1], "data_offsets": [0, 1]}}
    with pytest.raises(CheckpointFormatError, match=r"'q'.*unknown dtype"):
        SafetensorsFile(_corrupt(tmp_path, _raw(unknown, b"\0")))
    with pytest.raises(CheckpointFormatError, match="JSON object"):
        SafetensorsFile(_corrupt(tmp_path, _raw([1, 2], b"")))  # type: ignore[arg-type]
    with pytest.raises(CheckpointFormatError, match="UTF-8 JSON"):
        SafetensorsFile(_corrupt(tmp_path, struct.pack("<Q", 4) + b"{{{{"))


def test_failed_write_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(CheckpointFormatError, match="'bad'"):
        write_safetensors(tmp_path / "x.safetensors", {"ok": np.zeros(2), "bad": np.zeros(2, np.complex64)})
    assert list(tmp_path.iterdir()) == []


def test_a_scalar_tensor_keeps_shape_empty_like_the_reference_library(tmp_path: Path) -> None:
    """An FP8 per-tensor ``weight_scale_inv`` is 0-d; it must not come back as shape (1,)."""
    from safetensors.numpy import load_file, save_file

    scalar = {"m.weight_scale_inv": np.array(np.float32(2.5))}
    save_file(scalar, str(tmp_path / "ref.safetensors"))
    write_safetensors(tmp_path / "ours.safetensors", scalar)
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    assert load_file(str(tmp_path / "ours.safetensors"))["m.weight_scale_inv"].shape == ()
