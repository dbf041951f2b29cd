"""Turn a strategy's measurement blocks into noisy measurements.

For every block (clique C, query Q over C's marginal, relative weight w) the engine counts
the exact marginal x_C, applies an *integer* matrix M to it, and adds independent discrete
noise (``dpsql.privacy.noise``).  Integer matrices keep the measured values on the lattice
ℤ so that exact discrete samplers apply (Canonne–Kamath–Steinke 2020):

* integer-valued factors (Identity, Total, Prefix, ranges, marginals) are used as they are;
* real-valued factors (OPT_0 / OPT_⊗ strategies) are put on a declared grid: each factor F
  becomes M = round(F · GRID / max|F|), i.e. the strategy actually measured is the rounded
  one, with scale s = ∏ max|F|/GRID.  Sensitivity and accounting use M itself, so the
  rounding costs accuracy, never privacy (``docs/privacy.md``, "Real-valued strategies").

Noise calibration (Gaussian).  The planner's strategy is the stack of rows w_b·Q_b with one
common σ.  Measuring M_b x + Z_b with Z_b ~ N_ℤ(0, σ_b²), σ_b = σ/(w_b s_b), is that same
mechanism up to post-processing.  Its zCDP cost is at most Σ_b k²Δ₂(M_b)²/(2σ_b²) where k is
the number of rows one privacy unit may contribute (CKS20 Thm 14 for independent
coordinates; the column-wise maximum is bounded by the sum of per-block maxima).  σ is
chosen so that this equals the requested ρ, then the exact rational cost of the σ_b
actually used is computed with ``fractions`` and never exceeds the request.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

from dpsql.linalg import Identity, Kron, QueryMatrix
from dpsql.privacy import noise as _noise

GRID = 1 << 12  # resolution of real-valued factors: relative rounding error ≤ 2^-13


@dataclass(frozen=True)
class LatticeBlock:
    """A block ready to measure: integer factors (one per clique attribute, or one joint
    factor over the flattened clique), a scale, and its noise weight from the planner."""

    clique: tuple[str, ...]
    factors: tuple[np.ndarray, ...]   # int64 matrices
    scale: float                      # measured value = scale · (M x + Z)
    weight: float

    @property
    def joint(self) -> bool:
        return len(self.factors) == 1 and len(self.clique) != 1

    def l2_sensitivity_sq(self) -> int:
        """Δ₂(M)² exactly: Kron column norms multiply (thesis §3.4)."""
        out = 1
        for f in self.factors:
            out *= _noise.lattice_sensitivity2(f)
        return out

    def l1_sensitivity(self) -> int:
        out = 1
        for f in self.factors:
            out *= int(np.abs(f.astype(object)).sum(axis=0).max())
        return out

    def rows(self) -> int:
        return int(np.prod([f.shape[0] for f in self.factors]))

    def apply(self, counts: np.ndarray) -> np.ndarray:
        """M x in exact int64 arithmetic (one factor per axis, thesis Algorithm 1)."""
        x = np.asarray(counts, dtype=np.int64)
        if self.joint or len(self.factors) == 0:
            flat = x.reshape(-1)
            return (self.factors[0] @ flat) if self.factors else flat.copy()
        x = x.reshape(tuple(f.shape[1] for f in self.factors))
        for axis, f in enumerate(self.factors):
            x = np.moveaxis(np.tensordot(f, x, axes=([1], [axis])), 0, axis)
        return x.reshape(-1)

    def query(self) -> QueryMatrix:
        """The (scaled) query over the clique marginal, for reconstruction."""
        mats = [_as_matrix(f) for f in self.factors]
        q = mats[0] if len(mats) == 1 else Kron(mats)
        return q if self.scale == 1.0 else self.scale * q


def _as_matrix(f: np.ndarray) -> QueryMatrix:
    from dpsql.linalg import Explicit
    if f.shape[0] == f.shape[1] and np.array_equal(f, np.eye(f.shape[0], dtype=f.dtype)):
        return Identity(f.shape[0])
    return Explicit(f.astype(np.float64))


def to_lattice(clique: Sequence[str], query: QueryMatrix, weight: float) -> LatticeBlock:
    """Integer version of a planner block (see the module docstring for the grid rule)."""
    if isinstance(query, Kron) and len(query.factors) == len(clique):
        dense = [f.dense() for f in query.factors]
    else:
        dense = [query.dense()]
    factors, scale = [], 1.0
    for d in dense:
        d = np.asarray(d, dtype=np.float64)
        if np.all(d == np.round(d)) and np.abs(d).max(initial=0) < 2**31:
            factors.append(d.astype(np.int64))
            continue
        top = float(np.abs(d).max())
        if top == 0:
            factors.append(np.zeros(d.shape, dtype=np.int64))
            continue
        grid = top / GRID
        factors.append(_noise.round_to_grid(d, grid).astype(np.int64))
        scale *= grid
    return LatticeBlock(tuple(clique), tuple(factors), float(scale), float(weight))


@dataclass(frozen=True)
class NoisePlan:
    family: str                 # "gaussian" | "laplace"
    params: tuple[Fraction, ...]  # σ_b² (gaussian) or scale b_b (laplace), on the lattice
    rho: Fraction               # exact cost


def calibrate(blocks: Sequence[LatticeBlock], rho: float, *, family: str = "gaussian",
              unit_rows: int = 1) -> NoisePlan:
    """Per-block noise so that the total zCDP cost is ≤ ``rho`` (exactly computed)."""
    if not rho > 0:
        raise ValueError("rho must be positive")
    k2 = unit_rows * unit_rows
    eff = [b.weight * b.scale for b in blocks]
    if family == "gaussian":
        sens = [b.l2_sensitivity_sq() for b in blocks]
        total = sum(k2 * s * e * e for s, e in zip(sens, eff))
        sigma2 = total / (2.0 * rho)
        params = []
        for s, e in zip(sens, eff):
            # float → exact rational, nudged up so the rational cost cannot exceed rho
            params.append(Fraction(sigma2 / (e * e) * (1 + 1e-9)))
        cost = sum((Fraction(k2 * s) / (2 * p) for s, p in zip(sens, params)), Fraction(0))
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
    if cost > Fraction(rho):
        raise AssertionError("calibrated cost exceeds the request")
    return NoisePlan(family, tuple(params), cost)


def noisy_values(block: LatticeBlock, exact: np.ndarray, param: Fraction, family: str) -> np.ndarray:
    """Lattice value plus exact discrete noise, rescaled to the query's units."""
    if family == "gaussian":
        z = _noise.discrete_gaussian(param, exact.shape[0])
    else:
        z = _noise.discrete_laplace(param, exact.shape[0])
    return (exact + z).astype(np.float64) * block.scale


def stddev(block: LatticeBlock, param: Fraction, family: str) -> float:
    """Noise standard deviation in the query's units (used to weight the PGM loss).

    For the discrete Gaussian the variance is at most σ² (CKS20 Prop. 19); the discrete
    Laplace with scale b has variance 2e^{-1/b}/(1-e^{-1/b})² ≤ 2b²."""
    if family == "gaussian":
        return math.sqrt(float(param)) * block.scale
    b = float(param)
    q = math.exp(-1.0 / b)
    return math.sqrt(2 * q) / (1 - q) * block.scale


# -- persistence of released measurements (ledger payloads) -----------------------------

def pack(released: Sequence[tuple[LatticeBlock, np.ndarray, float]]) -> bytes:
    """Serialize released (noisy) measurements; only noisy values and public structure."""
    arrays, meta = {}, []
    for i, (block, values, sd) in enumerate(released):
        for j, f in enumerate(block.factors):
            arrays[f"b{i}f{j}"] = f
        arrays[f"b{i}y"] = values
        meta.append({"clique": list(block.clique), "nfactors": len(block.factors),
                     "scale": block.scale, "weight": block.weight, "stddev": sd})
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8), **arrays)
    return buf.getvalue()


def unpack(payload: bytes) -> list[tuple[LatticeBlock, np.ndarray, float]]:
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        meta = json.loads(bytes(z["__meta__"]).decode())
        out = []
        for i, m in enumerate(meta):
            factors = tuple(z[f"b{i}f{j}"] for j in range(m["nfactors"]))
            block = LatticeBlock(tuple(m["clique"]), factors, float(m["scale"]), float(m["weight"]))
            out.append((block, z[f"b{i}y"], float(m["stddev"])))
    return out
