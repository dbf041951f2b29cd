"""Turn a strategy's measurement blocks into noisy measurements.

For every block (clique C, query Q over C's marginal, relative weight w) the engine counts
the exact marginal x_C, applies an *integer* matrix M to it, and adds independent discrete
noise (``dpsql.privacy.noise``).  Integer matrices keep the measured values on the lattice
ℤ so that exact discrete samplers apply (Canonne–Kamath–Steinke 2020):

* integer-valued factors (Identity, Total, Prefix, ranges, marginals) are used as they are;
* real-valued factors (OPT_0 / OPT_⊗ strategies) are put on a declared grid: each factor F
  becomes M = round(F / (r·max|F|)), i.e. the strategy actually measured is the rounded
  one, with scale s = ∏ r·max|F|.  Sensitivity and accounting use M itself, so the
  rounding costs accuracy, never privacy (``docs/privacy.md``, "Real-valued strategies").
  The relative resolution r is 1/4096 unless that would make the product lattice so fine
  that the lattice noise σ/s exceeds 2⁴⁰ (a Kron of d real factors has spacing ∝ r^d);
  then r is coarsened just enough (:func:`lattice_blocks`).  The bound is the sampler's
  (σ ≤ 2⁵⁰, ``noise.discrete_gaussian``) with room to spare; its cost does not grow with σ
  and every sum of a lattice value and its noise is exact (``noise.add_exact``), so it is
  no privacy limit.  It was 2²² until issue 32: at a line-item bound of 128 the rounding it
  forced collapsed HDMM's real factors on TPC-H's price sums.

Noise calibration (Gaussian).  The planner's strategy is the stack of rows w_b·Q_b with one
common σ.  Measuring M_b x + Z_b with Z_b ~ N_ℤ(0, σ_b²), σ_b = σ/(w_b s_b), is that same
mechanism up to post-processing.  Its zCDP cost is at most Σ_b k²Δ₂(M_b)²/(2σ_b²) where k is
the number of rows one privacy unit may contribute (CKS20 Thm 14 for independent
coordinates; the column-wise maximum is bounded by the sum of per-block maxima); under a
view's group bound, k² is S² ≤ k² for the blocks that separate its groups (``rows_sq``,
``docs/privacy.md`` §2a).  σ is
chosen so that this equals the requested ρ, then the exact rational cost of the σ_b
actually used is computed with ``fractions`` and never exceeds the request.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsql.errors import LedgerVersionError
from dpsql.linalg import Identity, Kron, QueryMatrix
from dpsql.linalg.lattice import StructuredFactor, scaled_identity
from dpsql.measure.union_cost import union_max
from dpsql.plan.views import GroupBound
from dpsql.privacy import noise as _noise

GRID = 1 << 12  # finest resolution of real-valued factors: relative rounding error ≤ 2^-13
# Noise std on the lattice.  The samplers are exact to σ (Laplace: scale) 2⁵⁰ at a cost that
# does not depend on it (docs/privacy.md, "Exact sampling"); below 2⁴⁰ a sample leaves int64
# with probability < 2·exp(-2⁴³), and even then stays exact (add_exact widens to Python ints).
MAX_LATTICE_SIGMA = float(1 << 40)
_INT64_SAFE = 1 << 22  # |M x| ≤ (max row sum of |M|)·N stays in int64 for N < 2^40 rows


@dataclass(frozen=True)
class LatticeBlock:
    """A block ready to measure: integer factors (one per clique attribute, or one joint
    factor over the flattened clique), a scale, and its noise weight from the planner."""

    clique: tuple[str, ...]
    # int64 matrices; one read from a payload may be its structure (``linalg.lattice``)
    factors: tuple[np.ndarray | StructuredFactor, ...]
    scale: float                      # measured value = scale · (M x + Z)
    weight: float
    # A block of binning offsets (``dpsql.measure.offsets``): M is applied to the per-cell
    # sums of ``offsets``' lattice offsets instead of the counts; one record moves one of
    # those sums by at most ``bound`` (S) in size, which multiplies the sensitivity.
    offsets: str | None = None
    bound: int = 1

    @property
    def joint(self) -> bool:
        return len(self.factors) == 1 and len(self.clique) != 1

    def l2_sensitivity_sq(self) -> int:
        """Δ₂(M)² exactly: Kron column norms multiply (thesis §3.4); times S² for offsets
        (a record changes one cell of the offset sums by at most S)."""
        out = self.bound * self.bound
        for f in self.factors:
            out *= _noise.lattice_sensitivity2(f)
        return out

    def l1_sensitivity(self) -> int:
        out = self.bound
        for f in self.factors:
            out *= int(np.abs(f.astype(object)).sum(axis=0).max())
        return out

    def rows(self) -> int:
        return int(np.prod([f.shape[0] for f in self.factors]))

    def apply(self, counts: np.ndarray) -> np.ndarray:
        """M x exactly (one factor per axis, thesis Algorithm 1): in int64 when the factors'
        row sums bound every value safely, otherwise in Python integers."""
        bound = 1 if self.offsets is None else 1 << 22   # offset sums are up to 2²¹·N
        for f in self.factors:
            bound *= int(np.abs(f.astype(object)).sum(axis=1).max(initial=0))
        dtype = np.int64 if bound <= _INT64_SAFE else object
        x = np.asarray(counts, dtype=np.int64).astype(dtype)
        factors = [f.astype(dtype) for f in self.factors]
        if self.joint or len(factors) == 0:
            flat = x.reshape(-1)
            return (factors[0] @ flat) if factors else flat.copy()
        x = x.reshape(tuple(f.shape[1] for f in factors))
        for axis, f in enumerate(factors):
            x = np.moveaxis(np.tensordot(f, x, axes=([1], [axis])), 0, axis)
        return x.reshape(-1)

    def query(self) -> QueryMatrix:
        """The (scaled) query over the clique marginal, for reconstruction."""
        mats = [_as_matrix(f) for f in self.factors]
        q = mats[0] if len(mats) == 1 else Kron(mats)
        return q if self.scale == 1.0 else self.scale * q


def _as_matrix(f: np.ndarray | StructuredFactor) -> QueryMatrix:
    from dpsql.linalg import Explicit
    if f.shape[0] == f.shape[1] and f.shape[0] > 0 and scaled_identity(f) == 1.0:
        return Identity(f.shape[0])
    return Explicit(f.astype(np.float64))


@dataclass(frozen=True)
class _Basis:
    """A planner factor C·S over a large attribute: real coefficients C over an integer
    basis S of the workload's row space (plan/large.py).  Only C is rounded, so the
    measured rows span exactly S's row space (rounding C·S itself would tilt them out of
    it and the queries they were planned for would lose support)."""

    coef: np.ndarray
    basis: np.ndarray

    def dense(self) -> np.ndarray:
        return self.coef @ self.basis


def _factor(f: QueryMatrix) -> np.ndarray | _Basis:
    from dpsql.linalg import Explicit, Product
    if isinstance(f, Product) and isinstance(f.left, Explicit) and isinstance(f.right, Explicit):
        s = np.asarray(f.right.array, dtype=np.float64)
        if _is_integer(s):
            return _Basis(np.asarray(f.left.dense(), dtype=np.float64), s)
    return np.asarray(f.dense(), dtype=np.float64)


def _dense_factors(clique: Sequence[str], query: QueryMatrix) -> list:
    if isinstance(query, Kron) and len(query.factors) == len(clique):
        return [_factor(f) for f in query.factors]
    return [_factor(query)]


def _is_integer(d) -> bool:
    if isinstance(d, _Basis):
        return False
    return bool(np.all(d == np.round(d)) and np.abs(d).max(initial=0) < 2**31)


def _top(d) -> float:
    return float(np.abs(d.coef if isinstance(d, _Basis) else d).max())


def to_lattice(clique: Sequence[str], query: QueryMatrix, weight: float,
               resolution: float = 1.0 / GRID) -> LatticeBlock:
    """Integer version of a planner block; real factors rounded at relative ``resolution``."""
    factors, scale = [], 1.0
    for d in _dense_factors(clique, query):
        if _is_integer(d):
            factors.append(d.astype(np.int64))
            continue
        top = _top(d)
        if top == 0:
            factors.append(np.zeros(d.dense().shape if isinstance(d, _Basis) else d.shape,
                                    dtype=np.int64))
            continue
        grid = top * resolution
        if isinstance(d, _Basis):
            k = _noise.round_to_grid(d.coef, grid).astype(object)
            m = k @ d.basis.astype(np.int64).astype(object)
            factors.append(m.astype(np.int64))
        else:
            factors.append(_noise.round_to_grid(d, grid).astype(np.int64))
        scale *= grid
    return LatticeBlock(tuple(clique), tuple(factors), float(scale), float(weight))


def _real_sensitivity(clique, query, p: int) -> float:
    out = 1.0
    for d in _dense_factors(clique, query):
        d = d.dense() if isinstance(d, _Basis) else d
        out *= float((np.abs(d) ** p).sum(axis=0).max(initial=0)) ** (1.0 / p)
    return out


def rows_sq(clique: Sequence[str], factors: Sequence[Any], unit_rows: int,
            groups: GroupBound | None = None) -> int:
    """The squared row factor of one block's L2 sensitivity: k² (k = ``unit_rows``), or,
    under a group bound, ``groups.l2_sq(k)`` when the block *separates* the groups — every
    group attribute is in its clique and each row of that attribute's factor has at most
    one non-zero entry, so each measured value reads one group only and the values of
    different groups are disjoint coordinates (``docs/privacy.md`` §2a, "Groups per
    person").  A joint factor over several attributes is not inspected: k² holds for it."""
    k2 = int(unit_rows) * int(unit_rows)
    if groups is None or not set(groups.attributes) <= set(clique) or len(factors) != len(clique):
        return k2
    for attr, f in zip(clique, factors):
        if attr in groups.attributes:
            d = f.dense() if isinstance(f, _Basis) else np.asarray(f)
            if d.ndim != 2 or bool(np.any((d != 0).sum(axis=1) > 1)):
                return k2
    return min(k2, groups.l2_sq(unit_rows))


def ordered_rows_sq(group_attributes: Sequence[str], column: str, unit_rows: int,
                    groups: GroupBound | None = None) -> int:
    """The squared row factor of an ordered strategy's blocks (``dpsql.measure.ordered``): a
    tree or Toeplitz root over ``column`` measured once per cell of ``group_attributes``
    (I_G ⊗ T), so each row reads one cell of every group attribute.  Under a group bound whose
    attributes are all among them (and not the column, whose rows span ranges) the blocks
    separate the groups: ``groups.l2_sq(k)``; otherwise k² (``docs/privacy.md`` §2a)."""
    k2 = int(unit_rows) * int(unit_rows)
    if groups is None or column in groups.attributes or not set(groups.attributes) <= set(group_attributes):
        return k2
    return min(k2, groups.l2_sq(unit_rows))


def effective_rows_sq(blocks, unit_rows: int, groups: GroupBound | None = None) -> float:
    """The squared row factor the noise of planner blocks ``(clique, query, weight)`` will
    carry on average: Σ_b rows_sq_b·Δ_b²·w_b² / Σ_b Δ_b²·w_b² (k² without a group bound or
    when no block separates the groups), as ``calibrate`` sets one σ for all blocks."""
    k2 = float(int(unit_rows) ** 2)
    if groups is None:
        return k2
    num = den = 0.0
    for c, q, w in blocks:
        d = (_real_sensitivity(c, q, 2) * w) ** 2
        num += rows_sq(c, _dense_factors(c, q), unit_rows, groups) * d
        den += d
    return num / den if den > 0 else k2


def lattice_blocks(blocks, rho: Fraction | float, *, family: str = "gaussian",
                   unit_rows: int = 1, groups: GroupBound | None = None) -> tuple[list[LatticeBlock], NoisePlan]:
    """Lattice versions of planner blocks ``(clique, query, weight)`` and their noise plan.

    The noise each block will get (in query units) is estimated from the real strategy;
    each block with k real factors is rounded at relative resolution
    r = max(1/4096, (σ_q / (2⁴⁰ ∏ max|F|))^(1/k)), the finest for which the lattice noise
    σ_q/s stays below 2⁴⁰ (s = ∏ r·max|F| is the lattice spacing).  After exact
    calibration a block still above the bound is coarsened (r doubled) and all are
    recalibrated; the bound only keeps the sampler's tables small, it is no privacy limit.
    """
    blocks = list(blocks)
    p = 2 if family == "gaussian" else 1
    sens = [_real_sensitivity(c, q, p) for c, q, _ in blocks]
    rho_f = float(rho)   # an estimate of the noise only: calibrate checks the cost exactly
    if family == "gaussian":
        k2 = [rows_sq(c, _dense_factors(c, q), unit_rows, groups) for c, q, _ in blocks]
        sigma = math.sqrt(sum(r * (s * w) ** 2 for r, s, (_, _, w) in zip(k2, sens, blocks)) / (2 * rho_f))
    else:
        sigma = sum(unit_rows * s * w for s, (_, _, w) in zip(sens, blocks)) / math.sqrt(2 * rho_f) * math.sqrt(2)
    res = []
    for (clique, query, w) in blocks:
        real = [d for d in _dense_factors(clique, query) if not _is_integer(d)]
        r = 1.0 / GRID
        if real and w > 0:
            top = math.prod(_top(d) for d in real if _top(d) > 0)
            need = (sigma / w) / (MAX_LATTICE_SIGMA * top)
            if need > 0:
                r = max(r, need ** (1.0 / len(real)))
        res.append(min(r, 1.0))
    for _ in range(64):
        lattice = [to_lattice(c, q, w, r) for (c, q, w), r in zip(blocks, res)]
        plan = calibrate(lattice, rho, family=family, unit_rows=unit_rows, groups=groups)
        limit = MAX_LATTICE_SIGMA ** 2 if family == "gaussian" else MAX_LATTICE_SIGMA
        over = [i for i, prm in enumerate(plan.params)
                if float(prm) > limit and any(not _is_integer(d) for d in _dense_factors(*blocks[i][:2]))]
        if not over:
            return lattice, plan
        for i in over:
            res[i] = min(1.0, res[i] * 2)
    return lattice, plan


@dataclass(frozen=True)
class NoisePlan:
    family: str                 # "gaussian" | "laplace"
    params: tuple[Fraction, ...]  # σ_b² (gaussian) or scale b_b (laplace), on the lattice
    rho: Fraction               # exact cost


def calibrate(blocks: Sequence[LatticeBlock], rho: Fraction | float, *, family: str = "gaussian",
              unit_rows: int = 1, groups: GroupBound | None = None,
              row_factors: Sequence[int] | None = None) -> NoisePlan:
    """Per-block noise so that the total zCDP cost is ≤ ``rho`` (exactly computed: ``rho``
    may be an exact Fraction; the float arithmetic below only finds the noise, which the
    1e-9 nudge makes large enough for the exact check to pass).  Under a group bound a
    block that separates the groups has the smaller squared row factor ``rows_sq`` (L2
    only: Laplace's L1 factor stays k).  ``row_factors`` gives each block's squared row
    factor directly (≤ k², Gaussian only), for blocks ``rows_sq`` cannot inspect (an ordered
    strategy's: ``ordered_rows_sq``)."""
    if not rho > 0:
        raise ValueError("rho must be positive")
    if row_factors is not None and (len(row_factors) != len(blocks) or family != "gaussian"
                                    or any(not 1 <= int(r) <= unit_rows * unit_rows for r in row_factors)):
        raise ValueError("row_factors: one per block, each in [1, unit_rows²], Gaussian noise only")
    budget, rho = Fraction(rho), float(rho)
    eff = [b.weight * b.scale for b in blocks]
    if family == "gaussian":
        k2 = ([int(r) for r in row_factors] if row_factors is not None
              else [rows_sq(b.clique, b.factors, unit_rows, groups) for b in blocks])
        sens = [b.l2_sensitivity_sq() for b in blocks]
        total = sum(r * s * e * e for r, s, e in zip(k2, sens, eff))
        # one record sits in one cell: the union's sensitivity at its worst cell, not the sum of
        # each block's worst (union_cost; docs/privacy.md "One σ for a union of blocks").  With
        # one row factor for all: under a group bound the blocks' factors differ (§2a)
        union = (row_factors is None and len(blocks) > 1 and len(set(k2)) == 1
                 and all(isinstance(b, LatticeBlock) and all(isinstance(f, np.ndarray) for f in b.factors)
                         for b in blocks))
        if union:
            found = union_max(blocks, [k2[0] * e * e for e in eff])
            union = found is not None
            if found is not None:
                total = min(total, float(found))
        sigma2 = total / (2.0 * rho)
        params = []
        for e in eff:
            # float → exact rational, nudged up so the rational cost cannot exceed rho
            params.append(Fraction(sigma2 / (e * e) * (1 + 1e-9)))
        cost = sum((Fraction(r * s) / (2 * p) for r, s, p in zip(k2, sens, params)), Fraction(0))
        if union:
            exact = union_max(blocks, [Fraction(k2[0]) / (2 * p) for p in params])
            if exact is not None:
                cost = min(cost, Fraction(exact))
    elif family == "laplace":
        # pure ε-DP costs ε²/2 in zCDP (thesis Prop. 4); ε = Σ_b kΔ₁(M_b)/b_b
        eps = math.sqrt(2.0 * rho)
        sens1 = [b.l1_sensitivity() for b in blocks]
        total = sum(unit_rows * s * e for s, e in zip(sens1, eff))
        params = [Fraction(total / (eps * e) * (1 + 1e-9)) for e in eff]
        eps_exact = sum((Fraction(unit_rows * s) / p for s, p in zip(sens1, params)), Fraction(0))
        cost = eps_exact * eps_exact / 2
    else:
        raise ValueError(f"unknown noise family {family!r}")
    if cost > budget:
        raise AssertionError("calibrated cost exceeds the request")
    return NoisePlan(family, tuple(params), cost)


def noisy_values(block: LatticeBlock, exact: np.ndarray, param: Fraction, family: str) -> np.ndarray:
    """Lattice value plus exact discrete noise, rescaled to the query's units."""
    if family == "gaussian":
        z = _noise.discrete_gaussian(param, exact.shape[0])
    else:
        z = _noise.discrete_laplace(param, exact.shape[0])
    return _noise.add_exact(exact, z).astype(np.float64) * block.scale


def stddev(block: LatticeBlock, param: Fraction, family: str) -> float:
    """Noise standard deviation in the query's units (used to weight the PGM loss).

    For the discrete Gaussian the variance is at most σ² (CKS20 Prop. 19); the discrete
    Laplace with scale b has variance 2e^{-1/b}/(1-e^{-1/b})² ≤ 2b²."""
    if family == "gaussian":
        return math.sqrt(float(param)) * block.scale
    b = float(param)
    q = math.exp(-1.0 / b)
    return math.sqrt(2 * q) / (1 - q) * block.scale


#: The fit weights a measurement whose noise is below this many lattice units as if it had
#: this much (``fit_stddev``).  The discrete Gaussian's variance vanishes like e^{-1/2σ²} as σ
#: falls (σ = 0.1 gives 10⁻²¹): without a floor the weights overflow, and a thousandth of a
#: lattice step is already far below what any answer is rounded to.
FIT_STDDEV_FLOOR = 1e-3


def discrete_gaussian_variance(sigma2: float) -> float:
    """Var N_ℤ(0, σ²) = Σ_k k² e^{-k²/2σ²} / Σ_k e^{-k²/2σ²}, summed directly.

    It is below σ² (CKS20 Prop. 19) and far below it for σ < 1/2: at σ = 0.22 it is
    6.7·10⁻⁵ (sd 0.008, against σ = 0.22): such noise is 0 almost always.  By Poisson
    summation the relative difference from σ² is O(σ² e^{-2π²σ²}): below 10⁻³⁰ for σ ≥ 2,
    where σ² is returned."""
    sigma2 = float(sigma2)
    if sigma2 >= 4.0:
        return sigma2
    if sigma2 <= 0.0:
        return 0.0
    k = np.arange(1, 64, dtype=np.float64)   # e^{-k²/8} < 10⁻²⁰⁰ beyond k = 63 (σ < 2)
    w = np.exp(-k * k / (2.0 * sigma2))
    return float(2.0 * np.dot(k * k, w) / (1.0 + 2.0 * w.sum()))


def fit_stddev(block: LatticeBlock, sd: float, family: str) -> float:
    """The standard deviation the fit weights a released block by: its noise's actual one.

    ``sd`` is the released ``stddev`` (the Gaussian's parameter σ times the scale, which
    bounds the discrete Gaussian's spread and is what the reported standard errors use:
    conservative).  Weighted least squares with the inverse *actual* variances is the best
    linear unbiased estimate whatever the noise's shape (Gauss–Markov), and the PGM loss is
    that least squares over the marginal polytope (thesis §4.3, Problem 4; ICML 2019
    appendix C.2, unequal noise).  Weighting by σ instead overweights blocks with σ ≲ 1/2,
    whose noise is nearly always 0, against coarse ones: on NLTCS at ε = 100 a block with
    σ = 131 then moved marginals that blocks with σ = 0.22 had measured exactly
    (bench/RESULTS.md, issue 17).  The Laplace ``sd`` is already the discrete Laplace's.
    Floored at ``FIT_STDDEV_FLOOR`` lattice units (or σ, if smaller)."""
    if family != "gaussian" or not block.scale:
        return sd
    sigma = sd / block.scale
    actual = math.sqrt(discrete_gaussian_variance(sigma * sigma))
    return max(actual, min(sigma, FIT_STDDEV_FLOOR)) * block.scale


def lattice_keeps_rank(blocks, rho: Fraction | float, *, family: str = "gaussian", unit_rows: int = 1) -> bool:
    """Whether every real factor keeps its rank once put on the lattice at this budget.

    A Kron of many real factors may need a resolution so coarse that a factor collapses
    (e.g. 16 binary attributes: 2×2 factors rounded to rank 1), and the measured block then
    supports none of the queries it was planned for; the engine re-plans such workloads
    with operators whose blocks are integer (``Planner.optimize``)."""
    blocks = list(blocks)
    lattice, _ = lattice_blocks(blocks, rho, family=family, unit_rows=unit_rows)
    for (clique, query, _), lb in zip(blocks, lattice):
        for d, m in zip(_dense_factors(clique, query), lb.factors):
            d = d.dense() if isinstance(d, _Basis) else d
            if not _is_integer(d) and np.linalg.matrix_rank(m.astype(np.float64)) < np.linalg.matrix_rank(d):
                return False
    return True


# -- persistence of released measurements (ledger payloads) -----------------------------
#
# A factor that is an identity, a total (one row of ones), a prefix (lower-triangular ones) or
# a constant plus a diagonal (a·I + b·11ᵀ on the lattice) is stored as its kind, size and
# values, not as its n² integers: a 1,459-label identity was 17 MB of
# the flights ledger's payload (issue 35).  Each block's meta lists its factors' records
# (``"factors"``); a payload without that list (written before) stores every factor densely as
# ``b{i}f{j}``, and still loads.

# The payload's format version, stored as its own ``__version__`` entry (JSON) since ledger
# format 2: 1 is every factor dense (no entry), 2 the factor records.  A reader that meets a
# higher version, or a factor kind it does not know, refuses with LedgerVersionError (a payload
# from a newer dpsql), never a KeyError from the archive; code since the records ignores the
# entry, so it reads these payloads as before.
PAYLOAD_FORMAT = "dpsql-release"
PAYLOAD_VERSION = 2


def _newer(what: str, version: int = PAYLOAD_VERSION) -> LedgerVersionError:
    return LedgerVersionError(
        f"a release in the privacy ledger was written by a newer dpsql ({what}; this dpsql reads "
        f"release payload versions up to {version})",
        hint="open the ledger with the dpsql version that wrote it or a newer one; nothing was charged")


def version_stamp(fmt: str, version: int) -> np.ndarray:
    """A payload's ``__version__`` entry: its format and version as JSON bytes."""
    return np.frombuffer(json.dumps({"format": fmt, "version": version}).encode(), dtype=np.uint8)


def check_stamp(z: Any, fmt: str, version: int) -> None:
    """Refuse (LedgerVersionError) a payload whose ``__version__`` names another format or a
    version above ``version``; a payload without the entry (written before it) is read."""
    if "__version__" not in z.files:
        return
    stamp = json.loads(bytes(z["__version__"]).decode())
    if stamp.get("format") != fmt or not (type(stamp.get("version")) is int and stamp["version"] <= version):
        raise _newer(f"format {stamp.get('format')!r} version {stamp.get('version')!r}", version)


def _factor_record(f: np.ndarray | StructuredFactor) -> dict[str, Any]:
    """The public description of one integer factor: its kind and size when it is one of
    the structured leaves, else ``{"kind": "dense"}`` (the matrix travels as an array).
    Total: packing runs after the ledger's charge, so a factor that is not a matrix of
    int64-sized integers (NaN, ±inf, 2.5, a vector) is stored densely, never an exception
    that would leave the charge without its release."""
    if isinstance(f, StructuredFactor) and f.dtype.kind == "i":    # read from a payload
        if f.kind in ("identity", "prefix") and f.diagonal == 1:
            return {"kind": f.kind, "n": f.n}
        if f.kind == "diagonal_plus_constant" and f.n > 1:
            return {"kind": f.kind, "n": f.n, "diagonal": int(f.diagonal), "other": int(f.other)}
    f = np.asarray(f)
    if f.ndim != 2 or (f.dtype.kind not in "iub" and not (
            f.dtype.kind == "f" and bool(np.all(np.isfinite(f))) and bool(np.all(f == np.round(f)))
            and float(np.abs(f).max(initial=0)) < 2.0 ** 63)):
        return {"kind": "dense"}
    rows, cols = f.shape
    if rows == 1 and bool(np.all(f == 1)):
        return {"kind": "total", "n": int(cols)}
    if rows == cols and rows > 0 and bool(np.all(f.diagonal() == 1)):
        nonzero = int(np.count_nonzero(f))
        if nonzero == rows:                       # ones on the diagonal and nothing else
            return {"kind": "identity", "n": int(rows)}
        if nonzero == rows * (rows + 1) // 2 and bool(np.all(f[np.tril_indices(rows)] == 1)):
            return {"kind": "prefix", "n": int(rows)}   # the lower triangle holds every non-zero
    if rows == cols and rows > 1:
        # a·I + b·11ᵀ on the lattice (OPT_0's closed form on span{I, 1} grams, e.g. a
        # GROUP BY dest with a filter on another column): one value on the diagonal, one off it
        d, o = int(f[0, 0]), int(f[0, 1])
        if bool(np.all(f.diagonal() == d)) and int(np.count_nonzero(f != o)) == (rows if d != o else 0):
            return {"kind": "diagonal_plus_constant", "n": int(rows), "diagonal": d, "other": o}
    return {"kind": "dense"}


def _factor_from(record: dict[str, Any]) -> np.ndarray | StructuredFactor:
    """A record's factor: the n×n kinds stay implicit (a 1,459-label identity was 17 MB of
    int64 held by every process that read the flights ledger, issue 35); a total is 1×n."""
    n = int(record["n"])
    if record["kind"] == "total":
        return np.ones((1, n), dtype=np.int64)
    if record["kind"] == "diagonal_plus_constant":
        return StructuredFactor("diagonal_plus_constant", n, int(record["diagonal"]), int(record["other"]))
    if record["kind"] in ("identity", "prefix"):
        return StructuredFactor(record["kind"], n)
    raise _newer(f"factor kind {record['kind']!r}")


def pack(released: Sequence[tuple[LatticeBlock, np.ndarray, float]]) -> bytes:
    """Serialize released (noisy) measurements; only noisy values and public structure.
    Structured factors are stored as records (``_factor_record``), the others densely.
    Offset blocks (``LatticeBlock.offsets``) travel in the same payload, marked."""
    arrays: dict[str, Any] = {}     # Any: numpy's type annotation of savez would read a key as allow_pickle
    meta = []
    for i, (block, values, sd) in enumerate(released):
        records = []
        for j, f in enumerate(block.factors):
            record = _factor_record(f)
            if record["kind"] == "dense":
                arrays[f"b{i}f{j}"] = f
            records.append(record)
        arrays[f"b{i}y"] = values
        meta.append({"clique": list(block.clique), "nfactors": len(block.factors), "factors": records,
                     "scale": block.scale, "weight": block.weight, "stddev": sd,
                     **({"offsets": block.offsets, "bound": block.bound} if block.offsets is not None else {})})
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
             __version__=version_stamp(PAYLOAD_FORMAT, PAYLOAD_VERSION), **arrays)
    return buf.getvalue()


def unpack_all(payload: bytes) -> list[tuple[LatticeBlock, np.ndarray, float]]:
    """Every block of a payload: counts and offsets (either format, module comment above)."""
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        check_stamp(z, PAYLOAD_FORMAT, PAYLOAD_VERSION)
        meta = json.loads(bytes(z["__meta__"]).decode())
        out = []
        for i, m in enumerate(meta):
            records = m.get("factors") or [{"kind": "dense"}] * int(m["nfactors"])
            factors = tuple(z[f"b{i}f{j}"] if r["kind"] == "dense" else _factor_from(r)
                            for j, r in enumerate(records))
            block = LatticeBlock(tuple(m["clique"]), factors, float(m["scale"]), float(m["weight"]),
                                 m.get("offsets"), int(m.get("bound", 1)))
            out.append((block, z[f"b{i}y"], float(m["stddev"])))
    return out


def unpack(payload: bytes) -> list[tuple[LatticeBlock, np.ndarray, float]]:
    """The count blocks of a payload (what the model is fitted to)."""
    return [r for r in unpack_all(payload) if r[0].offsets is None]


def unpack_offsets(payload: bytes) -> list[tuple[LatticeBlock, np.ndarray, float]]:
    """The offset blocks of a payload (``LatticeBlock.offsets``)."""
    return [r for r in unpack_all(payload) if r[0].offsets is not None]
