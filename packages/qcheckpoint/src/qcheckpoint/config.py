"""``CheckpointConfig``: where checkpoints live and how resume, interval and retention behave."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from .errors import CheckpointConfigError

RESUME_MODES = ("auto", "required", "never")
_INTERVAL = re.compile(r"layer:([0-9]+)")


@dataclass(frozen=True)
class CheckpointConfig:
    """Validated checkpoint settings; every bad field raises :class:`CheckpointConfigError` naming it.

    ``path``: the store root, or ``"auto"`` for the caller's default (see :meth:`resolve_root`).
    ``resume``: ``"auto"`` | ``"required"`` | ``"never"``. ``interval``: ``"layer:<int >= 1>"`` (commit every N
    completed layers). ``keep_last``: generations retained (``>= 2``). ``strict_device_check``: when False the
    caller drops physical device UUID/serial from identity comparison (the store does not interpret it).
    """

    path: str | Path = "auto"
    resume: str = "auto"
    interval: str = "layer:1"
    keep_last: int = 2
    strict_device_check: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, Path)):
            raise CheckpointConfigError(
                f"CheckpointConfig.path: expected a non-empty str or Path, found {type(self.path).__name__}"
            )
        if isinstance(self.path, str) and self.path.strip() == "":
            raise CheckpointConfigError("CheckpointConfig.path: expected a non-empty path, found an empty string")
        if not isinstance(self.resume, str) or self.resume not in RESUME_MODES:
            raise CheckpointConfigError(
                f"CheckpointConfig.resume: expected one of {', '.join(RESUME_MODES)}, found {self.resume!r}"
            )
        if not isinstance(self.interval, str) or _INTERVAL.fullmatch(self.interval.strip()) is None:
            raise CheckpointConfigError(
                f"CheckpointConfig.interval: expected 'layer:<integer >= 1>', found {self.interval!r}"
            )
        if self.interval_layers < 1:
            raise CheckpointConfigError(
                f"CheckpointConfig.interval: expected 'layer:<integer >= 1>', found {self.interval!r}"
            )
        if isinstance(self.keep_last, bool) or not isinstance(self.keep_last, int) or self.keep_last < 2:
            raise CheckpointConfigError(f"CheckpointConfig.keep_last: expected an int >= 2, found {self.keep_last!r}")
        if not isinstance(self.strict_device_check, bool):
            raise CheckpointConfigError(
                f"CheckpointConfig.strict_device_check: expected a bool, found {self.strict_device_check!r}"
            )

    @property
    def interval_layers(self) -> int:
        """The N of ``layer:N``: commit after every N completed layers."""
        match = _INTERVAL.fullmatch(self.interval.strip())
        if match is None:  # unreachable after __post_init__, kept for type narrowing
            raise CheckpointConfigError(f"CheckpointConfig.interval: malformed {self.interval!r}")
        return int(match.group(1))

    @property
    def is_auto_path(self) -> bool:
        """True when ``path`` is the literal ``"auto"``."""
        return isinstance(self.path, str) and self.path.strip() == "auto"

    def resolve_root(self, default: str | Path | None = None) -> Path:
        """The store root: ``path``, or ``default`` when ``path`` is ``"auto"`` (then ``default`` is required)."""
        if not self.is_auto_path:
            return Path(self.path)
        if default is None or str(default).strip() == "":
            raise CheckpointConfigError(
                "CheckpointConfig.path: 'auto' needs a default root from the caller (e.g. the offload path), found none"
            )
        return Path(default)
