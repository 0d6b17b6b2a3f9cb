"""Fault injection: a save over an existing checkpoint killed (SIGKILL) at every rename/unlink/fsync point.

A clean save is traced once to list every ``(point, n)`` it reaches; then, for each, a forked child
saves the new checkpoint over a fresh copy of the old one with ``QFORMATS_FAULT=<point>#<n>`` and is
killed there. The directory must then load as the old or the new checkpoint, bit for bit (every tensor
and both config files), and a later save must succeed and clean up what the crash left behind.
"""

from __future__ import annotations

import os
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest
from checkpoint_fixtures import GPTQ_CONFIG, module_tensors
from qformats.checkpoint import Checkpoint, fault_points, publish, write_checkpoint
from qformats.errors import CheckpointFormatError
from random_weights import random_weight

MODEL_CONFIG = {"model_type": "llama", "hidden_size": 128}


def _tensors(seed: int, layers: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    weights = {f"model.layers.{i}.mlp.up_proj": random_weight(rng, 64, 128, 4, 32, sym=True) for i in range(layers)}
    return module_tensors("gptq", weights)


def _save(path: Path, tensors: dict[str, np.ndarray], shard: str) -> None:
    write_checkpoint(path, tensors, quantize_config=GPTQ_CONFIG, model_config=MODEL_CONFIG, max_shard_size=shard)


def _snapshot(path: Path) -> tuple[dict[str, bytes], dict[str, bytes]]:
    """Every tensor's bytes as loaded, and the bytes of both config files."""
    ckpt = Checkpoint(path)
    tensors = {name: ckpt.load(name).tobytes() + str(ckpt.load(name).dtype).encode() for name in ckpt.weight_map}
    configs = {name: (path / name).read_bytes() for name in ("config.json", "quantize_config.json")}
    return tensors, configs


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """Old checkpoint (several shards + index + a foreign file), new tensors (1 shard), their snapshots, the trace."""
    root = tmp_path_factory.mktemp("faults")
    old, new = _tensors(1, 3), _tensors(2, 2)
    _save(root / "old", old, "10KB")
    (root / "old" / "README.md").write_text("kept across saves\n", encoding="utf-8")
    _save(root / "new", new, "4GB")
    return {"root": root, "new_tensors": new, "old": _snapshot(root / "old"), "new": _snapshot(root / "new")}


def _trace(scenario: dict[str, object], tag: str) -> list[tuple[str, int]]:
    """Every ``(point, n)`` a clean save of the new checkpoint over the old one reaches."""
    root = scenario["root"]
    assert isinstance(root, Path)
    traced = root / f"traced-{tag}" / "out"
    shutil.copytree(root / "old", traced)
    with fault_points.recording() as trace:
        _save(traced, scenario["new_tensors"], "4GB")  # type: ignore[arg-type]
    return list(trace)


def _killed_save(target: Path, tensors: dict[str, np.ndarray], point: str, hit: int) -> None:
    pid = os.fork()
    if pid == 0:  # the child: save and die at the fault point
        code = 3
        try:
            os.environ[fault_points.ENV_VAR] = f"{point}#{hit}"
            _save(target, tensors, "4GB")
        except BaseException:  # the child must never return into pytest
            code = 4
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"{point}#{hit}: not killed ({status})"


def _run_every_point(scenario: dict[str, object], tag: str, trace: list[tuple[str, int]]) -> dict[str, int]:
    root = scenario["root"]
    assert isinstance(root, Path)
    outcomes = {"old": 0, "new": 0, "refused": 0}
    for i, (point, hit) in enumerate(trace):
        target = root / f"{tag}-{i}" / "out"
        shutil.copytree(root / "old", target)
        _killed_save(target, scenario["new_tensors"], point, hit)  # type: ignore[arg-type]
        try:
            found = _snapshot(target)
        except CheckpointFormatError as exc:
            assert tag == "fallback", f"{point}#{hit}: the exchange path must never leave a refused directory: {exc}"
            outcomes["refused"] += 1
        else:
            assert found in (scenario["old"], scenario["new"]), f"{point}#{hit}: neither the old nor the new checkpoint"
            outcomes["old" if found == scenario["old"] else "new"] += 1
            assert (target / "README.md").read_text(encoding="utf-8") == "kept across saves\n"
        # the next save succeeds, restores or removes what the crash left and publishes the new checkpoint,
        # with the user's file carried over (a crash between the fallback renames must not lose it)
        _save(target, scenario["new_tensors"], "4GB")  # type: ignore[arg-type]
        assert _snapshot(target) == scenario["new"]
        assert (target / "README.md").read_text(encoding="utf-8") == "kept across saves\n", f"{point}#{hit}: lost"
        assert sorted(p.name for p in target.parent.iterdir()) == [".out.lock", "out"], f"{point}#{hit}: leftovers"
        shutil.rmtree(target.parent)
    return outcomes


def test_save_killed_at_every_point_leaves_the_old_or_the_new_checkpoint(scenario: dict[str, object]) -> None:
    trace = _trace(scenario, "exchange")
    points = {point for point, _ in trace}
    assert {"file.fsynced", "file.renamed", "fsync_dir", "publish.before_swap", "publish.swapped"} <= points
    assert {"cleanup.unlink", "cleanup.removed", "publish.published", "stage.shard_named"} <= points
    # every file of the old checkpoint (shards, index, configs, the README) is unlinked one by one
    old_files = list((scenario["root"] / "old").iterdir())  # type: ignore[operator]
    assert len(old_files) >= 6
    assert len([n for p, n in trace if p == "cleanup.unlink"]) == len(old_files)
    outcomes = _run_every_point(scenario, "exchange", trace)
    print(f"exchange: {len(trace)} fault points, outcomes {outcomes}")
    assert outcomes["old"] > 0 and outcomes["new"] > 0 and outcomes["refused"] == 0


def test_without_an_atomic_exchange_the_window_is_marked_incomplete(
    scenario: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    trace = _trace(scenario, "fallback")
    wanted = {"fallback.journaled", "fallback.marked", "fallback.moved_old", "fallback.moved_new"}
    assert wanted <= {p for p, _ in trace}
    outcomes = _run_every_point(scenario, "fallback", trace)
    print(f"fallback: {len(trace)} fault points, outcomes {outcomes}")
    assert outcomes["old"] > 0 and outcomes["new"] > 0 and outcomes["refused"] > 0


def test_an_incomplete_marker_is_refused_by_name(tmp_path: Path) -> None:
    _save(tmp_path / "c", _tensors(1, 1), "4GB")
    (tmp_path / "c" / publish.INCOMPLETE_MARKER).write_text("x", encoding="utf-8")
    with pytest.raises(CheckpointFormatError, match="INCOMPLETE marker"):
        Checkpoint(tmp_path / "c")


def test_a_crash_between_the_fallback_renames_is_undone_by_the_next_save(
    scenario: dict[str, object], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Killed after the old checkpoint was moved aside: the next save restores it (user file included) first."""
    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    target = tmp_path / "out"
    shutil.copytree(scenario["root"] / "old", target)  # type: ignore[operator]
    (target / "notes").mkdir()
    (target / "notes" / "mine.txt").write_text("user data\n", encoding="utf-8")
    _killed_save(target, scenario["new_tensors"], "fallback.moved_old", 1)  # type: ignore[arg-type]
    assert not target.exists()
    assert any(p.name.endswith(".lowbit-journal") for p in tmp_path.iterdir())
    with pytest.raises(CheckpointFormatError, match=r"an interrupted save left \.out\.lowbit-journal"):
        Checkpoint(target)
    _save(target, scenario["new_tensors"], "4GB")  # type: ignore[arg-type]
    assert _snapshot(target) == scenario["new"]
    assert (target / "notes" / "mine.txt").read_text(encoding="utf-8") == "user data\n"
    assert (target / "README.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".out.lock", "out"]


def test_an_old_directory_without_a_journal_is_never_deleted(scenario: dict[str, object], tmp_path: Path) -> None:
    """A ``.lowbit-old-`` sibling the journal does not account for may hold the user's files: kept, not removed."""
    target = tmp_path / "out"
    _save(target, scenario["new_tensors"], "4GB")  # type: ignore[arg-type]
    stray = tmp_path / f".out{publish.OLD_TAG}0123"
    stray.mkdir()
    (stray / "mine.txt").write_text("user data\n", encoding="utf-8")
    _save(target, scenario["new_tensors"], "4GB")  # type: ignore[arg-type]
    assert (stray / "mine.txt").read_text(encoding="utf-8") == "user data\n"


def test_a_symlink_and_its_target_contend_for_one_lock(tmp_path: Path) -> None:
    """The lock is taken on the resolved path: a run on ``link`` blocks a run on ``real`` (and vice versa)."""
    import subprocess
    import sys
    import textwrap

    from qformats.checkpoint.directory_lock import DirectoryLockedError, directory_lock

    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    holder = textwrap.dedent(
        f"""
        import sys
        from qformats.checkpoint.directory_lock import directory_lock
        with directory_lock({str(tmp_path / "link")!r}):
            print("held", flush=True)
            sys.stdin.readline()
        """
    )
    child = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(DirectoryLockedError, match="another run"):
            with directory_lock(real):
                pass
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=120)
    with directory_lock(tmp_path / "link"):  # released: both names lock again
        pass
