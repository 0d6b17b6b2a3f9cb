"""Native .gguf container: byte-exact against gguf-py's writer, and robust against malformed files."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from qformats.gguf_file import GGUFFileError, GGUFReader, GGUFValue, ValueType, write_gguf
from qformats.layouts.gguf import encode_rows


def _reference_file(path: Path, alignment: int | None = None) -> dict[str, np.ndarray]:
    """A small file written by gguf-py: every scalar type, arrays, F32/F16 and two block types."""
    rng = np.random.default_rng(0)
    tensors = {
        "a.weight": rng.standard_normal((3, 64)).astype(np.float32),
        "b.weight": rng.standard_normal((2, 5)).astype(np.float16),
        "c.weight": rng.standard_normal((4, 64)).astype(np.float32),
        "d.weight": rng.standard_normal((2, 256)).astype(np.float32),
    }
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    w.add_uint8("x.u8", 7)
    w.add_int8("x.i8", -7)
    w.add_uint16("x.u16", 65535)
    w.add_int16("x.i16", -300)
    w.add_uint32("x.u32", 4_000_000_000)
    w.add_int32("x.i32", -5)
    w.add_float32("x.f32", 0.1)
    w.add_uint64("x.u64", 2**63 + 5)
    w.add_int64("x.i64", -(2**40))
    w.add_float64("x.f64", 1e-300)
    w.add_bool("x.bool", True)
    w.add_string("x.str", "héllo")
    w.add_array("x.strs", ["a", "", "ü"])
    w.add_array("x.ints", [1, 2, 3])
    w.add_array("x.floats", [0.5, -1.5])
    w.add_tensor("a.weight", tensors["a.weight"])
    w.add_tensor("b.weight", tensors["b.weight"])
    w.add_tensor("c.weight", gguf.quantize(tensors["c.weight"], Q.Q4_1), raw_dtype=Q.Q4_1)
    w.add_tensor("d.weight", gguf.quantize(tensors["d.weight"], Q.Q8_0), raw_dtype=Q.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


@pytest.mark.parametrize("alignment", [None, 64])
def test_reads_gguf_py_files_and_rewrites_them_byte_for_byte(tmp_path: Path, alignment: int | None) -> None:
    src = tmp_path / "ref.gguf"
    dense = _reference_file(src, alignment)
    r = GGUFReader(src)
    assert r.version == 3 and r.alignment == (alignment or 32)
    assert r.value("general.architecture") == "llama"
    assert r.metadata["x.u64"].type == ValueType.UINT64 and r.value("x.u64") == 2**63 + 5
    assert r.value("x.i8") == -7 and r.value("x.bool") is True and r.value("x.str") == "héllo"
    assert r.value("x.strs") == ["a", "", "ü"] and r.value("x.ints") == [1, 2, 3]
    assert r.metadata["x.f32"].type == ValueType.FLOAT32 and r.value("x.f64") == 1e-300
    assert np.array_equal(r.array("a.weight"), dense["a.weight"])
    assert np.array_equal(r.array("b.weight"), dense["b.weight"])
    assert r.tensors["c.weight"].shape == (4, 64) and r.tensors["c.weight"].type.name == "Q4_1"
    assert np.array_equal(r.array("c.weight"), encode_rows(dense["c.weight"], "Q4_1"))
    assert np.array_equal(r.dequantize("d.weight"), gguf.dequantize(r.raw("d.weight"), Q.Q8_0).reshape(2, 256))
    assert not r.raw("a.weight").flags.writeable
    out = tmp_path / "ours.gguf"
    tensors = {n: (r.array(n) if i.type.block_size == 1 else (r.array(n), i.type.name)) for n, i in r.tensors.items()}
    write_gguf(out, r.metadata, tensors)
    assert out.read_bytes() == src.read_bytes()


def test_writer_infers_types_and_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "w.gguf"
    q = encode_rows(np.ones((2, 256), np.float32), "Q6_K")
    write_gguf(
        path,
        {
            "general.architecture": "llama",
            "n": 3,
            "big": 2**40,
            "f": 0.25,
            "ok": False,
            "toks": ["a", "b"],
            "typed": GGUFValue(ValueType.UINT16, 9),
        },
        {"w": (q, "Q6_K"), "v": np.arange(4, dtype=np.float32)},
        alignment=128,
    )
    r = GGUFReader(path)
    assert r.alignment == 128 and r.metadata["general.alignment"].type == ValueType.UINT32
    assert r.metadata["n"].type == ValueType.INT32 and r.metadata["big"].type == ValueType.INT64
    assert r.metadata["typed"].type == ValueType.UINT16 and r.value("ok") is False
    assert np.allclose(r.dequantize("w"), 1.0, atol=0.02) and r.tensors["w"].shape == (2, 256)
    assert (r.data_offset + r.tensors["v"].offset) % 128 == 0
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def _header(n_tensors: int, n_kv: int, version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def _string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _one_tensor(dims: tuple[int, ...], ggml: int, offset: int) -> bytes:
    return (
        _string("t")
        + struct.pack("<I", len(dims))
        + struct.pack(f"<{len(dims)}Q", *dims)
        + struct.pack("<IQ", ggml, offset)
    )


def _expect(tmp_path: Path, data: bytes, match: str) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        with pytest.raises(GGUFFileError, match=match) as info:
            GGUFReader(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value)
    assert peak < 8 * 2**20, f"reader allocated {peak} bytes for a malformed file"


HUGE = 2**62


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"GGML" + bytes(20), "bad magic"),
        (b"GGUF" + bytes(4), "shorter than the 24-byte"),
        (_header(0, 0, version=1), "version 1 .*unsupported"),
        (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
        (_header(0, HUGE), "metadata entries"),
        (_header(HUGE, 0), "tensor infos"),
        (_header(0, 1) + struct.pack("<Q", HUGE) + bytes(64), "metadata key #0 .*bytes"),
        (_header(0, 1) + _string("k") + struct.pack("<I", 99) + bytes(8), "unknown value type 99"),
        (_header(0, 1) + _string("k") + struct.pack("<IIQ", 9, 6, HUGE), r"k'.*FLOAT32\)"),
        (_header(0, 1) + _string("k") + struct.pack("<IIQ", 9, 8, HUGE), "strings"),
        (_header(0, 1) + _string("k") + struct.pack("<IQ", 8, HUGE), "bytes"),
        (_header(0, 2) + (_string("k") + struct.pack("<IB", 0, 1)) * 2, "appears twice"),
        (_header(0, 1) + _string("k") + struct.pack("<IB", 7, 2), "bool stored as 2"),
        (_header(0, 1) + _string("k") + struct.pack("<IIQQ", 9, 8, 1, 2) + b"\xff\xfe" + bytes(8), "not valid UTF-8"),
        (_header(0, 1) + _string("general.alignment") + struct.pack("<II", 4, 48), "power-of-two"),
        (_header(1, 0) + _one_tensor((32,) * 5, 0, 0) + bytes(64), "5 dims"),
        (_header(1, 0) + _one_tensor((32, 2), 77, 0) + bytes(64), "ggml type id 77"),
        (_header(1, 0) + _one_tensor((33, 2), 2, 0) + bytes(64), "not a multiple of the Q4_0 block size 32"),
        (_header(1, 0) + _one_tensor((HUGE, HUGE), 0, 0) + bytes(64), "truncated file or a lying size"),
        (_header(1, 0) + _one_tensor((4,), 0, 8) + bytes(64), "offset 8 is not a multiple of the alignment 32"),
        (_header(1, 0) + _one_tensor((4,), 0, 2**40) + bytes(64), "needs bytes"),
    ],
)
def test_malformed_files_get_named_errors_without_big_allocations(tmp_path: Path, data: bytes, match: str) -> None:
    _expect(tmp_path, data, match)


def test_every_truncation_of_a_valid_file_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "ref.gguf"
    _reference_file(src)
    full = src.read_bytes()
    cut = tmp_path / "cut.gguf"
    for size in sorted({0, 10, 24, 30, 60, 200, 400, 600, len(full) - 1, *range(24, len(full) - 1, 97)}):
        cut.write_bytes(full[:size])
        with pytest.raises(GGUFFileError):
            GGUFReader(cut)


def test_unknown_tensor_name_is_named(tmp_path: Path) -> None:
    src = tmp_path / "ref.gguf"
    _reference_file(src)
    with pytest.raises(GGUFFileError, match="no tensor named 'zzz'"):
        GGUFReader(src).raw("zzz")
