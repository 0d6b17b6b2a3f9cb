"""The Ray executor: the sharded executor's workers as Ray actors (``pip install qlooper[ray]``).

``RayExecutor(address, workers)`` connects to a Ray cluster (``address``: ``"local"`` starts one on this
machine with ``workers`` CPUs; anything else is passed to ``ray.init(address=...)``, e.g. ``"auto"`` or
``"ray://head:10001"``) and starts ``workers`` actors named ``lowbit-worker-<i>``, each holding one
:class:`~qlooper.shard_worker.LayerWorker`. What runs where, and why the numbers equal one process's, is in
:mod:`qlooper.executor`. The layer goes to every actor once per layer (one object-store copy); each forward
call then carries only the parameters the driver's solves changed since the previous call, and a
replacement actor gets the layer plus the driver's whole current state (and, for sharded MoE experts, the
output tables its stand-ins had, :mod:`qlooper.expert_shards`) before it repeats a call, so:

* a worker that dies during a call (killed, out of memory, node lost) is reported by name, pid and host
  (a warning in the log and ``describe()["lost_workers"]`` in the run summary), replaced by a fresh actor,
  and the call is repeated on it: the layer goes on with the same numbers; a second loss of the same call
  raises :class:`~qlooper.errors.ExecutorError` naming the worker;
* a driver that dies leaves the checkpoint (qcheckpoint, as in one process) at the last committed layer;
  the next run resumes from it, with or without Ray.

Cluster nodes need the same lowbit packages and torch as the driver (a local cluster inherits them). Each
worker sets torch's thread count to the driver's: a float reduction (a loss sum, a norm) is split over
threads, so another count can change its last bit (measured on SmolLM2: a GPTQ loss 1 ulp apart with 1
thread against the driver's 2). Give each actor that many CPUs on a real cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .errors import ExecutorError
from .executor import LostWorker, ShardedExecutor
from .shard_worker import LayerWorker

log = logging.getLogger(__name__)

MISSING_RAY = "the Ray executor needs the ray package: pip install 'qlooper[ray]' (or pip install ray)"


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(MISSING_RAY) from exc
    return ray


class RayExecutor(ShardedExecutor):
    """Shard workers as Ray actors (see the module docstring). Use as a context manager or call :meth:`close`."""

    def __init__(self, address: str = "local", workers: int = 2) -> None:
        super().__init__(workers=workers, name="ray")
        if workers < 1:
            raise ExecutorError(f"workers: expected at least 1 Ray worker, found {workers}")
        ray = _ray()
        self.address = address
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            if address == "local":
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0)(LayerWorker)
        self._layer: tuple[str, Any] | None = None
        self._actors: list[Any] = []
        self.identities: list[dict[str, Any]] = []
        for i in range(workers):
            actor, identity = self._start(i)
            self._actors.append(actor)
            self.identities.append(identity)

    def _start(self, index: int) -> tuple[Any, dict[str, Any]]:
        ray = _ray()
        actor = self._actor_class.remote(f"lowbit-worker-{index}", torch.get_num_threads())
        identity = ray.get(actor.identity.remote())
        if self._layer is not None:  # a replacement: the layer, then what the lost worker held
            ray.get(actor.set_layer.remote(*self._layer))
            ray.get(actor.update.remote(self._layer[0], self._held))
            for method, args in self._setup_calls(index):  # e.g. the expert stand-ins' output tables
                ray.get(getattr(actor, method).remote(*args))
        return actor, identity

    def _ship(self, key: str, layer: nn.Module) -> None:
        ray = _ray()
        self._layer = (key, ray.put(layer))
        ray.get([actor.set_layer.remote(*self._layer) for actor in self._actors])

    def _submit(self, index: int, method: str, args: tuple[Any, ...]) -> Any:
        return getattr(self._actors[index], method).remote(*args)

    def _call(self, method: str, per_worker: Sequence[tuple[Any, ...]], during: str) -> list[Any]:
        ray = _ray()
        shared: dict[int, Any] = {}  # one object-store copy of an argument every worker gets (changed parameters)
        calls = [tuple(self._put_shared(arg, shared) for arg in args) for args in per_worker]
        refs = [self._submit(i, method, args) for i, args in enumerate(calls)]
        results = []
        for i, ref in enumerate(refs):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                results.append(self._retry(i, method, calls[i], during, exc))
        return results

    @staticmethod
    def _put_shared(arg: Any, shared: dict[int, Any]) -> Any:
        if not isinstance(arg, dict):
            return arg
        if id(arg) not in shared:
            shared[id(arg)] = _ray().put(arg)
        return shared[id(arg)]

    def _retry(self, index: int, method: str, args: tuple[Any, ...], during: str, error: BaseException) -> Any:
        """Report the lost worker, start a replacement (same name), run the call again on it."""
        ray = _ray()
        who = self.identities[index]
        lost = LostWorker(who["name"], who["host"], int(who["pid"]), self._index, during, type(error).__name__)
        self.lost.append(lost)
        log.warning(
            "ray worker %s (pid %s on %s) was lost during %s (%s); starting a replacement and repeating the call",
            lost.name,
            lost.pid,
            lost.host,
            during,
            lost.error,
        )
        try:
            self._actors[index], self.identities[index] = self._start(index)
            return ray.get(self._submit(index, method, args))
        except ray.exceptions.RayActorError as exc:
            raise ExecutorError(
                f"ray worker {lost.name} (pid {lost.pid} on {lost.host}) was lost during {during}, "
                f"and its replacement was lost too ({type(exc).__name__})"
            ) from exc

    def describe(self) -> dict[str, Any]:
        """The sharded executor's description plus the cluster address and the workers' identities."""
        return {**super().describe(), "address": self.address, "worker_identities": list(self.identities)}

    def close(self) -> None:
        """Stop the actors; shut Ray down when this executor started it."""
        ray = _ray()
        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
        if self._owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
