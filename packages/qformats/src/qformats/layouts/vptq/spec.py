"""What a VPTQ module's tensors mean: codebook sizes, vector lengths and the input-channel groups.

A VPTQ config names pairs ``[outlier, main]`` (``vector_lens``, ``num_centroids``, ``num_res_centroids``;
-1 disables), ``npercent`` (percent of input channels given to the outlier codebook), ``group_size`` /
``group_num`` (at most one set; they split the non-outlier channels into contiguous codebook groups),
``enable_norm`` / ``norm_dim`` and ``enable_perm``. :class:`VPTQSpec` resolves them for one ``[out, in]``
module the way the reference runtime does:

* residual codebook on when ``num_res_centroids > 1`` (exactly 1 is refused: it has no index bits);
* outlier codebook on when ``outlier_vector_len > 0``, ``outlier_num_centroids > 1`` and ``npercent > 0``;
  its channels are the first ``ceil(npercent / 100 * in)``;
* ``group_num`` set: with outliers, the remainder of the division joins the outlier channels and every
  group holds ``(in - outlier) // group_num``; without, groups hold ``ceil((in - outlier) / group_num)``
  and the last one is padded;
* ``group_size`` set: ``ceil((in - outlier) / group_size)`` groups, the last one padded; neither set: one
  group of every non-outlier channel;
* index bits ``ceil(log2(num_centroids))`` (plus the residual's), one bitstream row of ``group_size``
  indices per ``vector_len`` output rows, in 32-bit words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import ConfigError

# Reference defaults (GPT-QModel 7.7.0 VPTQConfig).
DEFAULTS: dict[str, Any] = {
    "vector_lens": [-1, 8],
    "num_centroids": [-1, 4096],
    "num_res_centroids": [-1, 16],
    "npercent": 0.0,
    "group_size": -1,
    "group_num": -1,
    "enable_norm": False,
    "norm_dim": 0,
    "enable_perm": False,
}


def index_bits(num_centroids: int) -> int:
    """Bits that address ``num_centroids`` codebook entries."""
    return math.ceil(math.log2(num_centroids))


@dataclass(frozen=True)
class VPTQSpec:
    """One module's VPTQ settings (see the module docstring); raises ConfigError naming a bad field."""

    in_features: int
    out_features: int
    vector_len: int = 8
    num_centroids: int = 4096
    num_res_centroids: int = -1
    outlier_vector_len: int = -1
    outlier_num_centroids: int = -1
    npercent: float = 0.0
    group_size: int = -1
    group_num: int = -1
    enable_norm: bool = False
    norm_dim: int = 0
    enable_perm: bool = False

    def __post_init__(self) -> None:
        if self.in_features < 1 or self.out_features < 1:
            dims = f"in={self.in_features}, out={self.out_features}"
            raise ConfigError(f"VPTQ: module dims must be positive, found {dims}")
        if self.vector_len < 1:
            raise ConfigError(f"vector_lens[1]: expected a positive vector length, found {self.vector_len}")
        if self.num_centroids < 2:
            raise ConfigError(f"num_centroids[1]: expected at least 2 centroids, found {self.num_centroids}")
        if self.num_res_centroids == 1 or self.num_res_centroids == 0 or self.num_res_centroids < -1:
            raise ConfigError(
                f"num_res_centroids[1]: expected -1 (no residual) or at least 2, found {self.num_res_centroids}"
            )
        if self.npercent < 0 or self.npercent > 100:
            raise ConfigError(f"npercent: expected 0..100, found {self.npercent}")
        if self.npercent > 0 and not self.has_outliers:
            raise ConfigError("npercent > 0 needs vector_lens[0] > 0 and num_centroids[0] > 1 (the outlier codebook)")
        if self.group_size != -1 and self.group_num != -1:
            raise ConfigError("group_size and group_num: at most one may be set (the other -1)")
        for name in ("group_size", "group_num"):
            value = getattr(self, name)
            if value != -1 and value < 1:
                raise ConfigError(f"{name}: expected -1 or a positive integer, found {value}")
        if self.norm_dim not in (0, 1):
            raise ConfigError(f"norm_dim: expected 0 (per input channel) or 1 (per output row), found {self.norm_dim}")
        if self.index_bits + self.res_bits > 32:
            total = self.index_bits + self.res_bits
            raise ConfigError(f"num_centroids / num_res_centroids: {total} index bits exceed 32")
        outlier, size, count = self.groups
        if size < 1 or count < 1 or (self.group_num != -1 and count > self.in_features - self.initial_outliers):
            raise ConfigError(
                f"group_size / group_num: no valid grouping of in_features={self.in_features} "
                f"(group_size={self.group_size}, group_num={self.group_num}, outlier channels={outlier})"
            )

    @property
    def has_residual(self) -> bool:
        return self.num_res_centroids > 1

    @property
    def has_outliers(self) -> bool:
        return self.outlier_vector_len > 0 and self.outlier_num_centroids > 1 and self.npercent > 0

    @property
    def index_bits(self) -> int:
        return index_bits(self.num_centroids)

    @property
    def res_bits(self) -> int:
        return index_bits(self.num_res_centroids) if self.has_residual else 0

    @property
    def initial_outliers(self) -> int:
        if not self.has_outliers:
            return 0
        return max(0, min(self.in_features, math.ceil(self.npercent / 100.0 * self.in_features)))

    @property
    def groups(self) -> tuple[int, int, int]:
        """``(outlier_size, group_size, group_num)`` as resolved for this module."""
        outlier = self.initial_outliers
        rest = self.in_features - outlier
        if self.group_num != -1:
            if self.has_outliers:
                outlier += rest % self.group_num
                return outlier, (self.in_features - outlier) // self.group_num, self.group_num
            return outlier, -(-rest // self.group_num), self.group_num
        if self.group_size != -1:
            return outlier, self.group_size, -(-rest // self.group_size)
        return outlier, rest, 1

    @property
    def num_indices(self) -> int:
        """Index rows per group: ``ceil(out / vector_len)`` (the last one padded past ``out``)."""
        return -(-self.out_features // self.vector_len)

    @property
    def outlier_num_indices(self) -> int:
        return -(-self.out_features // self.outlier_vector_len) if self.has_outliers else 0

    @property
    def packed_words(self) -> int:
        """32-bit words per index row: ``ceil(group_size * (index_bits + res_bits) / 32)``."""
        return -(-self.groups[1] * (self.index_bits + self.res_bits) // 32)


def _pair(config: Mapping[str, Any], name: str) -> tuple[int, int]:
    value = config.get(name, DEFAULTS[name])
    if not isinstance(value, (list, tuple)) or len(value) != 2 or not all(isinstance(v, int) for v in value):
        raise ConfigError(f"{name}: expected [outlier, main] integers, found {value!r}")
    return int(value[0]), int(value[1])


def spec_from_config(config: Mapping[str, Any] | Any, in_features: int, out_features: int) -> VPTQSpec:
    """The :class:`VPTQSpec` of one ``[out, in]`` module from a VPTQ config (reference defaults for absent fields).

    ``config`` is the raw ``quantization_config`` mapping or a parsed ``QuantizeConfig`` (its ``settings``
    carry the VPTQ fields and ``group_size`` is its own).
    """
    if not isinstance(config, Mapping):
        config = {**config.settings, "group_size": config.group_size}
    outlier_len, vector_len = _pair(config, "vector_lens")
    outlier_centroids, centroids = _pair(config, "num_centroids")
    _, res_centroids = _pair(config, "num_res_centroids")
    return VPTQSpec(
        in_features=in_features,
        out_features=out_features,
        vector_len=vector_len,
        num_centroids=centroids,
        num_res_centroids=res_centroids,
        outlier_vector_len=outlier_len,
        outlier_num_centroids=outlier_centroids,
        npercent=float(config.get("npercent", DEFAULTS["npercent"])),
        group_size=int(config.get("group_size", DEFAULTS["group_size"])),
        group_num=int(config.get("group_num", DEFAULTS["group_num"])),
        enable_norm=bool(config.get("enable_norm", DEFAULTS["enable_norm"])),
        norm_dim=int(config.get("norm_dim", DEFAULTS["norm_dim"])),
        enable_perm=bool(config.get("enable_perm", DEFAULTS["enable_perm"])),
    )
