"""Fuzzed CURRENT files, manifests and continuation blobs raise only qcheckpoint's named errors."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from qcheckpoint import CheckpointCorrupt, CheckpointStore, ContinuationError, decode_continuation, encode_continuation

ID = {"run": "fuzz"}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=70),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=12), c, max_size=5),
    max_leaves=12,
)
hexnames = st.text("0123456789abcdef", min_size=64, max_size=64)
current_like = st.fixed_dictionaries(
    {"version": st.sampled_from([1, 1, 2, "1", None]), "generations": st.lists(hexnames | json_values, max_size=3)}
)
manifest_like = st.fixed_dictionaries(
    {
        "version": st.sampled_from([1, 1, 0, True]),
        "identity": st.sampled_from([ID, {}, None, []]),
        "cursor": st.sampled_from([1, 0, -1, 1.0, True, "1"]),
        "continuation": hexnames | json_values,
        "artifacts": st.dictionaries(st.text(max_size=5), hexnames | json_values, max_size=2) | json_values,
    }
).flatmap(
    lambda d: st.sets(st.sampled_from(sorted(d)), max_size=1).map(lambda drop: {k: d[k] for k in d if k not in drop})
)
documents = st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode())


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz") / "ckpt"
    with CheckpointStore(root) as store:
        store.load(ID)
        store.commit(ID, 1, store.put(encode_continuation({"c": 1})), {"a": store.put(b"a")})
    return root


def load_or_named_error(root: Path) -> None:
    with CheckpointStore(root) as store:
        try:
            loaded = store.load(ID)
        except CheckpointCorrupt:
            return
        assert loaded is None or loaded.cursor >= 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(documents, current_like.map(lambda d: json.dumps(d).encode())))
def test_fuzzed_current(seeded: Path, data: bytes) -> None:
    original = (seeded / "CURRENT").read_bytes()
    try:
        (seeded / "CURRENT").write_bytes(data)
        load_or_named_error(seeded)
    finally:
        (seeded / "CURRENT").write_bytes(original)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(documents, manifest_like.map(lambda d: json.dumps(d).encode())))
def test_fuzzed_manifest(seeded: Path, data: bytes) -> None:
    original = (seeded / "CURRENT").read_bytes()
    with CheckpointStore(seeded) as store:
        name = store.put(data)  # a well-named object holding an arbitrary "manifest"
    try:
        (seeded / "CURRENT").write_text(json.dumps({"version": 1, "generations": [name]}))
        with CheckpointStore(seeded) as store:
            with pytest.raises(CheckpointCorrupt, match=name):
                store.load(ID)
    finally:
        (seeded / "CURRENT").write_bytes(original)


BLOB = encode_continuation({"a": [np.arange(6, dtype=np.float32), {"k": (1, "s", None)}], 3: np.ones(2, np.int8)})


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(BLOB) - 1), st.integers(1, 255)), min_size=1, max_size=4), st.booleans())
def test_damaged_blobs_raise_only_continuation_error(edits: list[tuple[int, int]], cut: bool) -> None:
    data = bytearray(BLOB)
    for position, xor in edits:
        data[position] ^= xor
    if cut:
        del data[edits[0][0] :]
    try:
        decode_continuation(bytes(data))
    except ContinuationError:
        pass


@settings(max_examples=80, deadline=None)
@given(json_values)
def test_arbitrary_trees_in_metadata_raise_only_continuation_error(tree: object) -> None:
    header = json.dumps({"__metadata__": {"continuation": json.dumps({"version": 2, "tree": tree})}}).encode()
    try:
        decode_continuation(struct.pack("<Q", len(header)) + header)
    except ContinuationError:
        pass


@pytest.mark.parametrize(
    ("header", "body", "message"),
    [
        ({"0": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4, "outside the data section"),
        ({"0": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4, "expected 8"),
        ({"0": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8, "unsupported dtype"),
        (
            {
                "0": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                "1": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]},
            },
            b"\0" * 3,
            "overlap",
        ),
        ({"0": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}}, b"\0" * 2, "cover"),
        ({"__metadata__": {"x": "y"}}, b"", "no 'continuation'"),
        ({"__metadata__": {"continuation": '{"version":1,"tree":["scalar",1]}'}}, b"", "version 1"),
        ({"__metadata__": {"continuation": '{"version":2,"tree":["pickle","os.system"]}'}}, b"", "unknown node tag"),
        ({"__metadata__": {"continuation": '{"version":2,"tree":["scalar",NaN]}'}}, b"", "not valid JSON"),
        (
            {
                "__metadata__": {"continuation": '{"version":2,"tree":["list",[]]}'},
                "0": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
            },
            b"\0",
            "not referenced",
        ),
        (
            {"__metadata__": {"continuation": '{"version":2,"tree":["tensor",{"name":"0","kind":"numpy"}]}'}},
            b"",
            "tensor node needs",
        ),
        (
            {
                "__metadata__": {
                    "continuation": '{"version":2,"tree":["dict",'
                    '[[["scalar",1],["scalar",2]],[["scalar",1],["scalar",3]]]]}'
                }
            },
            b"",
            "duplicate dict key",
        ),
    ],
)
def test_malformed_blobs_name_the_problem(header: dict[str, object], body: bytes, message: str) -> None:
    text = json.dumps(header).encode()
    with pytest.raises(ContinuationError, match=message):
        decode_continuation(struct.pack("<Q", len(text)) + text + body)


def test_header_length_beyond_the_blob() -> None:
    with pytest.raises(ContinuationError, match="exceeds"):
        decode_continuation(struct.pack("<Q", 2**60) + b"{}")
    with pytest.raises(ContinuationError, match="too short"):
        decode_continuation(b"\x01")
