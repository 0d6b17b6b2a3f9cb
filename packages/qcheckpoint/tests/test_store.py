"""The store's contract: puts, commits, loads, retention, identity and cursor rules, resume policy, collection."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from qcheckpoint import (
    CheckpointConfig,
    CheckpointCorrupt,
    CheckpointLeaseError,
    CheckpointStore,
    CommitError,
    IdentityMismatchError,
    ResumePolicyError,
    encode_continuation,
)

ID = {"model": "m", "bits": 4, "plan": [0, 1, 2]}


def commit_steps(store: CheckpointStore, first: int, last: int, artifacts: dict[str, str] | None = None) -> list[str]:
    """Commit cursors first..last, one new artifact each; returns the generation ids."""
    artifacts = dict(artifacts or {})
    generations = []
    for cursor in range(first, last + 1):
        artifacts[f"layer.{cursor}"] = store.put(f"artifact {cursor}".encode() * 100)
        cont = store.put(encode_continuation({"cursor": cursor}))
        generations.append(store.commit(ID, cursor, cont, artifacts))
    return generations


def test_put_names_objects_by_sha256_and_dedupes(root: Path) -> None:
    with CheckpointStore(root) as store:
        data = b"hello" * 1000
        name = store.put(data)
        assert name == hashlib.sha256(data).hexdigest()
        assert (root / "objects" / name).read_bytes() == data
        assert store.put(bytearray(data)) == name
        assert store.put_stream([data[:7], memoryview(data[7:])]) == name
        source = root.parent / "source.bin"
        source.write_bytes(data)
        assert store.put_file(source) == name
        assert store.put_file(root / "objects" / name) == name
        assert store.read(name) == data
        assert store.object_path(name) == root / "objects" / name
        assert [p.name for p in (root / "objects").iterdir()] == [name]


def test_put_stream_of_many_chunks(root: Path) -> None:
    chunks = [bytes([i]) * (1024 * 1024 + i) for i in range(12)]  # more chunks than the hash queue holds
    with CheckpointStore(root) as store:
        name = store.put_stream(iter(chunks))
        assert name == hashlib.sha256(b"".join(chunks)).hexdigest()
        assert store.read(name) == b"".join(chunks)
        assert store.put_stream([]) == hashlib.sha256(b"").hexdigest()
    assert not [p for p in (root / "objects").iterdir() if p.name.endswith(".tmp")]


def test_put_rewrites_a_corrupt_existing_object(root: Path) -> None:
    with CheckpointStore(root) as store:
        name = store.put(b"payload" * 50)
    target = root / "objects" / name
    target.write_bytes(b"garbage")
    with CheckpointStore(root) as store:
        assert store.put(b"payload" * 50) == name
    assert target.read_bytes() == b"payload" * 50


def test_read_rejects_bad_names_and_detects_corruption(root: Path) -> None:
    with CheckpointStore(root) as store:
        name = store.put(b"abc")
        for bad in ["../CURRENT", "A" * 64, name[:-1], name + "0", "/etc/passwd"]:
            with pytest.raises(CommitError, match="64-character"):
                store.read(bad)
        (root / "objects" / name).write_bytes(b"abd")
        with pytest.raises(CheckpointCorrupt, match="corrupt"):
            store.read(name)
        (root / "objects" / name).unlink()
        with pytest.raises(CheckpointCorrupt, match="missing"):
            store.object_path(name)


def test_fresh_commit_load_roundtrip(root: Path) -> None:
    with CheckpointStore(root) as store:
        assert store.load(ID) is None
        assert store.generations() == ()
        gens = commit_steps(store, 1, 3)
        assert store.generations() == (gens[2], gens[1])
    current = json.loads((root / "CURRENT").read_text())
    assert current == {"version": 1, "generations": [gens[2], gens[1]]}
    manifest = json.loads((root / "objects" / gens[2]).read_bytes())
    assert (
        manifest["cursor"] == 3
        and manifest["identity"] == ID
        and sorted(manifest["artifacts"])
        == [
            "layer.1",
            "layer.2",
            "layer.3",
        ]
    )
    with CheckpointStore(root) as store:
        loaded = store.load(ID)
        assert loaded is not None
        assert (loaded.generation, loaded.cursor, loaded.skipped) == (gens[2], 3, ())
        assert loaded.decode_continuation() == {"cursor": 3}
        assert loaded.artifact_path("layer.2").read_bytes() == b"artifact 2" * 100
        with pytest.raises(KeyError, match=r"layer\.9"):
            loaded.artifact_path("layer.9")
        # Resume: continue from the loaded cursor with the loaded artifacts.
        commit_steps(store, 4, 4, loaded.artifacts)
        again = store.load(ID)
        assert again is not None and again.cursor == 4 and len(again.artifacts) == 4


def test_keep_last_retains_that_many_generations(root: Path) -> None:
    with CheckpointStore(root, keep_last=3) as store:
        store.load(ID)
        gens = commit_steps(store, 1, 5)
        assert store.generations() == (gens[4], gens[3], gens[2])


def test_commit_rules(root: Path) -> None:
    with CheckpointStore(root) as store:
        cont = store.put(b"c")
        with pytest.raises(CommitError, match="load"):
            store.commit(ID, 1, cont, {})
        store.load(ID)
        store.commit(ID, 1, cont, {})
        with pytest.raises(CommitError, match="advance past 1"):
            store.commit(ID, 1, cont, {})
        with pytest.raises(CommitError, match="bits"):
            store.commit({**ID, "bits": 8}, 2, cont, {})
        with pytest.raises(CommitError, match="cursor"):
            store.commit(ID, True, cont, {})
        with pytest.raises(CommitError, match="continuation"):
            store.commit(ID, 2, "../../etc", {})
        with pytest.raises(CommitError, match="missing"):
            store.commit(ID, 2, cont, {"w": "0" * 64})
        with pytest.raises(CommitError, match="non-empty"):
            store.commit(ID, 2, cont, {"": cont})
        with pytest.raises(CommitError, match="JSON"):
            store.commit({"x": float("nan")}, 2, cont, {})
        assert len(store.generations()) == 1


def test_identity_mismatch_names_fields_and_never_falls_back(root: Path) -> None:
    with CheckpointStore(root) as store:
        store.load(ID)
        commit_steps(store, 1, 2)
    with CheckpointStore(root) as store:
        with pytest.raises(IdentityMismatchError, match="bits, model") as info:
            store.load({**ID, "bits": 8, "model": "other"})
        assert info.value.fields == ("bits", "model")
        with pytest.raises(IdentityMismatchError) as info:
            store.load({**ID, "extra": 1})
        assert info.value.fields == ("extra",)
        # A projection can drop fields from the comparison (e.g. device UUIDs).
        loaded = store.load({**ID, "uuid": "x"}, project=lambda d: {k: v for k, v in d.items() if k != "uuid"})
        assert loaded is not None and loaded.cursor == 2


def test_resume_policies(root: Path) -> None:
    with CheckpointStore(root, resume="required") as store:
        with pytest.raises(ResumePolicyError, match="required"):
            store.load(ID)
    with CheckpointStore(root, resume="never") as store:
        assert store.load(ID) is None
        commit_steps(store, 1, 1)
    with CheckpointStore(root, resume="never") as store:
        with pytest.raises(ResumePolicyError, match="never"):
            store.load(ID)
    config = CheckpointConfig(path="auto", resume="required", keep_last=3)
    with CheckpointStore.from_config(config, default_root=root) as store:
        assert store.keep_last == 3
        loaded = store.load(ID)
        assert loaded is not None and loaded.cursor == 1


def test_operations_need_the_lease(root: Path) -> None:
    store = CheckpointStore(root)
    with pytest.raises(CheckpointLeaseError, match="lease"):
        store.put(b"x")
    with store:
        store.put(b"x")
    with pytest.raises(CheckpointLeaseError):
        store.load(ID)


def test_collect_removes_unreachable_and_temporaries_only(root: Path) -> None:
    with CheckpointStore(root, keep_last=2) as store:
        store.load(ID)
        gens = commit_steps(store, 1, 3)
        pending = store.put(b"not yet committed")
        stray = root / "objects" / ".0123456789abcdef0123456789abcdef.tmp"
        stray.write_bytes(b"partial")
        root_stray = root / ".CURRENT.fedcba9876543210fedcba9876543210.tmp"
        root_stray.write_bytes(b"partial")
        unrelated = root / "attempt-1"
        unrelated.mkdir()
        report = store.collect()
        assert report.ok and report.freed_bytes > 0
        assert gens[0] in report.removed_objects
        assert sorted(Path(p).name for p in report.removed_temporaries) == sorted([stray.name, root_stray.name])
        assert (root / "objects" / pending).exists() and unrelated.exists()
        # Everything the retained generations need is still there.
        loaded = store.load(ID)
        assert loaded is not None and loaded.cursor == 3
        store.commit(ID, 4, pending, loaded.artifacts)


def test_collect_failure_is_a_warning_not_an_error(root: Path, caplog: pytest.LogCaptureFixture) -> None:
    with CheckpointStore(root) as store:
        store.load(ID)
        commit_steps(store, 1, 2)
        (root / "CURRENT").write_text("{broken")
        report = store.collect()
    assert not report.ok and "CURRENT" in report.errors[0]
    assert any("garbage collection" in r.message for r in caplog.records)
    assert len(list((root / "objects").iterdir())) > 0


def test_collect_with_an_unreadable_manifest_deletes_nothing(root: Path) -> None:
    with CheckpointStore(root) as store:
        store.load(ID)
        commit_steps(store, 1, 2)
        bogus = store.put(b"not a manifest")
        (root / "CURRENT").write_text(json.dumps({"version": 1, "generations": [bogus, *store.generations()]}))
        before = sorted(p.name for p in (root / "objects").iterdir())
        report = store.collect()
    assert not report.ok and "not valid JSON" in report.errors[0]
    assert sorted(p.name for p in (root / "objects").iterdir()) == before
