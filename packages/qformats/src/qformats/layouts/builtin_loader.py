"""Import a registry's built-in modules once, on first lookup, so that ``import qformats`` stays cheap."""

from __future__ import annotations

import importlib
import threading


class BuiltinLoader:
    """Imports ``modules`` (names relative to ``package``) the first time :meth:`ensure` runs.

    Thread-safe: other threads wait until every module is imported. Re-entrant: a module whose import
    looks its registry up again (and so calls :meth:`ensure`) does not deadlock.
    """

    def __init__(self, package: str, modules: tuple[str, ...]) -> None:
        self.package = package
        self.modules = modules
        self.loaded = False
        self._lock = threading.RLock()

    def ensure(self) -> None:
        if self.loaded:
            return
        with self._lock:
            if self.loaded:
                return
            for module in self.modules:
                importlib.import_module(f".{module}", self.package)  # relative: works when vendored
            self.loaded = True
