"""``CheckpointStore``: lease, objects, commit (manifest + atomic CURRENT), verified load with fallback, collect.

Layout under the root: ``writer.lock``, ``writer.owner``, ``objects/<sha256>``, ``CURRENT`` and temporaries
``.<name>.<uuid32>.tmp`` / ``objects/.<uuid32>.tmp``. See docs/checkpointing.md for the publication order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from .collect import CollectReport, collect_unreachable
from .config import RESUME_MODES, CheckpointConfig
from .durable_io import atomic_replace_file, ensure_dir
from .errors import CheckpointConfigError, CheckpointCorrupt, CommitError, IdentityMismatchError, ResumePolicyError
from .faults import FaultHook
from .lease import WriterLease
from .loaded import LoadedGeneration, SkippedGeneration
from .objects import Chunk, ObjectStore, require_object_name
from .records import Manifest, decode_current, encode_current, json_identity

logger = logging.getLogger("qcheckpoint")

CURRENT_NAME = "CURRENT"
OBJECTS_DIR = "objects"

Identity = Mapping[str, Any]
Projection = Callable[[dict[str, Any]], Mapping[str, Any]]


def differing_fields(stored: Mapping[str, Any], current: Mapping[str, Any]) -> tuple[str, ...]:
    """Top-level keys whose presence or value differs between two identities, sorted."""
    keys = set(stored) | set(current)
    return tuple(sorted(k for k in keys if k not in stored or k not in current or stored[k] != current[k]))


class CheckpointStore:
    """A transactional checkpoint store rooted at ``root``; enter it (``with store:``) to take the writer lease.

    ``resume``: ``auto`` | ``required`` | ``never`` (applied by :meth:`load`). ``keep_last``: generations kept in
    CURRENT (>= 2). ``faults``: fault-injection hook; by default parsed from ``QCHECKPOINT_FAULT``.
    """

    def __init__(
        self, root: str | Path, *, resume: str = "auto", keep_last: int = 2, faults: FaultHook | None = None
    ) -> None:
        if resume not in RESUME_MODES:
            raise CheckpointConfigError(f"CheckpointStore resume: expected one of {RESUME_MODES}, found {resume!r}")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 2:
            raise CheckpointConfigError(f"CheckpointStore keep_last: expected an int >= 2, found {keep_last!r}")
        self.root = Path(root)
        self.resume = resume
        self.keep_last = keep_last
        self.faults = FaultHook.from_env() if faults is None else faults
        self._lease = WriterLease(self.root)
        self._objects = ObjectStore(self.root / OBJECTS_DIR, self.faults)
        self._reset_session()

    @classmethod
    def from_config(
        cls, config: CheckpointConfig, default_root: str | Path | None = None, *, faults: FaultHook | None = None
    ) -> CheckpointStore:
        """A store for ``config``; ``default_root`` is used when ``config.path`` is ``"auto"``."""
        return cls(config.resolve_root(default_root), resume=config.resume, keep_last=config.keep_last, faults=faults)

    def _reset_session(self) -> None:
        self._loaded = False
        self._identity: dict[str, Any] | None = None
        self._last_cursor: int | None = None
        self._complete: dict[str, Manifest] = {}
        self._pinned: set[str] = set()

    # ----- lease ---------------------------------------------------------------------------------------------
    def __enter__(self) -> CheckpointStore:
        ensure_dir(self.root)
        self._lease.acquire()
        try:
            ensure_dir(self.root / OBJECTS_DIR)
        except BaseException:
            self._lease.release()
            raise
        self._reset_session()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._lease.release()
        self._reset_session()

    @property
    def objects_dir(self) -> Path:
        """``root/objects``."""
        return self.root / OBJECTS_DIR

    # ----- objects -------------------------------------------------------------------------------------------
    def put(self, data: Chunk) -> str:
        """Store bytes as an immutable object; returns its SHA-256 hex name."""
        self._lease.check("put")
        name = self._objects.put_bytes(data)
        self._pinned.add(name)
        return name

    def put_file(self, path: str | Path) -> str:
        """Store a copy of a file (streamed in 8 MiB chunks); returns its object name."""
        self._lease.check("put_file")
        name = self._objects.put_file(Path(path))
        self._pinned.add(name)
        return name

    def put_stream(self, chunks: Iterable[Chunk]) -> str:
        """Store the concatenation of byte chunks without holding it in memory; returns its object name."""
        self._lease.check("put_stream")
        name = self._objects.put_chunks(chunks)
        self._pinned.add(name)
        return name

    def read(self, name: str) -> bytes:
        """A verified object's bytes (missing or corrupt → :class:`CheckpointCorrupt`)."""
        self._lease.check("read")
        return self._objects.read(require_object_name(name, "read", CommitError))

    def object_path(self, name: str) -> Path:
        """A verified object's path (re-hashed before returning)."""
        self._lease.check("object_path")
        self._objects.verify(require_object_name(name, "object_path", CommitError), "object_path")
        return self._objects.directory / name

    # ----- CURRENT and generations ---------------------------------------------------------------------------
    def _read_current(self) -> list[str] | None:
        path = self.root / CURRENT_NAME
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        return decode_current(data, str(path))

    def generations(self) -> tuple[str, ...]:
        """Generations CURRENT lists, newest first; empty without CURRENT; malformed → CheckpointCorrupt."""
        self._lease.check("generations")
        return tuple(self._read_current() or ())

    def _verify_generation(self, generation: str, rehashed: set[str], trust_session: bool = False) -> Manifest:
        """Manifest of ``generation`` after re-hashing it and every object it names (once per ``rehashed``).

        With ``trust_session``, objects this process already verified (and whose size is unchanged) are not
        re-hashed again.
        """
        where = f"generation {generation}"
        manifest = Manifest.decode(self._objects.read(generation, f"{where} manifest"), f"{where} manifest")
        rehashed.add(generation)
        todo: dict[str, str] = {}
        for label, name in [("continuation", manifest.continuation), *manifest.artifacts.items()]:
            if name in rehashed or name in todo or (trust_session and self._objects.verified_cheaply(name)):
                continue
            todo[name] = f"{where} {label!r}"
        self._objects.verify_many(list(todo.items()))
        rehashed.update(todo)
        self._complete[generation] = manifest
        return manifest

    def _still_complete(self, generation: str) -> bool:
        """Whether a previously published generation still verifies (cheap when this process verified it)."""
        known = self._complete.get(generation)
        if known is not None and all(
            self._objects.verified_cheaply(n) for n in (generation, known.continuation, *known.artifacts.values())
        ):
            return True
        try:
            self._verify_generation(generation, set(), trust_session=True)
        except CheckpointCorrupt as exc:
            logger.warning("qcheckpoint: dropping corrupt generation %s from CURRENT: %s", generation, exc)
            self._complete.pop(generation, None)
            return False
        return True

    # ----- load ----------------------------------------------------------------------------------------------
    def load(self, identity: Identity, *, project: Projection | None = None) -> LoadedGeneration | None:
        """The newest complete generation for ``identity``, or None for a fresh start.

        ``project`` maps an identity to what is compared (e.g. dropping device UUIDs); applied to both sides.
        """
        self._lease.check("load")
        current_identity = json_identity(identity)
        generations = self._read_current()
        if generations is None:
            if self.resume == "required":
                raise ResumePolicyError(f"{self.root}: resume='required' but no checkpoint is published (no CURRENT)")
            self._loaded, self._identity, self._last_cursor = True, current_identity, None
            return None
        if self.resume == "never":
            raise ResumePolicyError(
                f"{self.root}: resume='never' but CURRENT publishes {len(generations)} generation(s); use a new root"
            )
        skipped: list[SkippedGeneration] = []
        rehashed: set[str] = set()
        for generation in generations:
            try:
                manifest = self._verify_generation(generation, rehashed)
            except CheckpointCorrupt as exc:
                skipped.append(SkippedGeneration(generation, str(exc)))
                continue
            stored = manifest.identity if project is None else dict(project(dict(manifest.identity)))
            wanted = current_identity if project is None else dict(project(dict(current_identity)))
            fields = differing_fields(stored, wanted)
            if fields:
                raise IdentityMismatchError(
                    f"{self.root}: generation {generation} was made by a different run; differing identity "
                    f"fields: {', '.join(fields)}. Recreate the same run or use a new checkpoint root.",
                    fields,
                )
            for skip in skipped:
                logger.warning(
                    "qcheckpoint: generation %s is corrupt (%s); fell back to %s",
                    skip.generation,
                    skip.reason,
                    generation,
                )
            self._loaded, self._identity, self._last_cursor = True, current_identity, manifest.cursor
            return LoadedGeneration(
                generation=generation,
                identity=manifest.identity,
                cursor=manifest.cursor,
                continuation=manifest.continuation,
                artifacts=dict(manifest.artifacts),
                skipped=tuple(skipped),
                _objects=self._objects,
            )
        reasons = "; ".join(f"{s.generation}: {s.reason}" for s in skipped)
        raise CheckpointCorrupt(
            f"{self.root}: no complete published checkpoint among CURRENT's generations ({reasons})"
        )

    # ----- commit --------------------------------------------------------------------------------------------
    def commit(self, identity: Identity, cursor: int, continuation: str, artifacts: Mapping[str, str]) -> str:
        """Publish a generation atomically; returns its id (the manifest object's name).

        ``artifacts`` must name every artifact of every completed step. Everything is validated and every
        referenced object verified before anything is published; errors raise :class:`CommitError`.
        """
        self._lease.check("commit")
        if not self._loaded:
            raise CommitError(f"{self.root}: call load(identity) before the first commit of a run")
        ident = json_identity(identity, "commit identity")
        if self._identity is not None and ident != self._identity:
            fields = differing_fields(self._identity, ident)
            raise CommitError(f"commit identity: changed within the run (fields: {', '.join(fields)})")
        if type(cursor) is not int or cursor < 0:
            raise CommitError(f"commit cursor: expected an int >= 0, found {cursor!r}")
        if self._last_cursor is not None and cursor <= self._last_cursor:
            raise CommitError(f"commit cursor: must advance past {self._last_cursor}, found {cursor}")
        require_object_name(continuation, "commit continuation", CommitError)
        if not isinstance(artifacts, Mapping):
            raise CommitError(f"commit artifacts: expected a dict of name -> object, found {type(artifacts).__name__}")
        for name, sha in artifacts.items():
            if not isinstance(name, str) or name == "":
                raise CommitError(f"commit artifacts: expected non-empty str names, found {name!r}")
            require_object_name(sha, f"commit artifact {name!r}", CommitError)
        for label, sha in [("continuation", continuation), *artifacts.items()]:
            if not self._objects.verified_cheaply(sha):
                try:
                    self._objects.verify(sha, f"commit {label!r}")
                except CheckpointCorrupt as exc:
                    raise CommitError(str(exc)) from None
        self.faults.reach("commit.objects_verified")
        self._objects.sync()
        self.faults.reach("commit.objects_synced")
        manifest = Manifest(identity=ident, cursor=cursor, continuation=continuation, artifacts=dict(artifacts))
        generation = self._objects.put_bytes(manifest.encode())
        self._objects.sync()
        self._complete[generation] = manifest
        self.faults.reach("commit.manifest_written")
        previous = [g for g in (self._read_current() or []) if g != generation]
        kept = [generation]
        for old in previous:
            if len(kept) >= self.keep_last:
                break
            if self._still_complete(old):
                kept.append(old)
        atomic_replace_file(self.root, CURRENT_NAME, encode_current(kept), self.faults, prefix="current")
        self._identity, self._last_cursor = ident, cursor
        self._pinned.clear()
        return generation

    # ----- collect -------------------------------------------------------------------------------------------
    def collect(self) -> CollectReport:
        """Delete objects no generation in CURRENT references and stray temporaries; never raises on I/O."""
        self._lease.check("collect")
        return collect_unreachable(self.root, self._objects, self._read_current, set(self._pinned), self.faults)
