"""GPTQ: Hessian-aware quantization of one linear weight from streamed calibration activations."""

from __future__ import annotations

import copy
import math

import torch

from .column_order import ColumnPlan, plan_columns
from .errors import ShapeError
from .fallback import FallbackPolicy, fall_back
from .formed_hessian import FormedHessian
from .gptq_solve import SolveOutput, solve, static_params
from .group_params import gptq_params
from .hessian import HessianAccumulator, LowerGram
from .hessian_inverse import DampedInverse, damped_inverse
from .result import QuantResult, build_logical, check_weight, stored_dequantized
from .spec import QuantSpec


class GPTQ:
    """Accumulate activations for one linear layer (``in_features`` inputs), then solve its weight.

    ``add_batch(x [..., in], mask [...] | None)`` streams activations (masked-out tokens excluded);
    ``quantize(weight [out, in])`` returns a :class:`QuantResult`. The Hessian sum is kept in float64 and
    the solve runs in float32, so the same inputs give the same bits on every run and thread count.
    """

    algorithm = "gptq"

    def __init__(self, in_features: int, spec: QuantSpec) -> None:
        self._start(spec, HessianAccumulator(in_features))

    def _start(self, spec: QuantSpec, statistics: HessianAccumulator | FormedHessian) -> None:
        """The fields of a solver of ``statistics`` under ``spec`` (no factorisation yet)."""
        self.spec = spec
        self.in_features = statistics.in_features
        self._acc = statistics
        #: factorisations of the current Hessian by :func:`factor_key` (shared with :meth:`with_spec` views)
        self._factors: dict[tuple[object, ...], tuple[torch.Tensor, ColumnPlan, DampedInverse]] = {}

    @staticmethod
    def from_hessian(hessian: torch.Tensor, nsamples: int, spec: QuantSpec) -> GPTQ:
        """A solver of a Hessian formed elsewhere: ``hessian`` float32 ``[in, in]`` as :meth:`hessian` gave it
        (``2/N * sum x xᵀ``; not changed by the solve) and ``nsamples`` = ``N``. :meth:`quantize` then gives
        the bits the accumulating solver gives (its solve reads nothing else); it takes no batches and has no
        state dict (:class:`~qalgos.formed_hessian.FormedHessian`). Always a plain GPTQ (GPTAQ and QQQ keep
        more statistics than the Hessian)."""
        solver = GPTQ.__new__(GPTQ)  # no accumulator: its zeroed float64 sum would be [in, in] for nothing
        solver._start(spec, FormedHessian(hessian, nsamples))
        return solver

    def with_spec(self, spec: QuantSpec) -> GPTQ:
        """A solver of the same statistics under another ``spec`` (a module's own width or group size): it
        shares this accumulator (nothing is copied; releasing the statistics releases them for both) and the
        factorisation cache, so specs that order, group and damp alike (:func:`factor_key`) factorise once.
        ``self`` when ``spec`` is this solver's."""
        if spec == self.spec:
            return self
        view = copy.copy(self)
        view.spec = spec
        return view

    @property
    def nsamples(self) -> int:
        """Calibration tokens accumulated so far."""
        return self._acc.nsamples

    def add_batch(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> int:
        """Add activations ``x [..., in]``; ``mask [...]`` bool keeps True tokens. Returns tokens added."""
        self._factors.clear()
        return self._acc.add_batch(x, mask)

    def rows_to_boundary(self) -> int:
        """Rows the accumulator takes before its next segment boundary (0 at one; see :mod:`qalgos.hessian`)."""
        return self._acc.rows_to_boundary()

    def add_segment(self, total: LowerGram, tokens: int) -> None:
        """Add one whole segment's float64 sum (:func:`qalgos.hessian.segment_sum`, formed anywhere) at a segment
        boundary: the same bits as :meth:`add_batch` of its ``tokens`` rows."""
        self._factors.clear()
        self._acc.add_segment(total, tokens)

    def chain_start(self) -> LowerGram | None:
        """Where a chain of segment sums formed elsewhere starts
        (:meth:`qalgos.hessian.HessianAccumulator.chain_start`)."""
        return self._acc.chain_start()

    def add_chained(self, total: LowerGram, segments: int) -> None:
        """Take a chained total of ``segments`` whole segments added in order to :meth:`chain_start`'s
        (:meth:`qalgos.hessian.HessianAccumulator.add_chained`): the same bits as :meth:`add_segment` of each."""
        self._factors.clear()
        self._acc.add_chained(total, segments)

    def hessian(self, *, release: bool = False) -> torch.Tensor:
        """The float32 Hessian ``2/N * sum x xᵀ`` ``[in, in]`` accumulated so far (what a solve reads).
        ``release``: free the statistics while forming it (nothing more will be solved from them here)."""
        if release:
            self._factors.clear()
        return self._acc.hessian(release=release)

    def state_dict(self) -> dict[str, torch.Tensor | int | float]:
        """Resume state: ``hessian_sum`` float64 ``[in, in]``, ``pending`` float32 ``[k, in]`` (tokens not yet
        in the sum), ``nsamples``, ``in_features``."""
        return dict(self._acc.state_dict())

    def load_state_dict(self, state: dict[str, torch.Tensor | int | float]) -> None:
        """Continue from a :meth:`state_dict` (raises :class:`~qalgos.errors.StateError` naming a bad key)."""
        self._factors.clear()
        self._acc.load_state_dict(state)

    def quantize(
        self,
        weight: torch.Tensor,
        total_tokens: int | None = None,
        policy: FallbackPolicy | None = None,
        *,
        release_statistics: bool = False,
    ) -> QuantResult:
        """Solve ``weight [out, in]``. With ``total_tokens`` and ``policy`` a module that saw too few tokens
        falls back to RTN; a module with no token, an unfactorisable Hessian or a non-finite loss always
        does. Every fallback is logged and recorded in ``QuantResult.fallback``. ``release_statistics``:
        free the float64 Hessian sum as soon as the solve has its float32 copy (the last module reading
        this input; later calls raise :class:`~qalgos.errors.StateError`)."""
        check_weight(weight)
        if weight.shape[1] != self.in_features:
            raise ShapeError(
                f"weight: expected [out, {self.in_features}] (in_features of this GPTQ), found {tuple(weight.shape)}"
            )
        n = self.nsamples
        if policy is not None and total_tokens is not None:
            reason = policy.reason(n, total_tokens)
        else:
            reason = "no calibration token reached this module" if n == 0 else None
        if reason is not None:
            if release_statistics:
                self._release()
            return fall_back(weight, self.spec, reason, n)
        return self._solve(weight, release_statistics)

    def _factor(self, release_statistics: bool = False) -> tuple[torch.Tensor, ColumnPlan, DampedInverse]:
        """Dead columns, column plan and damped inverse factor of the current Hessian. They depend on the
        Hessian and the spec's ordering, grouping and damping alone (:func:`factor_key`), so modules sharing
        this accumulator (q/k/v, gate/up) reuse one factorisation; any new statistics drop it.
        ``release_statistics``: free the float64 sum as soon as the float32 Hessian is formed, before the
        factorisation's work matrices exist (the last reader of this input)."""
        key = factor_key(self.spec)
        prepared = self._factors.get(key)
        if prepared is None:
            hessian = self._acc.hessian(release=release_statistics)  # frees the sum while forming it
            dead = torch.diagonal(hessian) == 0
            if bool(dead.any()):
                hessian[dead, dead] = 1.0
            plan = plan_columns(torch.diagonal(hessian), self.spec)
            if not plan.is_identity():  # rows, then columns: two [in, in] matrices live at most, not three
                rows = hessian.index_select(0, plan.perm)
                del hessian
                hessian = rows.index_select(1, plan.perm)
                del rows
            spec = self.spec  # the Hessian is ours and exactly symmetric: the first factorisation works in it
            inverse = damped_inverse(hessian, spec.damp_percent, spec.damp_auto_increment, consume=True)
            del hessian
            prepared = (dead, plan, inverse)
            self._factors[key] = prepared
        return prepared

    def _column_solve(
        self,
        wt: torch.Tensor,
        upper: torch.Tensor,
        plan: ColumnPlan,
        dead: torch.Tensor,
        scales: torch.Tensor,
        zeros: torch.Tensor,
    ) -> SolveOutput:
        """The column solve over ``wt [in, out]`` in visiting order (a subclass adds its own terms; ``dead``
        ``[in]`` bool marks the zeroed dead columns in natural order)."""
        return solve(wt, upper, plan, self.spec, scales, zeros)

    def _release(self) -> None:
        """Free the float64 sum and any shared factorisation (``release_statistics``)."""
        self._acc.release()
        self._factors.clear()

    def _solve(self, weight: torch.Tensor, release_statistics: bool = False) -> QuantResult:
        spec = self.spec
        dead, plan, inverse = self._factor(release_statistics)
        if release_statistics:  # the last module reading this input: nothing more to share
            self._release()
        if inverse.upper is None:
            reason = f"Hessian unusable: Cholesky failed for every damping tried ({inverse.attempts} attempts)"
            return fall_back(weight, spec, reason, self.nsamples)
        wt = transposed_in_order(weight, plan, dead)  # the solve runs on the CPU, on this copy
        if spec.group_size == -1 or spec.static_groups:  # parameters of the natural groups, before any update
            w = torch.empty(wt.shape[1], wt.shape[0], dtype=torch.float32)  # contiguous, as the weight was
            w[:, plan.perm] = wt.T
            if spec.group_size == -1:
                scale, zero = gptq_params(w, spec)
                scales, zeros = scale[None, :].clone(), zero[None, :].clone()
            else:
                scales, zeros = static_params(w, spec)
            del w
        else:
            scales = torch.empty(spec.groups(self.in_features), wt.shape[1], dtype=torch.float32)
            zeros = torch.empty_like(scales)
        out = self._column_solve(wt, inverse.upper, plan, dead, scales, zeros)
        loss = out.loss_sum / self.nsamples
        if not math.isfinite(loss):
            return fall_back(weight, spec, f"GPTQ loss is not finite ({loss})", self.nsamples)
        inv = torch.argsort(plan.perm)
        codes = out.codes_t[inv].T
        meta: dict[str, object] = {"algorithm": self.algorithm, "damp": inverse.damp}
        if inverse.floor:
            meta["damp_floor"] = inverse.floor
        logical = build_logical(codes, out.scales, out.zeros, plan.g_idx(), spec, meta)
        return QuantResult(logical, stored_dequantized(logical, weight), loss, inverse.damp, self.nsamples, None)


def transposed_in_order(weight: torch.Tensor, plan: ColumnPlan, dead: torch.Tensor) -> torch.Tensor:
    """The solve's float32 copy ``Wt [in, out]`` of ``weight [out, in]`` (any float dtype, any device; the copy is
    on the CPU): ``Wt[k] = W[:, perm[k]]`` in visiting order, the ``dead [in]`` columns (natural order) zeroed.

    Transposed and gathered in ``weight``'s own dtype, then widened: a bfloat16 weight moves half the bytes
    through the two reorderings (a ``[4096, 14336]`` one: 0.44 -> 0.15 CPU s here against widening first and
    gathering columns), and the values are the same (widening is exact and commutes with copies).
    ``weight`` is never written."""
    source = weight.detach()
    if plan.is_identity():
        wt = torch.empty(source.shape[1], source.shape[0], dtype=torch.float32)
        wt.copy_(source.T)
    else:
        rows = source.T.contiguous().index_select(0, plan.perm.to(source.device))
        wt = rows.to(device="cpu", dtype=torch.float32)  # index_select allocated rows: never the caller's tensor
    if bool(dead.any()):
        wt[dead[plan.perm]] = 0.0
    return wt


def factor_key(spec: QuantSpec) -> tuple[object, ...]:
    """The spec fields a GPTQ factorisation depends on (column order, group map, damping); specs equal on
    these (e.g. differing only in ``bits``) share one factorisation of a Hessian."""
    return (
        spec.group_size,
        spec.desc_act,
        spec.static_groups,
        spec.act_group_aware,
        spec.damp_percent,
        spec.damp_auto_increment,
    )
