"""Publishing a checkpoint directory atomically: a sibling staging directory swapped in by rename.

:func:`staged_directory` creates ``<parent>/.<name>.lowbit-stage-<uuid>`` (mode from the umask, or the
old target's mode), lets the caller write and verify every file there, and on a clean exit fsyncs every
file in it and publishes it:

* target absent (or an empty directory): one ``rename(staging, target)``, then the parent is fsynced;
* target present: top-level entries of the old target that the new write does not replace (other than old
  weight shards and the index, and the ``INCOMPLETE`` marker) are carried over as hard links, the staging
  directory is fsynced, then ``renameat2(RENAME_EXCHANGE)`` swaps the two names in one step and the parent
  is fsynced; the old checkpoint, now under the staging name, is deleted.

At every instant the target therefore is the old complete checkpoint or the new one. Where the kernel or
file system cannot exchange (not Linux, or ``EINVAL``/``ENOSYS``/``EOPNOTSUPP``), the swap is two
renames: an ``INCOMPLETE`` marker is first written into the old target (readers refuse a marked
directory by name), the old target is renamed to ``.<name>.lowbit-old-<uuid>``, the staging directory
renamed into place, and the old one deleted; the fallback is logged. A journal written before the first
rename and removed after the last step (:mod:`.publish_journal`) lets the next save restore the old
checkpoint when a crash fell between the two renames, or finish the cleanup. On any failure before the
swap the staging directory is deleted and the target is untouched. Under the directory lock, before the
write, the journal is replayed and staging directories of a crashed save are removed; an old directory
the journal does not account for is never deleted (it may hold the user's files), only named in a warning.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import CheckpointFormatError
from .directory_lock import directory_lock
from .durable_files import DIR_MODE, fsync_dir, write_file_durable
from .fault_points import reach
from .publish_journal import JOURNAL_TAG, clear_journal, recover, write_journal

log = logging.getLogger(__name__)

INCOMPLETE_MARKER = "INCOMPLETE"
STAGE_TAG = ".lowbit-stage-"
OLD_TAG = ".lowbit-old-"
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_NO_EXCHANGE = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EXDEV}


def _is_replaced_weight(name: str) -> bool:
    """Old weight shards and the index never survive a new write (the new write has its own)."""
    return (name.startswith("model") and name.endswith(".safetensors")) or name == "model.safetensors.index.json"


def _is_marker(name: str) -> bool:
    """The ``INCOMPLETE`` marker, or the temporary it is written through (never carried over)."""
    return name == INCOMPLETE_MARKER or (name.startswith(f".{INCOMPLETE_MARKER}.") and name.endswith(".tmp"))


@contextmanager
def staged_directory(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield an empty staging directory; publish it over ``target`` when the block ends without error."""
    target = Path(target).resolve()  # publish at the directory a link (or a linked parent) points to
    if target.exists() and not target.is_dir():
        raise CheckpointFormatError(f"{target}: exists and is not a directory; expected a checkpoint directory")
    with directory_lock(target):
        recover(target, _is_marker, _is_replaced_weight)
        _remove_leftovers(target)
        staging = target.with_name(f".{target.name}{STAGE_TAG}{uuid.uuid4().hex}")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.mkdir(staging, DIR_MODE)
        if target.is_dir():
            os.chmod(staging, stat.S_IMODE(target.stat().st_mode))
        reach("stage.created")
        try:
            yield staging
            publish(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        _remove_leftovers(target)


def publish(staging: Path, target: Path) -> None:
    """Swap the complete ``staging`` directory in as ``target`` (see the module docstring)."""
    _fsync_files(staging)
    if target.is_dir() and any(target.iterdir()):
        _carry_over(target, staging)
        fsync_dir(staging)
        reach("publish.before_swap")
        if _exchange(staging, target):
            reach("publish.swapped")
            fsync_dir(target.parent)
            reach("publish.published")
            _delete_tree(staging)
            fsync_dir(target.parent)
            return
        _swap_with_marker(staging, target)
        return
    fsync_dir(staging)
    reach("publish.before_rename")
    os.rename(staging, target)
    reach("publish.renamed")
    fsync_dir(target.parent)
    reach("publish.published")


def _fsync_files(staging: Path) -> None:
    """fsync every regular file the caller put into ``staging`` (a tokenizer's files, a report ...)."""
    for root, _, files in os.walk(staging):
        for name in files:
            path = os.path.join(root, name)
            if os.path.islink(path):
                continue
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths with ``renameat2``; False when the platform cannot."""
    libc = ctypes.CDLL(None, use_errno=True) if os.name == "posix" else None
    renameat2 = getattr(libc, "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in _NO_EXCHANGE:
        return False
    raise OSError(code, f"cannot exchange {a} and {b}: {os.strerror(code)}")


def _swap_with_marker(staging: Path, target: Path) -> None:
    """The non-atomic swap: mark the old target incomplete, move it aside, move the new one in."""
    log.warning(
        "%s: this file system cannot exchange directories atomically; replacing it with two renames "
        "(an %s marker guards the window)",
        target,
        INCOMPLETE_MARKER,
    )
    old = target.with_name(f".{target.name}{OLD_TAG}{uuid.uuid4().hex}")
    write_journal(target, old, staging)
    reach("fallback.journaled")
    write_file_durable(target / INCOMPLETE_MARKER, b"an interrupted save was replacing this checkpoint\n")
    fsync_dir(target)
    reach("fallback.marked")
    os.rename(target, old)
    reach("fallback.moved_old")
    os.rename(staging, target)
    reach("fallback.moved_new")
    fsync_dir(target.parent)
    reach("publish.published")
    _delete_tree(old)
    fsync_dir(target.parent)
    clear_journal(target)
    reach("fallback.journal_cleared")


def _carry_over(old: Path, staging: Path) -> None:
    """Hard-link the old target's entries the new write does not replace into ``staging``."""
    for entry in sorted(old.iterdir()):
        name = entry.name
        if _is_marker(name) or _is_replaced_weight(name) or (staging / name).exists():
            continue
        _link_tree(entry, staging / name)
    reach("publish.carried")


def _link_tree(source: Path, dest: Path) -> None:
    if source.is_symlink():
        os.symlink(os.readlink(source), dest)
    elif source.is_dir():
        os.mkdir(dest, DIR_MODE)
        shutil.copymode(source, dest)
        for child in sorted(source.iterdir()):
            _link_tree(child, dest / child.name)
    else:
        try:
            os.link(source, dest)
        except OSError:
            shutil.copy2(source, dest)


def _delete_tree(path: Path) -> None:
    """Delete a directory tree file by file (each unlink is a fault point)."""
    for root, dirs, files in os.walk(path, topdown=False):
        for name in files:
            os.unlink(os.path.join(root, name))
            reach("cleanup.unlink")
        for name in dirs:
            child = os.path.join(root, name)
            if os.path.islink(child):
                os.unlink(child)
            else:
                os.rmdir(child)
    os.rmdir(path)
    reach("cleanup.removed")


def _remove_leftovers(target: Path) -> None:
    """Delete staging directories a crashed save left behind; old directories are only named.

    An old directory the journal did not account for (see :mod:`.publish_journal`) may hold files the
    user put there, so it is never deleted here.
    """
    if not target.parent.is_dir():
        return
    prefix = f".{target.name}"
    journal_temp = f"..{target.name}{JOURNAL_TAG}."
    for entry in target.parent.iterdir():
        if entry.name.startswith(journal_temp) and entry.name.endswith(".tmp") and entry.is_file():
            entry.unlink()  # the temporary of a journal whose write was interrupted (no rename happened)
            continue
        if not entry.name.startswith(prefix) or not entry.is_dir() or entry.is_symlink():
            continue
        tail = entry.name[len(prefix) :]
        if tail.startswith(STAGE_TAG):
            log.warning("%s: removing the leftover of an interrupted save", entry)
            shutil.rmtree(entry)
        elif tail.startswith(OLD_TAG):
            log.warning("%s: the previous checkpoint of an interrupted save, kept (delete it when done)", entry)
