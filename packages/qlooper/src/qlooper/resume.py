"""Resume: a boundary extension that commits loop state to a qcheckpoint store and restores it on start.

At a due boundary (every ``interval`` layers, the last step, or when SIGINT/SIGTERM asked to stop) it
quiesces the finalizers, then stores one artifact per completed layer: its dense state (reconstructed weights,
folded AWQ scales; copied when the layer was solved, before any module replacement) and its finished modules
(layout tensors, bias, logical weight); and as the continuation the next layer's input cache, the report,
processor state and the torch, numpy and Python RNG states; then commits with the cursor. On start, a stored
generation with an equal identity is restored before any step runs: layer states, modules (offloaded or
replaced again as the options say), report, caches, processor state, RNGs; completed layers are not run again.
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
from safetensors.torch import load as torch_load
from safetensors.torch import save as torch_save

from .errors import ResumeError, RunStopped
from .finalize import FinalizedModule, _write_offload
from .identity import build_identity
from .input_cache import InputCache
from .logical_codec import decode_logical, encode_logical
from .loop import LayerLoop, LoopState, install_module
from .plan import LoopBoundary, LoopContext, LoopExtensions, LoopStep
from .report import ModuleReport

CONTINUATION_VERSION = 1


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


def _layer_bundle(state: dict[str, torch.Tensor], finalized: dict[str, FinalizedModule], layer_name: str) -> bytes:
    """One safetensors blob per completed layer: its dense state (``state|<param>``) and every finished module
    of the layer (``<module>|packed|<tensor>``, ``<module>|bias``, ``<module>|logical|<field>``)."""
    prefix = f"{layer_name}."
    tensors = {f"state|{k}": v for k, v in state.items()}
    meta: dict[str, Any] = {}
    for name, done in finalized.items():
        if not name.startswith(prefix):
            continue
        arrays = {f"{name}|packed|{k}": v for k, v in done.tensors().items()}
        bias = done.bias_array()
        if bias is not None:
            arrays[f"{name}|bias"] = bias
        logical: dict[str, np.ndarray] = {}
        tree = encode_logical(done.logical(), f"{name}|logical", logical)  # re-read when spilled
        arrays.update(logical)
        tensors.update({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()})
        meta[name] = {"format": done.format, "seconds": done.seconds, "logical": tree}
    return torch_save(tensors, metadata={"modules": json.dumps(meta, sort_keys=True)})


def _read_bundle(data: bytes) -> tuple[dict[str, torch.Tensor], list[FinalizedModule]]:
    """The layer state and the finished modules of a :func:`_layer_bundle` blob."""
    tensors = torch_load(data)
    header_len = int.from_bytes(data[:8], "little")
    meta = json.loads(json.loads(data[8 : 8 + header_len])["__metadata__"]["modules"])
    state = {k[len("state|") :]: v for k, v in tensors.items() if k.startswith("state|")}
    found = []
    for name, info in meta.items():
        logical = {k: v.numpy() for k, v in tensors.items() if k.startswith(f"{name}|logical")}
        weight = decode_logical(info["logical"], logical)
        marker = f"{name}|packed|"
        packed = {k[len(marker) :]: v.numpy() for k, v in tensors.items() if k.startswith(marker)}
        bias = tensors[f"{name}|bias"].numpy() if f"{name}|bias" in tensors else None
        found.append(FinalizedModule(name, info["format"], weight, packed, bias, seconds=info["seconds"]))
    return state, found


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
        self.bundled = 0  # layers [0, bundled) are stored as artifacts
        self._layer_states: dict[str, dict[str, torch.Tensor]] = {}  # solved, not yet stored

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
        self.last_committed = self.bundled = loaded.cursor
        return int(loaded.cursor)

    def _restore(self, loaded: Any, tree: dict[str, Any]) -> None:
        state, options = self.state, self.loop.options
        offload = Path(options.offload_dir) if options.offload_dir is not None else None
        modules = dict(self.loop.model.named_modules())
        for position in range(loaded.cursor):
            name, layer = state.layers[position]
            layer_state, finished = _read_bundle(loaded.read_object(loaded.artifacts[f"layer:{name}"]))
            try:
                lazy = any(t.is_meta for t in (*layer.parameters(), *layer.buffers()))
                layer.load_state_dict(layer_state, strict=True, assign=lazy)  # assign fills meta layers
            except RuntimeError as exc:
                raise ResumeError(f"checkpoint layer state {name!r} does not fit the model: {exc}") from exc
            for done in finished:
                if offload is not None:
                    tensors = dict(done.tensors()) if done.bias is None else {**done.tensors(), "bias": done.bias}
                    done.offload_path = _write_offload(offload, done.name, tensors)
                    done.packed = None
                if options.replace_module is not None:
                    new = options.replace_module(done.name, modules[done.name], done)
                    if new is not None:
                        install_module(self.loop.model, done.name, new)
                state.finalized[done.name] = done
        state.reports = [ModuleReport(**row) for row in json.loads(tree["reports"])]
        if tree["cache"] is not None:
            state.cache = InputCache.from_state(tree["cache"])
        self.loop.total_tokens = int(tree["total_tokens"])
        self.loop.processor.load_state_dict(tree["processor"])
        _set_rng_state(tree["rng"])

    # ---- boundaries --------------------------------------------------------------------------------
    def on_layer_done(self, step: LoopStep, layer: torch.nn.Module) -> None:
        """Keep a copy of the solved layer's dense state (before finalizers may replace its modules)."""
        self._layer_states[step.name] = {
            k: v.detach().cpu().contiguous().clone() for k, v in layer.state_dict().items()
        }

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
        for position in range(self.bundled, cursor):
            name = state.layers[position][0]
            bundle = _layer_bundle(self._layer_states.pop(name), state.finalized, name)
            self.artifacts[f"layer:{name}"] = self.store.put(bundle)
        self.bundled = cursor
        tree = {
            "version": CONTINUATION_VERSION,
            "cache": state.cache.to_state() if state.cache is not None else None,
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
