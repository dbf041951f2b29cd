"""What the released measurements say about a value they do not support: its range.

A linear query row q·x that no released block supports has no unbiased estimate, and the
model's answer for it rests on the model's assumptions (maximum entropy: independence
where nothing was measured together).  What the measurements do imply is a *range*.  For
any attribute set s whose marginal x_s the releases determine (a measured clique or part
of one, with a least-squares estimate x̂_s), and a row q = c·⊗_a f_a with non-negative
factors, every table x ≥ 0 with that marginal satisfies

    Σ_{cells u of s} x_s(u) · min_{x ∈ u} q(x)   ≤   q·x   ≤   Σ_u x_s(u) · max_{x ∈ u} q(x)

(Fréchet-style bounds: each record in cell u contributes at least the smallest and at most
the largest weight any completion of u gives it).  Both sides are linear functionals of x_s,
estimated from x̂_s; ``Z_BOUND`` standard deviations (bounded by the triangle inequality,
Σ_u |h(u)|·sd(x̂_s(u)), which holds for any correlation between cells) widen each side so the
range holds for the true table, not just for the noisy one.  The range of a row is the
intersection over every determined s (including the empty set, the total N, which gives
[0, N·max q] for a count when nothing touches the query) and the trivial q·x ≥ 0.

A fine ordered column's factors (10⁵–10⁶ cells: a quantile's CDF rows, a GROUP BY of every
value) are never formed as dense matrices: their row extremes are known from their structure
(``_row_extremes``) and their products with a marginal go through ``matmat`` (issue 35).

Everything here is post-processing of released measurements: it costs no budget.
"""

from __future__ import annotations

from itertools import combinations
from collections.abc import Sequence

import numpy as np

from dpsql import linalg
from dpsql.engine.variance import VarianceModel, decompose

# Each side of a range is widened by this many standard deviations of its estimate:
# a side fails with probability below 3.2e-5 (one-sided normal tail), so a range built
# from a handful of marginals holds for the true table with overwhelming probability.
Z_BOUND = 4.0

# Subsets of measured cliques up to this many attributes are candidates (2^4 per clique).
_MAX_SUBSET = 4


class _Marginal:
    """A determined marginal: attributes (domain order), estimate and per-cell stderr."""

    __slots__ = ("attrs", "estimate", "sd")

    def __init__(self, attrs: tuple[str, ...], estimate: np.ndarray, sd: np.ndarray) -> None:
        self.attrs, self.estimate, self.sd = attrs, estimate, sd


class BoundsModel:
    """Ranges of query rows implied by the released measurements of one table."""

    def __init__(self, attributes: Sequence[str], sizes: dict[str, int], variance: VarianceModel,
                 cliques: Sequence[Sequence[str]]) -> None:
        self.attributes = tuple(attributes)
        self.sizes = dict(sizes)
        self.variance = variance
        position = {a: i for i, a in enumerate(self.attributes)}
        self.measured = [frozenset(c) for c in cliques]
        candidates: set[tuple[str, ...]] = {()}
        for clique in {tuple(sorted(c, key=position.__getitem__)) for c in cliques}:
            for k in range(1, min(len(clique), _MAX_SUBSET) + 1):
                candidates.update(combinations(clique, k))
        self._candidates = sorted(candidates, key=lambda c: (len(c), c))
        self._marginals: dict[tuple[str, ...], _Marginal | None] = {}
        # a fine column's ordered releases (never in the model) determine its marginal too
        self._ordered_from: tuple = ()
        self._ordered: list[_Marginal] = []

    def use_ordered(self, estimates: Sequence) -> None:
        """Take the marginals of the table's ordered releases (``OrderedEstimate``: the
        column's cells per group of its group columns) as ranges' candidates too: a count
        over a range of a fine column by another column is then at most the range's count."""
        estimates = tuple(estimates)
        if len(estimates) == len(self._ordered_from) and all(
                a is b for a, b in zip(estimates, self._ordered_from)):
            return
        position = {a: i for i, a in enumerate(self.attributes)}
        out = []
        for est in estimates:
            s = est.strategy
            attrs = (s.attribute, *s.groups)
            if any(a not in position for a in attrs) or len(set(attrs)) != len(attrs) \
                    or tuple(self.sizes[a] for a in s.groups) != tuple(s.group_shape) \
                    or self.sizes[s.attribute] != est.n:
                continue
            # group_cells: (groups in the release's order, flattened) × the column's cells
            tensor = np.asarray(est.group_cells, dtype=np.float64).reshape(*s.group_shape, est.n)
            var = est.select(np.eye(s.group_cells)[0]).cell_variance()    # one group's, per cell
            sd = np.broadcast_to(np.sqrt(np.maximum(var, 0.0)), tensor.shape)
            held = (*s.groups, s.attribute)
            order = sorted(range(len(held)), key=lambda i: position[held[i]])
            est_t, sd_t = np.transpose(tensor, order), np.transpose(sd, order)
            if np.all(np.isfinite(est_t)) and np.all(np.isfinite(sd_t)):
                out.append(_Marginal(tuple(held[i] for i in order), est_t, np.ascontiguousarray(sd_t)))
        self._ordered, self._ordered_from = out, estimates

    # -- what was measured together --------------------------------------------------------
    def informed(self, attrs: Sequence[str]) -> bool:
        """True when ``attrs`` lie inside one measured clique and the releases determine each
        one's own marginal: they speak about the attributes' values and joint distribution,
        so the model's answer is not just its prior.  An attribute measured only through a
        coarser query (a threshold, a range, a SUM of it) is not informed: within the parts
        that query cannot tell apart the model can only spread its count evenly (issue 29:
        ~300 rows for every hour of the day, with the range [0, N])."""
        want = frozenset(attrs)
        return not want or (any(want <= c for c in self.measured) and not self.measured_coarsely(attrs))

    def measured_coarsely(self, attrs: Sequence[str]) -> list[str]:
        """The attributes of ``attrs`` that lie in a measured clique but whose one-way marginal
        the releases do not determine (which blocks support what is public: no data)."""
        return [a for a in self.attributes if a in set(attrs)
                and any(a in c for c in self.measured) and self._marginal((a,)) is None]

    def never_together(self, attrs: Sequence[str]) -> list[tuple[str, ...]]:
        """The attributes (singly) and pairs of ``attrs`` no measured clique contains."""
        attrs = [a for a in self.attributes if a in set(attrs)]
        alone: list[tuple[str, ...]] = [(a,) for a in attrs if not any(a in c for c in self.measured)]
        pairs = [(a, b) for a, b in combinations(attrs, 2)
                 if (a,) not in alone and (b,) not in alone
                 and not any(a in c and b in c for c in self.measured)]
        return alone + pairs

    # -- determined marginals -------------------------------------------------------------
    def _marginal(self, attrs: tuple[str, ...]) -> _Marginal | None:
        if attrs in self._marginals:
            return self._marginals[attrs]
        factors = [linalg.Identity(self.sizes[a]) if a in attrs else linalg.Total(self.sizes[a])
                   for a in self.attributes]
        query = linalg.Kron(factors)
        _, supported = self.variance.analyse(query)
        out = None
        if supported.size and supported.all():
            est, sd = self.variance.least_squares(query)
            if np.all(np.isfinite(est)) and np.all(np.isfinite(sd)):
                shape = tuple(self.sizes[a] for a in attrs)
                out = _Marginal(attrs, est.reshape(shape), sd.reshape(shape))
        self._marginals[attrs] = out
        return out

    # -- ranges ---------------------------------------------------------------------------
    def rows(self, matrix, touched: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(lower, upper) per row of ``matrix`` (a Union/Weighted/Kron over the domain).
        Rows with a signed weight get (−inf, inf): their range is not computed."""
        touched_set = set(touched)
        cands = [m for c in self._candidates
                 if (not c or touched_set & set(c)) and (m := self._marginal(c)) is not None]
        cands += [m for m in self._ordered if touched_set & set(m.attrs)]
        lows, highs = [], []
        for rb in decompose(matrix, self.attributes):
            lo = np.zeros(rb.rows)
            hi = np.zeros(rb.rows)
            # the leaves, not ``rb.terms``: a fine column's factor stays structured
            for coef, factors in rb.leaves:
                t_lo, t_hi = self._term(coef, factors, rb.rows, cands)
                lo += t_lo
                hi += t_hi
            lows.append(lo)
            highs.append(hi)
        if not lows:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(lows), np.concatenate(highs)

    def _term(self, coef: float, factors: dict[str, np.ndarray | linalg.QueryMatrix], rows: int,
              cands: list[_Marginal]) -> tuple[np.ndarray, np.ndarray]:
        extremes = {a: _row_extremes(f) for a, f in factors.items()}
        if coef < 0 or any(e is None for e in extremes.values()):
            return np.full(rows, -np.inf), np.full(rows, np.inf)
        order = [a for a in self.attributes if a in factors]
        shape = tuple(int(factors[a].shape[0]) for a in order)
        if int(np.prod(shape, dtype=np.int64)) != rows:
            return np.full(rows, -np.inf), np.full(rows, np.inf)
        hi = np.full(shape, np.inf)
        lo = np.zeros(shape)  # q ≥ 0 and x ≥ 0
        for m in cands:
            est_hi, est_lo, sd = self._side(factors, extremes, order, m)
            hi = np.minimum(hi, coef * (est_hi + Z_BOUND * sd))
            lo = np.maximum(lo, coef * (est_lo - Z_BOUND * sd))
        return lo.reshape(-1), hi.reshape(-1)

    def _side(self, factors, extremes, order, m: _Marginal):
        """Upper and lower Fréchet sums of one marginal, and the sd of the upper one."""
        def apply(tensor: np.ndarray) -> np.ndarray:
            # over m's attributes: apply the query factor (rows × cells) or sum the cells out
            for axis, a in enumerate(m.attrs):
                tensor = _along(factors[a], tensor, axis) if a in factors else tensor.sum(axis=axis, keepdims=True)
            return tensor

        # m.attrs and the row's attributes are both in domain order: the summed-out axes
        # have one row, so a reshape lines the tensor up with the row tensor
        target = [int(factors[a].shape[0]) if a in m.attrs else 1 for a in order]
        inside = apply(m.estimate).reshape(target)
        spread = apply(m.sd).reshape(target)
        up = np.ones([1] * len(order))
        down = np.ones([1] * len(order))
        for axis, a in enumerate(order):
            if a in m.attrs:
                continue
            high, low = extremes[a]
            shape = [1] * len(order)
            shape[axis] = high.shape[0]
            up = up * high.reshape(shape)
            down = down * low.reshape(shape)
        return inside * up, inside * down, spread * up


def _along(f, tensor: np.ndarray, axis: int) -> np.ndarray:
    """The factor ``f`` (rows × cells; an array or a structured matrix) applied along ``axis``."""
    moved = np.moveaxis(tensor, axis, 0)
    flat = moved.reshape(moved.shape[0], -1)
    out = f @ flat if isinstance(f, np.ndarray) else f.matmat(flat)
    return np.moveaxis(np.asarray(out).reshape((out.shape[0],) + moved.shape[1:]), 0, axis)


def _row_extremes(f) -> tuple[np.ndarray, np.ndarray] | None:
    """(largest, smallest) entry of each row of a factor with no negative entry, or None
    when it has one or its structure is unknown and it is too large to form.  The
    structured leaves of a fine column are read from their structure: a dense 10⁵×10⁵ CDF
    (a quantile's rows) was "refusing to materialise" before (issue 35)."""
    if isinstance(f, linalg.Weighted):
        base = _row_extremes(f.base)
        w = float(f.weight)
        return None if base is None or w < 0 else (w * base[0], w * base[1])
    r, n = (int(k) for k in f.shape)
    ones, zeros = np.ones(r), np.zeros(r)
    if isinstance(f, linalg.Identity):
        return ones, (ones if n == 1 else zeros)
    if isinstance(f, (linalg.Prefix, linalg.Suffix)):    # row b: cells 0..b (b..n-1)
        low = zeros.copy()
        low[-1 if isinstance(f, linalg.Prefix) else 0] = 1.0
        return ones, low
    if isinstance(f, linalg.Bucket):
        keep = f.mapping >= 0
        counts = np.bincount(f.mapping[keep], minlength=r)
        return (counts > 0).astype(float), (counts == n).astype(float)
    if not isinstance(f, np.ndarray):
        if r * n > linalg.DENSE_LIMIT:
            return None       # no range rather than a dense matrix (an unknown structure)
        f = np.asarray(f.dense(), dtype=np.float64)
    if f.size and np.any(f < 0):
        return None
    if not f.size:
        return np.zeros(r), np.zeros(r)
    return f.max(axis=1), f.min(axis=1)


__all__ = ["BoundsModel", "Z_BOUND"]
