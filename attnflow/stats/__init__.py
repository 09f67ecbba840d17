r"""Statistics of the jobs' results, written once: interval estimates, the least-squares slope with its
interval, and lifetimes (Kaplan-Meier, the censored log-normal regression).

* :func:`t_quantile`, :func:`standard_error`, :func:`mean_interval`, :func:`difference_interval` (paired, or Welch's): Student-t
  intervals; :func:`wilson_interval`: a binomial proportion;
* :func:`fit_slope`: the least-squares slope of a line (one intercept, or one per group) with its Student-t
  interval;
* :func:`kaplan_meier`, :func:`survival_quantile`: the survival curve of right-censored lifetimes and its
  quantiles; :func:`censored_lognormal_fit`: :math:`\log T = a + bx + \sigma\varepsilon` by maximum likelihood,
  lifetimes right-censored and left-truncated, the slope's interval cluster-robust;
  :func:`censored_exponential_fit`: exponential lifetimes with :math:`\log\bar T = a + bx` from groups' escape counts
  and times at risk (groups without an escape included), the slope's interval from the profile likelihood.

Host-side (numpy and scipy); each function's docstring states its formula.
"""

from ._intervals import difference_interval, mean_interval, standard_error, t_quantile, wilson_interval
from ._regression import fit_slope
from ._survival import (censored_exponential_fit, censored_lognormal_fit, censored_lognormal_mean, kaplan_meier,
                        survival_quantile)

__all__ = ["t_quantile", "standard_error", "mean_interval", "difference_interval", "wilson_interval", "fit_slope", "kaplan_meier",
           "survival_quantile", "censored_lognormal_fit", "censored_lognormal_mean", "censored_exponential_fit"]
