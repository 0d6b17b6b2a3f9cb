"""The Ray executor: the sharded executor's workers as Ray actors (``pip install qlooper[ray]``).

``RayExecutor(address, workers)`` connects to a Ray cluster (``address``: ``"local"`` starts one on this
machine with ``workers`` CPUs; anything else is passed to ``ray.init(address=...)``, e.g. ``"auto"`` or
``"ray://head:10001"``) and starts ``workers`` actors named ``lowbit-worker-<i>``, each holding one
:class:`~qlooper.shard_worker.LayerWorker`. What runs where, and why the numbers equal one process's, is in
:mod:`qlooper.executor`. The layer goes to every actor once per layer (one object-store copy, fetched by the
nodes in staged rounds so that the copies double each round: :mod:`qlooper.broadcast`); each forward call
then carries only the parameters the driver's solves changed since the previous call (staged the same way
when large), and a replacement actor gets the layer plus the driver's whole current state (and, for sharded
MoE experts, the output tables its stand-ins had, :mod:`qlooper.expert_shards`) before it repeats a call, so:

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

from .broadcast import broadcast_rounds
from .errors import ExecutorError, SegmentsLost
from .executor import LostWorker, ShardedExecutor, tensor_bytes
from .shard_worker import ChainPart, LayerWorker

log = logging.getLogger(__name__)

MISSING_RAY = "the Ray executor needs the ray package: pip install 'qlooper[ray]' (or pip install ray)"


def _ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(MISSING_RAY) from exc
    return ray


STAGE_MIN_BYTES = 1 << 20
"""Objects several workers get are fetched in staged rounds (:mod:`qlooper.broadcast`) from this size on; a
smaller one costs less to pull from the driver's node at once than a round trip per round."""


class RayLayerWorker(LayerWorker):
    """A :class:`LayerWorker` that also knows its Ray node and can fetch objects into its node's store."""

    def identity(self) -> dict[str, Any]:
        """:meth:`LayerWorker.identity` plus ``node``, the Ray node id (workers on one node share its store)."""
        return {**super().identity(), "node": _ray().get_runtime_context().get_node_id()}

    def fetch(self, refs: list[Any]) -> int:
        """Bring ``refs`` (object refs, in a list so that Ray does not resolve them) into this node's object
        store without deserializing them: later calls on this node, and other nodes, read that copy. Returns
        how many."""
        ray = _ray()
        ray.wait(refs, num_returns=len(refs), fetch_local=True)
        return len(refs)


class RayExecutor(ShardedExecutor):
    """Shard workers as Ray actors (see the module docstring). Use as a context manager or call :meth:`close`."""

    def __init__(self, address: str = "local", workers: int = 2, sum_reduce: str = "chain") -> None:
        super().__init__(workers=workers, name="ray", sum_reduce=sum_reduce)
        if workers < 1:
            raise ExecutorError(f"workers: expected at least 1 Ray worker, found {workers}")
        ray = _ray()
        self.address = address
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray:
            if address == "local":
                # address="local": always a new cluster of our own; without an address ray.init joins one another
                # process already runs on this machine and then refuses num_cpus
                ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False)
            else:
                ray.init(address=address, log_to_driver=False)
        self._driver_node = ray.get_runtime_context().get_node_id()
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0)(RayLayerWorker)
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
        if self._layer is not None:  # a replacement: the layer (from any node holding it), then the driver's state
            ray.get(actor.set_layer.remote(*self._layer))
            ray.get(actor.update.remote(self._layer[0], self._held))
            for method, args in self._setup_calls(index):  # e.g. the expert stand-ins' output tables
                ray.get(getattr(actor, method).remote(*args))
        return actor, identity

    def _nodes(self, indices: Sequence[int]) -> list[str]:
        return [str(self.identities[i].get("node", "")) for i in indices]

    def _ship(self, key: str, layer: nn.Module) -> int:
        """One object-store copy of ``layer``; the workers load it in staged rounds (:mod:`qlooper.broadcast`:
        the nodes holding it double each round). Returns the rounds."""
        ray = _ray()
        self._layer = (key, ray.put(layer))
        rounds = broadcast_rounds(self._nodes(range(self.workers)), {self._driver_node})
        for members in rounds:
            self._call_on(members, "set_layer", [self._layer] * len(members), f"shipping layer {key}")
        return len(rounds)

    def _submit(self, index: int, method: str, args: tuple[Any, ...]) -> Any:
        return getattr(self._actors[index], method).remote(*args)

    def _call(
        self, method: str, per_worker: Sequence[tuple[Any, ...]], during: str, shared: dict[int, Any] | None = None
    ) -> list[Any]:
        """Arguments several workers get go to the object store once (kept in ``shared`` by ``id``, with the
        nodes holding them, across the calls that pass the same dict) and, from ``STAGE_MIN_BYTES`` on, are
        fetched in staged rounds before the call; then every worker's call."""
        shared = {} if shared is None else shared
        calls = self._put_shared(per_worker, shared, during)
        return self._call_on(range(len(calls)), method, calls, during)

    def _put_shared(
        self, per_worker: Sequence[tuple[Any, ...]], shared: dict[int, Any], during: str
    ) -> list[tuple[Any, ...]]:
        """``per_worker`` with each dict or tensor argument that several workers get (or an earlier call of
        ``shared`` put) replaced by its object ref; large ones fetched in rounds first."""
        ray = _ray()
        takers: dict[int, list[int]] = {}
        for w, args in enumerate(per_worker):
            for arg in args:
                if isinstance(arg, (dict, torch.Tensor)):
                    takers.setdefault(id(arg), []).append(w)
        for args in per_worker:
            for arg in args:
                key = id(arg)
                if key in takers and key not in shared and (len(takers[key]) > 1 or isinstance(arg, dict)):
                    shared[key] = (ray.put(arg), {self._driver_node}, tensor_bytes(arg))
        for key, workers in takers.items():
            if key in shared:
                self._stage(shared[key], workers, during)
        return [tuple(shared[id(arg)][0] if id(arg) in shared else arg for arg in args) for args in per_worker]

    def _stage(self, entry: tuple[Any, set[str], int], workers: list[int], during: str) -> None:
        """Fetch one shared object into the nodes of ``workers`` in rounds, all but the last round (the call
        itself fetches that one); record every node of ``workers`` as holding it."""
        ref, holders, size = entry
        if size >= STAGE_MIN_BYTES:
            rounds = broadcast_rounds(self._nodes(workers), holders)
            for members in rounds[:-1]:
                chosen = [workers[i] for i in members]
                self._call_on(chosen, "fetch", [([ref],)] * len(chosen), f"staging the arguments of {during}")
        holders.update(self._nodes(workers))

    def _call_on(self, indices: Sequence[int], method: str, calls: Sequence[tuple[Any, ...]], during: str) -> list[Any]:
        """Worker ``indices[k]``'s call of ``method`` with ``calls[k]``, at once; results in that order. A
        worker lost during its call is replaced and the call repeated (:meth:`_retry`)."""
        ray = _ray()
        refs = [self._submit(i, method, args) for i, args in zip(indices, calls, strict=True)]
        results = []
        for i, args, ref in zip(indices, calls, refs, strict=True):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as exc:
                results.append(self._retry(i, method, args, during, exc))
        return results

    def _chain_step(self, index: int, args: tuple[Any, ...]) -> Any:
        """Submit worker ``index``'s chain step; the previous step's object ref among ``args`` is resolved by Ray
        on this worker's node (pulled from the previous worker's node, not through the driver)."""
        return self._submit(index, "chain", args)

    def _chain_gather(self, handles: Sequence[Any], workers: Sequence[int], during: str) -> list[ChainPart]:
        """The chains' last steps' values (the only copies the driver receives). A worker lost during the chain
        is reported and replaced (its held sums are gone: :class:`SegmentsLost`, the driver captures again)."""
        ray = _ray()
        try:
            return list(ray.get(list(handles)))
        except ray.exceptions.RayActorError as exc:
            lost = [i for i in workers if not self._alive(i)]
            for i in lost:
                self._replace(i, during, exc)
            raise SegmentsLost(f"workers {lost} were lost during {during}") from exc
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, SegmentsLost):
                raise SegmentsLost(str(exc.cause)) from exc
            raise

    def _alive(self, index: int) -> bool:
        """Whether worker ``index`` still answers."""
        ray = _ray()
        try:
            ray.get(self._actors[index].identity.remote())
        except ray.exceptions.RayActorError:
            return False
        return True

    def _report(self, index: int, during: str, error: BaseException, action: str) -> LostWorker:
        """Record and log worker ``index`` as lost during ``during`` (``action``: what the executor does next)."""
        who = self.identities[index]
        lost = LostWorker(who["name"], who["host"], int(who["pid"]), self._index, during, type(error).__name__)
        self.lost.append(lost)
        log.warning(
            "ray worker %s (pid %s on %s) was lost during %s (%s); %s",
            lost.name,
            lost.pid,
            lost.host,
            during,
            lost.error,
            action,
        )
        return lost

    def _replace(self, index: int, during: str, error: BaseException) -> LostWorker:
        """Report the lost worker ``index`` and start a replacement under its name (layer and state loaded)."""
        lost = self._report(index, during, error, "starting a replacement")
        self._actors[index], self.identities[index] = self._start(index)
        return lost

    def _retry(self, index: int, method: str, args: tuple[Any, ...], during: str, error: BaseException) -> Any:
        """Report the lost worker, start a replacement (same name), run the call again on it."""
        ray = _ray()
        lost = self._report(index, during, error, "starting a replacement and repeating the call")
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
