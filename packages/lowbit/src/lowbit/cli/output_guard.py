"""Checks on ``quantize --out`` made before any model is loaded, and the output lock held for the run.

* ``--checkpoint-dir`` equal to, inside, or containing ``--out`` is refused: the save replaces ``--out``
  as a whole and the run ends advising to delete the checkpoint directory.
* The directory that will hold ``--out`` must accept a new file (probed by creating and deleting one), so
  a read-only or missing location fails in one line before hours of quantization, not after.
* Its free space must cover the estimated result: the source's weight bytes x ``bits / 16`` (a float16 or
  bfloat16 source; dense layers kept as they are make the result larger, a float32 source smaller).
* :func:`output_lock` holds qformats' exclusive directory lock on ``--out`` for the whole run, so a second
  run on the same ``--out`` fails at once instead of silently losing one result.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

from ..errors import UsageError
from .report_tables import human_bytes, path_bytes


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def check_separate(out: str, checkpoint_dir: str | None) -> None:
    """Refuse a ``--checkpoint-dir`` that is ``--out``, lies inside it, or holds it."""
    if checkpoint_dir is None:
        return
    a, b = Path(out).resolve(), Path(checkpoint_dir).resolve()
    if a == b or a in b.parents or b in a.parents:
        relation = "is" if a == b else ("is inside" if a in b.parents else "contains")
        raise UsageError(
            f"--checkpoint-dir {checkpoint_dir} {relation} --out {out}: the save replaces --out as a whole and "
            "the checkpoint directory is deleted after the run; expected two separate directories"
        )


def check_writable(out: str) -> Path:
    """The existing directory that will hold ``--out`` after probing that a file can be created there."""
    target = Path(out).absolute()
    home = _nearest_existing(target.parent)
    if not home.is_dir():
        raise UsageError(f"--out {out}: {home} is not a directory; expected a directory path to write to")
    probe = home / f".lowbit-write-probe-{uuid.uuid4().hex}"
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise UsageError(
            f"--out {out}: cannot write in {home} ({exc.strerror}); expected a writable location"
        ) from None
    os.close(fd)
    probe.unlink()
    return home


def check_free_space(out: str, home: Path, source: str, bits: int) -> None:
    """Refuse when ``home``'s file system has less free space than the estimated result."""
    estimate = path_bytes(source) * bits // 16
    free = shutil.disk_usage(home).free
    if free < estimate:
        raise UsageError(
            f"--out {out}: {human_bytes(free)} free on {home}, the result needs about {human_bytes(estimate)} "
            f"(source weights x {bits}/16); free space or choose another location"
        )


def check_output(out: str, checkpoint_dir: str | None, source: str, bits: int) -> None:
    """Every check above, in order."""
    check_separate(out, checkpoint_dir)
    home = check_writable(out)
    check_free_space(out, home, source, bits)


def output_lock(out: str):  # type: ignore[no-untyped-def]
    """qformats' exclusive lock on ``--out`` (re-entered by the save; raises naming the holder's pid)."""
    from qformats.checkpoint.directory_lock import directory_lock

    return directory_lock(out)
