"""The sub-commands' names, modules and one-line help, known without importing their modules.

``attnflow --help`` is built from this table alone (no JAX import); only the chosen
sub-command's module is imported, and it takes its one-line help from here.
"""

from __future__ import annotations

#: name -> (module defining ``add_parser(subparsers)`` for it, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "reproduce": ("attnflow.cli.reproduce", "simulate the paper's regimes and write the reproduction report"),
    "sweep": ("attnflow.cli.sweep", "spectral or dynamics sweep over random weight ensembles (resumable)"),
    "track": ("attnflow.cli.track",
              "track a real transformer's tokens layer by layer against the idealised dynamics of its heads"),
    "heads": ("attnflow.cli.track",
              "print the assumption table of a model's heads (Def 4.1, paranormality, Q^T K > 0, Ginibre baseline)"),
    "phase": ("attnflow.cli.phase",
              "phase diagram of clustering over beta, n, d and time, with metastable plateaus (resumable)"),
    "probe": ("attnflow.cli.probe", "gradient-based probes of the assumptions (optax; resumable)"),
    "extensions": ("attnflow.cli.extensions",
                   "studies beyond the theorems: Section 12.2, multi-head, per-layer weights, causal, sphere"),
}

#: the sub-commands that write figures (they take ``--figure-formats``)
FIGURE_COMMANDS = ("reproduce", "sweep", "phase", "track", "probe", "extensions")

#: the figure formats ``--figure-formats`` accepts
FIGURE_FORMATS = ("png", "pdf", "svg")


def summary(name: str) -> str:
    """The one-line help of sub-command ``name``.

    Example:
        >>> summary("sweep")
        'spectral or dynamics sweep over random weight ensembles (resumable)'
    """
    return COMMANDS[name][1]


#: default output folders of the jobs that have one (the same as ``attnflow.report``'s
#: ``DEFAULT_OUT``; tests/test_cli_main.py checks it), here so that ``--help`` needs no JAX
DEFAULT_OUTS = {"reproduce": "results/reproduce", "extensions": "results/extensions"}

#: the studies of ``attnflow extensions`` (the keys of ``attnflow.report._extensions.STUDIES``)
EXTENSION_STUDIES = ("sec12_2", "multihead", "albert", "causal", "sphere")
