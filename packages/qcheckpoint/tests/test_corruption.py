"""Damage each kind of file (flip a byte, truncate, delete): fallback to an older generation, or a named error."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest
from qcheckpoint import CheckpointCorrupt, CheckpointStore, ResumePolicyError, encode_continuation

ID = {"run": "corruption"}


def flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def delete(path: Path) -> None:
    path.unlink()


DAMAGE: dict[str, Callable[[Path], None]] = {"flip": flip, "truncate": truncate, "delete": delete}


def build(root: Path) -> dict[str, dict[str, str]]:
    """Three generations (keep_last=3); returns per cursor its generation, continuation and new artifact."""
    info: dict[str, dict[str, str]] = {}
    with CheckpointStore(root, keep_last=3) as store:
        store.load(ID)
        artifacts: dict[str, str] = {}
        for cursor in (1, 2, 3):
            artifacts[f"a{cursor}"] = store.put(bytes([cursor]) * 5000)
            cont = store.put(encode_continuation({"cursor": cursor}))
            gen = store.commit(ID, cursor, cont, artifacts)
            info[str(cursor)] = {"generation": gen, "continuation": cont, "artifact": artifacts[f"a{cursor}"]}
    return info


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("kind", ["generation", "continuation", "artifact"])
def test_corrupt_newest_generation_falls_back(
    root: Path, kind: str, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    info = build(root)
    DAMAGE[damage](root / "objects" / info["3"][kind])
    with caplog.at_level(logging.WARNING, logger="qcheckpoint"), CheckpointStore(root) as store:
        loaded = store.load(ID)
    assert loaded is not None and loaded.cursor == 2
    assert [s.generation for s in loaded.skipped] == [info["3"]["generation"]]
    assert info["3"][kind] in loaded.skipped[0].reason
    assert loaded.decode_continuation() == {"cursor": 2}
    assert any("fell back" in r.message for r in caplog.records)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_shared_artifact_damaged_leaves_no_complete_generation(root: Path, damage: str) -> None:
    info = build(root)
    DAMAGE[damage](root / "objects" / info["1"]["artifact"])
    with CheckpointStore(root) as store, pytest.raises(CheckpointCorrupt, match="no complete published checkpoint"):
        store.load(ID)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_malformed_current_fails_closed(root: Path, damage: str) -> None:
    build(root)
    current = root / "CURRENT"
    if damage == "flip":
        data = bytearray(current.read_bytes())
        data[0] ^= 0x01  # '{' becomes 'z'
        current.write_bytes(bytes(data))
    else:
        truncate(current)
    with CheckpointStore(root) as store, pytest.raises(CheckpointCorrupt, match="CURRENT"):
        store.load(ID)


def test_current_naming_a_missing_generation_falls_back(root: Path) -> None:
    info = build(root)
    text = (root / "CURRENT").read_text()
    (root / "CURRENT").write_text(text.replace(info["3"]["generation"], "f" * 64))
    with CheckpointStore(root) as store:
        loaded = store.load(ID)
    assert loaded is not None and loaded.cursor == 2 and loaded.skipped[0].generation == "f" * 64


def test_deleted_current_is_a_fresh_start_unless_required(root: Path) -> None:
    build(root)
    (root / "CURRENT").unlink()
    with CheckpointStore(root) as store:
        assert store.load(ID) is None
    with CheckpointStore(root, resume="required") as store, pytest.raises(ResumePolicyError, match="required"):
        store.load(ID)


def test_directory_is_never_scanned_for_generations(root: Path) -> None:
    info = build(root)
    (root / "CURRENT").write_text('{"version":1,"generations":["' + info["1"]["generation"] + '"]}')
    with CheckpointStore(root) as store:
        loaded = store.load(ID)
    assert loaded is not None and loaded.cursor == 1


def test_commit_drops_previous_generations_that_no_longer_verify(root: Path) -> None:
    info = build(root)
    flip(root / "objects" / info["2"]["continuation"])
    with CheckpointStore(root, keep_last=3) as store:
        loaded = store.load(ID)
        assert loaded is not None and loaded.cursor == 3
        cont = store.put(encode_continuation({"cursor": 4}))
        gen4 = store.commit(ID, 4, cont, loaded.artifacts)
        assert store.generations() == (gen4, info["3"]["generation"], info["1"]["generation"])


def test_stray_temporaries_and_damaged_owner_file_do_not_matter(root: Path) -> None:
    build(root)
    (root / ".CURRENT.0123456789abcdef0123456789abcdef.tmp").write_text("{partial")
    (root / "objects" / ".0123456789abcdef0123456789abcdef.tmp").write_bytes(b"half an object")
    (root / "writer.owner").write_text("garbage")
    with CheckpointStore(root) as store:
        loaded = store.load(ID)
    assert loaded is not None and loaded.cursor == 3
