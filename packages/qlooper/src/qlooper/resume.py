"""Resume: a boundary extension that commits loop state to a qcheckpoint store and restores it on start.

At a due boundary (every ``interval`` layers, the last step, or when SIGINT/SIGTERM asked to stop) it
quiesces the finalizers, then stores as artifacts every completed module (layout tensors + bias, and
its logical weight) and every completed layer's dense state (reconstructed weights, folded AWQ scales),
and as the continuation the next layer's input cache, the report, processor state and the torch,
numpy and Python RNG states; then commits with the cursor. On start, a stored generation with an equal
identity is restored before any step runs: layer states, modules (offloaded or replaced again as the
options say), report, caches, processor state, RNGs; completed layers are not run again.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
from qcheckpoint import CheckpointStore, cooperative_stop, encode_continuation
from qformats.logical import QuantizedWeight
from safetensors.numpy import load as np_load
from safetensors.numpy import save as np_save
from safetensors.torch import load as torch_load
from safetensors.torch import save as torch_save

from .errors import ResumeError, RunStopped
from .finalize import FinalizedModule, _write_offload
from .identity import build_identity
from .input_cache import InputCache
from .loop import LayerLoop, LoopState, install_module
from .plan import LoopBoundary, LoopContext, LoopExtensions, LoopStep
from .report import ModuleReport

CONTINUATION_VERSION = 1
LOGICAL_FIELDS = ("codes", "scales", "zeros", "g_idx")


def _rng_state() -> dict[str, Any]:
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": [kind, keys, int(pos), int(has_gauss), float(cached)],
        "python": [int(version), [int(v) for v in internal], gauss],
    }


def _set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))


def _logical_bytes(weight: QuantizedWeight) -> bytes:
    meta = {"bits": str(weight.bits), "group_size": str(weight.group_size), "sym": str(weight.sym)}
    meta["meta"] = json.dumps(weight.meta, sort_keys=True, default=str)
    return np_save({f: np.ascontiguousarray(getattr(weight, f)) for f in LOGICAL_FIELDS}, metadata=meta)


def _logical_from(data: bytes) -> QuantizedWeight:
    arrays = np_load(data)
    header_len = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + header_len])["__metadata__"]
    return QuantizedWeight(
        codes=arrays["codes"],
        scales=arrays["scales"],
        zeros=arrays["zeros"],
        g_idx=arrays["g_idx"],
        bits=int(meta["bits"]),
        group_size=int(meta["group_size"]),
        sym=meta["sym"] == "True",
        meta=json.loads(meta["meta"]),
    )


class CheckpointExtension:
    """Commits at due boundaries and restores on start (see the module docstring)."""

    def __init__(self, store: CheckpointStore, stop: Any, interval: int, identity: dict[str, Any], loop: LayerLoop):
        self.store = store
        self.stop = stop
        self.interval = interval
        self.identity = identity
        self.loop = loop
        self.artifacts: dict[str, str] = {}
        self.last_committed = 0

    @property
    def state(self) -> LoopState:
        return self.loop.state

    # ---- start -------------------------------------------------------------------------------------
    def on_start(self, context: LoopContext) -> int | None:
        loaded = self.store.load(self.identity)
        if loaded is None:
            return None
        tree = loaded.decode_continuation()
        if not isinstance(tree, dict) or tree.get("version") != CONTINUATION_VERSION:
            raise ResumeError(f"checkpoint continuation: expected version {CONTINUATION_VERSION}, found {tree!r:.80}")
        self._restore(loaded, tree)
        self.artifacts = dict(loaded.artifacts)
        self.last_committed = loaded.cursor
        return int(loaded.cursor)

    def _restore(self, loaded: Any, tree: dict[str, Any]) -> None:
        state, options = self.state, self.loop.options
        for position in range(loaded.cursor):
            name, layer = state.layers[position]
            tensors = torch_load(loaded.read_object(loaded.artifacts[f"layer:{name}"]))
            layer.load_state_dict(tensors, strict=True)
        offload = Path(options.offload_dir) if options.offload_dir is not None else None
        modules = dict(self.loop.model.named_modules())
        for name, info in json.loads(tree["modules"]).items():
            packed = np_load(loaded.read_object(loaded.artifacts[f"module:{name}"]))
            bias = packed.pop("bias", None)
            weight = _logical_from(loaded.read_object(loaded.artifacts[f"logical:{name}"]))
            done = FinalizedModule(name, info["format"], weight, packed, bias, seconds=info["seconds"])
            if offload is not None:
                done.offload_path = _write_offload(offload, name, packed if bias is None else {**packed, "bias": bias})
                done.packed = None
            if options.replace_module is not None:
                new = options.replace_module(name, modules[name], done)
                if new is not None:
                    install_module(self.loop.model, name, new)
            state.finalized[name] = done
        state.reports = [ModuleReport(**row) for row in json.loads(tree["reports"])]
        if tree["cache"] is not None:
            state.cache = InputCache.from_state(tree["cache"])
        self.loop.total_tokens = int(tree["total_tokens"])
        self.loop.processor.load_state_dict(tree["processor"])
        _set_rng_state(tree["rng"])

    # ---- boundaries --------------------------------------------------------------------------------
    def on_layer_done(self, step: LoopStep, layer: torch.nn.Module) -> None:
        """Store the completed layer's dense state now (before finalizers may replace its modules)."""
        tensors = {k: v.detach().cpu().contiguous().clone() for k, v in layer.state_dict().items()}
        self.artifacts[f"layer:{step.name}"] = self.store.put(torch_save(tensors))

    def on_boundary(self, boundary: LoopBoundary) -> None:
        last = boundary.cursor == len(self.state.plan)
        due = boundary.cursor - self.last_committed >= self.interval or last or self.stop.requested
        if not due:
            return
        boundary.quiesce()
        self._commit(boundary.cursor)
        if self.stop.requested and not last:
            raise RunStopped(
                f"stop requested ({self.stop.signal_name}); checkpoint committed, resume from step {boundary.cursor}",
                boundary.cursor,
            )

    def _commit(self, cursor: int) -> None:
        state = self.state
        for name, done in state.finalized.items():
            if f"module:{name}" in self.artifacts:
                continue
            if done.offload_path is not None:
                self.artifacts[f"module:{name}"] = self.store.put_file(done.offload_path)
            else:
                tensors = dict(done.packed or {})
                if done.bias is not None:
                    tensors["bias"] = done.bias
                self.artifacts[f"module:{name}"] = self.store.put(np_save(tensors))
            self.artifacts[f"logical:{name}"] = self.store.put(_logical_bytes(done.weight))
        modules = {n: {"format": d.format, "seconds": d.seconds} for n, d in state.finalized.items()}
        tree = {
            "version": CONTINUATION_VERSION,
            "cache": state.cache.to_state() if state.cache is not None else None,
            "modules": json.dumps(modules, sort_keys=True),
            "reports": json.dumps([asdict(r) for r in state.reports]),
            "total_tokens": self.loop.total_tokens,
            "processor": self.loop.processor.state_dict(),
            "rng": _rng_state(),
        }
        continuation = self.store.put(encode_continuation(tree))
        self.store.commit(self.identity, cursor, continuation, self.artifacts)
        self.store.collect()
        self.last_committed = cursor


def run_with_checkpoint(loop: LayerLoop, calibration: Any, checkpoint: Any, extensions: list[Any]) -> LoopState:
    """Run ``loop`` under a writer lease and SIGINT/SIGTERM cooperative stop, committing at boundaries."""
    options = loop.options
    identity = build_identity(
        loop.model, loop.definition, calibration, loop.processor, loop.format, options, loop.state.plan
    )
    with CheckpointStore.from_config(checkpoint, default_root=options.offload_dir) as store, cooperative_stop() as stop:
        ext = CheckpointExtension(store, stop, checkpoint.interval_layers, identity, loop)
        loop.extensions = LoopExtensions([*extensions, ext])
        return loop.run(calibration)
