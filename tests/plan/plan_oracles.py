"""Dense oracles for the planner tests (Prop. 9 computed from materialised matrices)."""

import numpy as np


def dense_tse(Wd: np.ndarray, A: np.ndarray, noise: str) -> float:
    """Prop. 9 straight from dense matrices: the oracle every structured formula must match."""
    if noise == "laplace":
        sens2 = np.abs(A).sum(axis=0).max() ** 2
        var = 2.0
    else:
        sens2 = (A * A).sum(axis=0).max()
        var = 1.0
    return float(var * sens2 * np.trace(Wd @ np.linalg.pinv(A.T @ A) @ Wd.T))


def supports(Wd: np.ndarray, A: np.ndarray) -> bool:
    return bool(np.allclose(Wd @ np.linalg.pinv(A) @ A, Wd, atol=1e-8))
