"""The Ray executor's cost model: seconds per decoder layer of a GPTQ run, item by item, on N workers.

A layer under the sharded executor is a sequence of phases that do not overlap (the model adds them; it assumes
no overlap of compute and transfer, which is conservative): ship the layer; for each calculation group a
token-sharded capture forward, the Hessian statistics, the group's solves and the new weights sent back to the
workers; a replay forward whose outputs are the next layer's inputs. :func:`layer_cost` gives each item from
explicit formulas in the shape (:mod:`scaling_shapes`), the calibration, the worker count, the executor's design
(:class:`Design`: each change of issue 38 is a switch) and the rates (:class:`Rates`: flop/s and bytes/s, GPU
ASSUMPTIONS or rates fitted on a measured run). :func:`one_device_cost` is the same run in one process on one
device (no transfers), the baseline of a speed-up.

Units: seconds, bytes, flop/s, bytes/s. Every item is a pure function of its inputs; nothing is measured here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from scaling_shapes import Input, Shape, chunk_tokens, gram_blocks, gram_flops_per_token, solve_flops, sum_bytes


@dataclass(frozen=True)
class Design:
    """What the executor does; every field's default is the executor as built before issue 38.

    * ``hessian_on_workers``: workers form the float32 chunk products of the whole Hessian segments
      (``segment_chunks`` chunks of ``chunk_tokens(in)`` rows) inside their token range and send float64
      segment sums; False: every hooked input travels to the driver, which forms every product.
    * ``straddle_on``: where a segment crossing a shard boundary is formed: ``"driver"`` (its rows travel to
      the driver, as the design of issue 38 states), ``"relay"`` (on the worker holding its first rows, which
      keeps them; the other shards' rows of it travel back with the capture and on to that worker through the
      driver, and it forms the segment in a second call after the capture: qlooper as built) or ``"owner"``
      (on that worker, the other rows sent to it over the workers' own links, within the capture).
    * ``sum_reduce``: ``"driver"``: every segment sum travels to the driver, which adds them in segment order;
      ``"chain"``: the running sum passes from worker to worker in segment order (each adds its segments;
      the same float64 additions in the same order, so the same bits), pipelined in parts of consecutive Gram
      blocks of about ``chain_part_bytes`` (one call per part and worker, each paying ``call_latency`` on the
      pipeline's critical path of ``parts + hops - 1`` steps); one sum reaches the driver (qlooper as built:
      ``LayerWorker.chain``, each part an object ref from one worker's call to the next; ``CHAIN_PART_BYTES``).
    * ``module_solves``: one solve job per module, each given the float32 Hessian (its factorization repeated
      per job) instead of one job per shared input with the float64 sum.
    * ``solve_split``: ``"module"`` (one job per module or input, above) or ``"rows"`` (not built: each dense
      input's Hessian factorized once, on one worker, its float32 inverse factor (``4 in²`` bytes) sent to every
      worker as the layer copy is (``layer_copy``), and the column sweep of the input's modules split by output
      rows over all workers: ``in³`` then ``Σ out · in² / N`` flops; every output row's sweep is independent
      given the factor; exact only if one process also solves over the same fixed row tiles, see
      docs/scaling.md "Splitting one module's solve by output rows").
    * ``layer_copy``: how the layer copy and the solved weights reach N workers: ``"driver"`` (N copies over
      the driver's link), ``"tree"`` (a staged broadcast: the holders double each round,
      ``ceil(log2(N + 1))`` rounds of the bytes), ``"pipelined"`` (a pipelined broadcast: about one link-load).
    * ``experts_sharded``: routed experts owned E/N per worker: their weights, their routed tokens' inputs and
      their statistics and solves stay on the owner; attention, router and shared experts token-sharded.
    * ``expert_dispatch``: how routed tokens reach the owners and outputs come back: ``"driver"`` (through
      the driver's link) or ``"peer"`` (worker to worker, all links at once).
    * ``inputs_resident``: workers keep their shard's layer inputs between calls and the replay's outputs as
      the next layer's inputs (not part of issue 38's design; False: every call carries the shard's inputs).
    * ``codes_only``: solved weights travel as their 1-byte codes (the receiver dequantizes: the same bits, an
      elementwise function of codes and scales) instead of the dequantized weight plus codes.
    * ``workers_load_weights``: each worker reads its part of the layer from storage over its own link (all at
      once) instead of receiving it from the driver.
    """

    hessian_on_workers: bool = False
    segment_chunks: int = 8
    straddle_on: str = "driver"
    sum_reduce: str = "driver"
    chain_part_bytes: float = 64 * 2**20
    module_solves: bool = False
    solve_split: str = "module"
    layer_copy: str = "driver"
    experts_sharded: bool = False
    expert_dispatch: str = "driver"
    inputs_resident: bool = False
    codes_only: bool = False
    workers_load_weights: bool = False

    def __post_init__(self) -> None:
        choices = {
            "straddle_on": ("driver", "relay", "owner"),
            "sum_reduce": ("driver", "chain"),
            "solve_split": ("module", "rows"),
            "layer_copy": ("driver", "tree", "pipelined"),
            "expert_dispatch": ("driver", "peer"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"Design.{name}: expected one of {allowed}, found {getattr(self, name)!r}")
        if self.segment_chunks < 1:
            raise ValueError(f"Design.segment_chunks: expected >= 1, found {self.segment_chunks}")


BUILT = Design()
"""The executor before issue 38."""

ISSUE38 = Design(hessian_on_workers=True, module_solves=True, layer_copy="tree", experts_sharded=True)
"""Issue 38's design as its three builders were asked to build it (straddling rows and segment sums to the
driver, staged-broadcast layer copy, experts dispatched through the driver)."""

AS_BUILT = replace(ISSUE38, straddle_on="relay", sum_reduce="chain")
"""qlooper's executor as built: issue 38's design with straddling segments formed on the worker holding their
first rows, their other rows relayed through the driver (the driver forms no Hessian product of a whole
segment), and the segment sums chained through the workers (the driver receives one sum per input)."""

ISSUE38_TRANSPORT = replace(
    ISSUE38, straddle_on="owner", sum_reduce="chain", layer_copy="pipelined", expert_dispatch="peer"
)
"""Issue 38's design with bit-exact transport choices: straddling segments formed on a worker, the segment sums
chained through the workers, a pipelined broadcast, experts dispatched peer to peer."""

ISSUE38_RESIDENT = replace(ISSUE38_TRANSPORT, inputs_resident=True, codes_only=True, workers_load_weights=True)
"""And beyond issue 38: layer inputs resident on the workers, solved weights as codes, weights read by the
workers from storage."""

CUMULATIVE = (
    ("built", BUILT),
    ("issue 38 design", ISSUE38),
    ("+ straddling segments on a worker, rows through the driver", replace(ISSUE38, straddle_on="relay")),
    ("+ chained segment sums (as built)", AS_BUILT),
    ("+ straddling rows sent worker to worker", replace(ISSUE38, straddle_on="owner", sum_reduce="chain")),
    ("+ pipelined broadcast", replace(ISSUE38, straddle_on="owner", sum_reduce="chain", layer_copy="pipelined")),
    ("+ peer expert dispatch", ISSUE38_TRANSPORT),
    ("+ codes only", replace(ISSUE38_TRANSPORT, codes_only=True)),
    ("+ workers load weights", replace(ISSUE38_TRANSPORT, codes_only=True, workers_load_weights=True)),
    ("+ inputs resident", ISSUE38_RESIDENT),
)
"""Issue 38's design and each further switch, cumulatively (the projection's switch-by-switch table)."""


@dataclass(frozen=True)
class Rates:
    """How fast things go.

    * ``forward``: flop/s of a worker's layer forwards; ``stats``: flop/s of the float32 chunk products on a
      worker (and on the one device of the baseline); ``reduce``: the same on the driver; ``solve``: flop/s of
      a GPTQ solve.
    * ``link``: bytes/s of one process's link (the driver's and each worker's); ``ship_link``: bytes/s of the
      layer's first copy (None: ``link``); ``host_link``: bytes/s of the one-device baseline loading a layer.
    * ``sum_add``: bytes/s of float64 sums added on the driver (received over the link); ``device_sum_add``:
      bytes/s of a worker adding its own segment sums where it formed them.
    * ``driver_share``: the part of moving the workers' token rows (layer inputs, hooked inputs, outputs) that is
      serial on the driver (1.0: all of it, the driver's link being the bottleneck); the rest (a worker
      unpickling its shard, pickling its recordings) runs on the workers at once.
    * ``call_latency``: seconds per executor call; ``wire_bytes``: bytes per activation or weight element on
      the wire (the dequantized results too, plus a 1-byte code).
    * ``lanes``: workers that compute at full speed at once (CPU cores; ``inf``: each worker its own GPU);
      ``expert_imbalance``: the busiest expert owner's routed tokens over the mean.
    """

    forward: float
    stats: float
    reduce: float
    solve: float
    link: float
    sum_add: float
    call_latency: float
    wire_bytes: int
    host_link: float
    lanes: float = math.inf
    expert_imbalance: float = 1.0
    ship_link: float | None = None
    device_sum_add: float = math.inf
    driver_share: float = 1.0


@dataclass(frozen=True)
class Calibration:
    """``rows`` of ``length`` tokens in batches of ``batch_rows`` rows (contiguous batch shards per worker);
    ``call_extra_bytes``: bytes each batch's layer call carries besides its hidden states (an attention mask)."""

    rows: int
    length: int
    batch_rows: int = 1
    call_extra_bytes: float = 0.0

    @property
    def tokens(self) -> int:
        return self.rows * self.length

    @property
    def batches(self) -> int:
        return math.ceil(self.rows / self.batch_rows)


@dataclass
class LayerCost:
    """Seconds per layer by item, and the bytes behind the transfer items (``bytes``: what each item delivers to
    its destinations, e.g. the changed parameters once per worker, whichever way they travel).

    ``forward``: token-sharded forwards (slowest worker) plus routed experts on their owners; ``worker_stats``:
    chunk products (and sum additions) on the workers, slowest worker per group; ``driver_reduce``: chunk
    products and sum additions on the driver; ``sums``: segment sums travelling; ``solve``: solve jobs'
    compute, wave by wave; ``solve_bytes``: their inputs (Hessians, weights) and results over the driver's link;
    ``activations``: layer inputs out, hooked inputs or straddling rows back, routed tokens and expert outputs,
    replay outputs; ``changed_params``: solved weights sent to the workers; ``layer_ship``: the layer's first
    copy (one device: loading it); ``calls``: per-call latency."""

    forward: float = 0.0
    worker_stats: float = 0.0
    driver_reduce: float = 0.0
    sums: float = 0.0
    solve: float = 0.0
    solve_bytes: float = 0.0
    activations: float = 0.0
    changed_params: float = 0.0
    layer_ship: float = 0.0
    calls: float = 0.0
    bytes: dict[str, float] = field(default_factory=dict)

    def items(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "bytes"}

    @property
    def total(self) -> float:
        return sum(self.items().values())


def shard_bounds(cal: Calibration, workers: int) -> list[tuple[float, float]]:
    """Each worker's ``[lo, hi)`` fraction of the token stream (contiguous batch shards, sizes differing by at
    most one batch, as qlooper's ``shard_ranges``; workers without a batch get an empty range)."""
    batches, out, lo = cal.batches, [], 0
    for w in range(workers):
        hi = lo + batches // workers + (1 if w < batches % workers else 0)
        out.append((lo / batches, hi / batches))
        lo = hi
    return out


def active_share(rates: Rates, active: int) -> float:
    """The fraction of full speed each of ``active`` concurrent workers gets (``lanes`` shared evenly)."""
    return min(1.0, rates.lanes / max(1, active))


@dataclass
class SegmentSplit:
    """Where one input's Hessian segments are formed: tokens formed per worker, tokens formed on the driver,
    segment sums per worker (in segment order), the straddling rows each worker receives (owner and relay
    modes), and of ``worker_tokens`` those of straddling segments (formed in a second call in relay mode)."""

    worker_tokens: list[float]
    driver_tokens: float
    sums_per_worker: list[int]
    rows_in: list[float]
    straddle_tokens: list[float] = field(default_factory=list)


def split_segments(stream: float, segment: int, bounds: list[tuple[float, float]], straddle_on: str) -> SegmentSplit:
    """Segments of ``segment`` tokens over a token stream of ``stream`` tokens (the last may be short) against
    the workers' fractions ``bounds``: a segment inside one worker's range is formed there; one that crosses a
    boundary is formed on the driver (``straddle_on="driver"``) or on the worker holding its first token, which
    then receives its other rows (``"relay"``, ``"owner"``)."""
    n = len(bounds)
    edges = [(lo * stream, hi * stream) for lo, hi in bounds]
    out = SegmentSplit([0.0] * n, 0.0, [0] * n, [0.0] * n, [0.0] * n)
    count = math.ceil(stream / segment) if stream > 0 else 0
    w = 0
    for s in range(count):
        start, end = s * segment, min(stream, (s + 1) * segment)
        while w < n - 1 and start >= edges[w][1]:
            w += 1
        if end <= edges[w][1] + 1e-9:
            out.worker_tokens[w] += end - start
            out.sums_per_worker[w] += 1
        elif straddle_on == "driver":
            out.driver_tokens += end - start
        else:
            out.worker_tokens[w] += end - start
            out.straddle_tokens[w] += end - start
            out.sums_per_worker[w] += 1
            out.rows_in[w] += end - edges[w][1]
    return out


def broadcast_seconds(nbytes: float, workers: int, design: Design, link: float) -> float:
    """``nbytes`` from the driver to every one of ``workers`` (see ``Design.layer_copy``)."""
    if nbytes <= 0 or workers < 1:
        return 0.0
    if design.layer_copy == "driver":
        return workers * nbytes / link
    if design.layer_copy == "tree":
        return math.ceil(math.log2(workers + 1)) * nbytes / link
    return nbytes / link


def sharded_seconds(nbytes: float, workers: int, rates: Rates) -> float:
    """Seconds to move ``nbytes`` of token rows split over the workers between them and the driver: the driver's
    share (``driver_share``: its link, its pickling) is serial, the rest runs on the workers at once."""
    parallel = min(workers, rates.lanes)
    return nbytes / rates.link * (rates.driver_share + (1.0 - rates.driver_share) / parallel)


def busiest_owner(rates: Rates, workers: int) -> float:
    """The busiest expert owner's routed tokens over the mean (1 with one owner)."""
    return rates.expert_imbalance if workers > 1 else 1.0


def distinct_owners(workers: int, top_k: int) -> float:
    """Expected distinct expert owners among a token's ``top_k`` experts (experts spread evenly)."""
    return workers * (1.0 - (1.0 - 1.0 / workers) ** top_k)


def _token_forwards(shape: Shape, cal: Calibration, workers: int, design: Design, rates: Rates) -> float:
    """Token-sharded forward calls (slowest worker: the most batches) plus routed experts on their owners."""
    per_batch = cal.tokens / cal.batches
    busiest = math.ceil(cal.batches / workers) * per_batch
    active = min(workers, cal.batches)
    speed = rates.forward * active_share(rates, active)
    if shape.experts and design.experts_sharded:
        token_passes, pair_flops = shape.token_pass_flops_experts_sharded(cal.length)
        pairs = cal.tokens * shape.top_k / workers * busiest_owner(rates, workers)
        return (sum(token_passes) * busiest + pair_flops * pairs) / speed
    return sum(shape.token_pass_flops(cal.length)) * busiest / speed


def _statistics(shape: Shape, cal: Calibration, workers: int, design: Design, rates: Rates, cost: LayerCost) -> None:
    """Hessian statistics of every group: ``worker_stats``, ``driver_reduce``, ``sums`` and the rows that
    travel for them (``bytes["hooked inputs"]`` / ``bytes["straddling rows"]``, in ``activations``)."""
    bounds = shard_bounds(cal, workers)
    wire = rates.wire_bytes
    for group in shape.groups():
        per_worker = [0.0] * workers
        second = [0.0] * workers  # relay mode: the straddling segments, formed in a call after the capture
        for item in group:
            stream = cal.tokens * item.share
            flops = gram_flops_per_token(item.width)
            if item.routed and design.experts_sharded:
                owned = math.ceil(item.copies / workers) * stream * busiest_owner(rates, workers)
                per_worker = [t + owned * flops / rates.stats for t in per_worker]
                continue
            if not design.hessian_on_workers:
                rows = item.copies * stream
                cost.driver_reduce += rows * flops / rates.reduce
                cost.bytes["hooked inputs"] = cost.bytes.get("hooked inputs", 0.0) + rows * item.width * wire
                cost.activations += sharded_seconds(rows * item.width * wire, workers, rates)
                continue
            _segment_statistics(item, stream, bounds, design, rates, cost, per_worker, second)
        for times in (per_worker, second):
            active = sum(1 for t in times if t > 0)
            cost.worker_stats += max(times) / active_share(rates, active) if active else 0.0
        if any(second):
            cost.calls += rates.call_latency  # the straddle call


def _segment_statistics(
    item: Input,
    stream: float,
    bounds: list[tuple[float, float]],
    design: Design,
    rates: Rates,
    cost: LayerCost,
    per_worker: list[float],
    second: list[float],
) -> None:
    """One input's statistics under ``hessian_on_workers`` (see :class:`Design`); ``second``: per worker, the
    straddling segments' products in relay mode (a call after the capture)."""
    segment = design.segment_chunks * chunk_tokens(item.width)
    split = split_segments(stream, segment, bounds, design.straddle_on)
    flops, one_sum, wire = gram_flops_per_token(item.width), sum_bytes(item.width), rates.wire_bytes
    relay = design.straddle_on == "relay"
    for w, tokens in enumerate(split.worker_tokens):
        adds = split.sums_per_worker[w] * one_sum / rates.device_sum_add if design.sum_reduce == "chain" else 0.0
        later = split.straddle_tokens[w] if relay else 0.0
        per_worker[w] += item.copies * ((tokens - later) * flops / rates.stats + adds)
        second[w] += item.copies * later * flops / rates.stats
    straddle_bytes = item.copies * split.driver_tokens * item.width * wire
    cost.driver_reduce += item.copies * split.driver_tokens * flops / rates.reduce
    cost.activations += sharded_seconds(straddle_bytes, len(bounds), rates)
    if relay:  # the later shards' rows back with the capture, then out to the owners: the driver's link twice
        relayed = item.copies * sum(split.rows_in) * item.width * wire
        cost.activations += 2 * sharded_seconds(relayed, len(bounds), rates)
        straddle_bytes += 2 * relayed
    else:
        cost.activations += item.copies * max(split.rows_in) * item.width * wire / rates.link
    cost.bytes["straddling rows"] = cost.bytes.get("straddling rows", 0.0) + straddle_bytes
    total_sums = item.copies * sum(split.sums_per_worker)
    if design.sum_reduce == "driver":
        nbytes = total_sums * one_sum
        cost.sums += nbytes / rates.link
        cost.driver_reduce += nbytes / rates.sum_add
    else:
        hops = sum(1 for s in split.sums_per_worker if s)
        blocks = gram_blocks(item.width) * (gram_blocks(item.width) + 1) // 2
        parts = min(blocks, max(1, math.ceil(one_sum / design.chain_part_bytes)))
        nbytes = item.copies * one_sum if total_sums else 0.0
        cost.sums += nbytes / rates.link * (1 + max(0, hops - 1) / parts)
        if total_sums:  # the pipeline's critical path: parts + hops - 1 calls, one after another
            cost.calls += item.copies * (parts + hops - 1) * rates.call_latency
    cost.bytes["segment sums"] = cost.bytes.get("segment sums", 0.0) + nbytes


@dataclass(frozen=True)
class Job:
    """One solve job: ``flops``, ``bytes_in`` (Hessian or sum, weights) and ``bytes_back`` (results) over the
    driver's link."""

    flops: float
    bytes_in: float
    bytes_back: float


def group_jobs(group: list[Input], design: Design, wire: int) -> tuple[list[Job], list[tuple[int, Job]]]:
    """(jobs the driver sends out, (count per owner, job) of routed experts solved where they are owned).
    Results: the dequantized weight (``wire`` bytes) plus 1-byte codes per weight, or the codes alone."""
    back = 1 if design.codes_only else wire + 1
    sent: list[Job] = []
    owned: list[tuple[int, Job]] = []
    for item in group:
        n = item.width
        shared_job = Job(solve_flops(n, sum(item.outs)), 8.0 * n * n, sum(item.outs) * n * back)
        if item.routed and design.experts_sharded:
            owned.append((item.copies, Job(shared_job.flops, 0.0, shared_job.bytes_back)))
            continue
        for _ in range(item.copies):
            if design.module_solves:
                sent += [Job(solve_flops(n, out), 4.0 * n * n + out * n * wire, out * n * back) for out in item.outs]
            else:
                weights = sum(item.outs) * n * wire
                sent.append(Job(shared_job.flops, shared_job.bytes_in + weights, shared_job.bytes_back))
    return sent, owned


def _row_split_solves(group: list[Input], workers: int, design: Design, rates: Rates, cost: LayerCost) -> int:
    """``solve_split="rows"``: the group's dense inputs one after another, each factorized once on one worker and
    its modules' rows swept on every worker; returns the calls (a factor call and a sweep call per input)."""
    wire, back = rates.wire_bytes, 1 if design.codes_only else rates.wire_bytes + 1
    calls = 0
    for item in group:
        n, rows = item.width, sum(item.outs)
        for _ in range(item.copies):
            factor = float(n) ** 3 / rates.solve
            sweep = rows * float(n) * n / workers / (rates.solve * active_share(rates, workers))
            cost.solve += factor + sweep
            moved = 4.0 * n * n + rows * n * wire + rows * n * back  # Hessian in, weight rows out, results back
            cost.solve_bytes += moved / rates.link + broadcast_seconds(4.0 * n * n, workers, design, rates.link)
            cost.bytes["solve jobs"] = cost.bytes.get("solve jobs", 0.0) + moved + 4.0 * n * n * workers
            calls += 2
    return calls


def _solves(shape: Shape, workers: int, design: Design, rates: Rates, cost: LayerCost) -> int:
    """Solve waves of every group (jobs round-robin over the workers, a wave waits for its slowest job;
    owned experts solved on their owners, one after another); returns the number of waves (calls)."""
    waves = 0
    for group in shape.groups():
        if design.solve_split == "rows":
            dense = [item for item in group if not (item.routed and design.experts_sharded)]
            waves += _row_split_solves(dense, workers, design, rates, cost)
            group = [item for item in group if item.routed and design.experts_sharded]
            if not group:
                continue
        sent, owned = group_jobs(group, design, rates.wire_bytes)
        compute = 0.0
        for first in range(0, len(sent), workers):
            wave = sent[first : first + workers]
            compute += max(j.flops for j in wave) / (rates.solve * active_share(rates, len(wave)))
            waves += 1
        for copies, job in owned:
            per_owner = math.ceil(copies / workers) * job.flops
            compute = max(compute, per_owner / (rates.solve * active_share(rates, workers)))
            waves += 1
        nbytes = sum(j.bytes_in + j.bytes_back for j in sent) + sum(c * j.bytes_back for c, j in owned)
        cost.solve += compute
        cost.solve_bytes += nbytes / rates.link
        cost.bytes["solve jobs"] = cost.bytes.get("solve jobs", 0.0) + nbytes
    return waves


def _parameters(shape: Shape, workers: int, design: Design, rates: Rates, cost: LayerCost) -> None:
    """The layer's first copy and the solved weights sent back to the workers."""
    wire = rates.wire_bytes
    sharded = bool(shape.experts) and design.experts_sharded
    routed = shape.routed_params() * wire
    broadcast = shape.layer_params() * wire - (routed if sharded else 0.0)
    ship_link = rates.ship_link or rates.link
    if design.workers_load_weights:  # every worker its part, all links at once
        cost.layer_ship = (broadcast + (routed / workers if sharded else 0.0)) / ship_link
    else:
        direct = routed / ship_link if sharded else 0.0  # each owned expert from the driver to its owner
        cost.layer_ship = broadcast_seconds(broadcast, workers, design, ship_link) + direct
    changed = (broadcast - shape.router_params() * wire) * ((1 / wire) if design.codes_only else 1.0)
    cost.changed_params = broadcast_seconds(changed, workers, design, rates.link)
    cost.bytes["layer copy"] = broadcast * workers + (routed if sharded else 0)
    cost.bytes["changed params"] = changed * workers


def _token_traffic(shape: Shape, cal: Calibration, workers: int, design: Design, rates: Rates, cost: LayerCost) -> None:
    """Layer inputs out with every call, replay outputs back, routed tokens and expert outputs."""
    wire, tokens = rates.wire_bytes, cal.tokens
    calls = len(shape.groups()) + 1
    per_call = tokens * shape.hidden * wire + cal.batches * cal.call_extra_bytes
    moved = 0.0 if design.inputs_resident else calls * per_call + tokens * shape.hidden * wire
    cost.activations += sharded_seconds(moved, workers, rates)
    cost.bytes["layer inputs and outputs"] = moved
    if not (shape.experts and design.experts_sharded):
        return
    copies = distinct_owners(workers, shape.top_k)
    dispatch = tokens * copies * shape.hidden * wire + tokens * shape.top_k * shape.hidden * wire
    if design.expert_dispatch == "driver":
        dispatch += tokens * shape.hidden * wire  # the routed rows reach the driver first
        cost.activations += dispatch / rates.link
    else:
        cost.activations += dispatch / workers * busiest_owner(rates, workers) / rates.link
    cost.bytes["routed tokens and expert outputs"] = dispatch


def layer_cost(shape: Shape, cal: Calibration, workers: int, design: Design, rates: Rates) -> LayerCost:
    """Seconds per layer of a GPTQ run of ``shape`` on ``workers`` workers (see the module docstring)."""
    if workers < 1:
        raise ValueError(f"workers: expected >= 1, found {workers}")
    cost = LayerCost()
    cost.forward = _token_forwards(shape, cal, workers, design, rates)
    _statistics(shape, cal, workers, design, rates, cost)
    waves = _solves(shape, workers, design, rates, cost)
    _parameters(shape, workers, design, rates, cost)
    _token_traffic(shape, cal, workers, design, rates, cost)
    cost.calls += (len(shape.groups()) + 1 + waves + 2 * len(shape.groups())) * rates.call_latency
    return cost


def one_device_cost(shape: Shape, cal: Calibration, rates: Rates) -> LayerCost:
    """The same run in one process on one device: the per-group forwards (a layer whose parked activations
    exceed the lockstep budget runs them; at these shapes all do), every Hessian product at ``stats``, every
    shared-input solve one after another, the layer loaded from host memory at ``host_link``; nothing else
    moves."""
    cost = LayerCost()
    cost.forward = sum(shape.token_pass_flops(cal.length)) * cal.tokens / rates.forward
    for group in shape.groups():
        for item in group:
            rows = item.copies * cal.tokens * item.share
            cost.worker_stats += rows * gram_flops_per_token(item.width) / rates.stats
            cost.solve += item.copies * solve_flops(item.width, sum(item.outs)) / rates.solve
    cost.layer_ship = shape.layer_params() * rates.wire_bytes / rates.host_link
    return cost
