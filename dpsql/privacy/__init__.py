"""Privacy core: exact discrete noise, zCDP accounting and the durable budget ledger.

``noise`` is the only module that draws privacy noise (CKS20 discrete Gaussian and
discrete Laplace from the OS CSPRNG); ``accountant`` prices mechanisms in rho-zCDP
(thesis §2.3, Props. 3-7); ``ledger`` records every charge durably before any noisy value
is released.  The privacy argument is in ``docs/privacy.md``.
"""

from dpsql.privacy.accountant import (Budget, compose, epsilon_delta_to_rho, rho_exponential,
                                      rho_gaussian, rho_gaussian_sq, rho_pure, rho_to_epsilon,
                                      sigma2_for_rho)
from dpsql.privacy.ledger import Charge, Ledger
from dpsql.privacy.noise import discrete_gaussian, discrete_laplace

__all__ = ["Budget", "Charge", "Ledger", "compose", "discrete_gaussian", "discrete_laplace",
           "epsilon_delta_to_rho", "rho_exponential", "rho_gaussian", "rho_gaussian_sq",
           "rho_pure", "rho_to_epsilon", "sigma2_for_rho"]
