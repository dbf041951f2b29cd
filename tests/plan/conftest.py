"""Shared small workloads for the planner tests (dense-checkable sizes)."""

import pytest

from dpsql.domain import Domain
from dpsql.linalg import AllRange, Identity, Kron, Marginals, Prefix, Total, Union, Weighted
from dpsql.plan import Workload


@pytest.fixture
def domain3():
    return Domain(["a", "b", "c"], [4, 3, 2])


@pytest.fixture
def workloads(domain3):
    """One workload of each kind over a 24-cell domain."""
    D = domain3
    return {
        "marginals": Workload(D, Marginals(D, [("a",), ("a", "b"), ("b", "c")])),
        "prefix-kron": Workload(D, Union([Weighted(1.0, Kron([Prefix(4), Identity(3), Total(2)]))])),
        "range-union": Workload(D, Union([
            Weighted(1.0, Kron([AllRange(4), Total(3), Identity(2)])),
            Weighted(2.0, Kron([Total(4), Identity(3), Identity(2)])),
            Weighted(0.5, Kron([Prefix(4), Identity(3), Total(2)]))])),
    }
