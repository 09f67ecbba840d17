"""The routes of the non-symmetric eigenvalue problem (:func:`attnflow.spectral.eig_route`), in a module of their
own so that a job's config check (``run.eig_route``) names them without importing the spectral stack."""

from __future__ import annotations

#: where ``eig`` runs: ``"auto"``, ``"device"`` (``jax.lax.linalg.eig``), ``"host"`` (a NumPy callback), ``"cpu"``
#: (a jitted call placed on the CPU device); :mod:`attnflow.spectral._eig` describes each
EIG_ROUTES = ("auto", "device", "host", "cpu")
