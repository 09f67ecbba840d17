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
    "meanfield": ("attnflow.cli.meanfield",
                  "the flow on the circle or S^2 against its continuity equation: convergence in n, mode growth, "
                  "large n (resumable)"),
    "probe": ("attnflow.cli.probe", "gradient-based probes of the assumptions (optax; resumable)"),
    "extensions": ("attnflow.cli.extensions",
                   "studies beyond the theorems: Section 12.2, multi-head, per-layer weights, causal, sphere"),
}

#: the sub-commands that write figures (they take ``--figure-formats``)
FIGURE_COMMANDS = ("reproduce", "sweep", "phase", "meanfield", "track", "probe", "extensions")

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


def add_run_options(parser) -> None:
    """``--devices``, ``--no-progress`` and the several-processes group (:func:`add_process_options`) of the
    chunked jobs (sweep, phase)."""
    parser.add_argument("--devices", type=int, default=None,
                        help="local devices to shard over (default: config run.devices; 0 = all)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_process_options(parser, "chunks", "Under SLURM, Open MPI or Kubernetes set run.distributed = true in "
                        "the config instead.")


def add_process_options(parser, work: str = "units of work", more: str = "") -> None:
    """The several-processes group of every job that splits its ``work`` (chunks, units) over processes:
    ``--coordinator HOST:PORT``, ``--num-processes P`` and ``--process-id I`` (a manual launch, one command per
    process; :func:`process_options` reads them), ``more`` added to the group's description.

    Example:
        >>> import argparse
        >>> p = argparse.ArgumentParser()
        >>> add_process_options(p)
        >>> process_options(p.parse_args(["--coordinator", "h:1", "--num-processes", "2", "--process-id", "1"]))
        {'coordinator': 'h:1', 'num_processes': 2, 'process_id': 1}
    """
    g = parser.add_argument_group(
        "several processes (hosts)",
        f"Split the {work} over P processes that share the output folder: start the same command once per "
        "process with these three options (process 0 serves the coordinator and writes the tables)."
        + (f" {more}" if more else ""))
    g.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0 (the same for all processes)")
    g.add_argument("--num-processes", type=int, metavar="P", help="number of processes")
    g.add_argument("--process-id", type=int, metavar="I", help="this process's index, 0 .. P-1")


def process_options(args) -> dict | None:
    """The ``processes`` keyword of a job from :func:`add_process_options`' options: the ones given, or None.

    Example:
        >>> import argparse
        >>> p = argparse.ArgumentParser()
        >>> add_process_options(p)
        >>> process_options(p.parse_args([])) is None
        True
    """
    processes = {k: v for k, v in (("coordinator", args.coordinator), ("num_processes", args.num_processes),
                                   ("process_id", args.process_id)) if v is not None}
    return processes or None


def share_line(summary: dict, computed: int, total: int, what: str, detail: str = "") -> str:
    """The line each process of a multi-process run prints about its share: what it ``computed`` of the
    ``total`` chunks or units (``what``), with a ``detail`` in parentheses.

    Example:
        >>> share_line({"process_index": 1, "process_count": 2}, 4, 8, "chunks", "0 of its share resumed")
        'process 1 of 2: computed 4 of 8 chunks (0 of its share resumed)'
    """
    return (f"process {summary['process_index']} of {summary['process_count']}: computed {computed} of {total} "
            f"{what}" + (f" ({detail})" if detail else ""))


def cpu_device_per_core(num_devices: int | None) -> int | None:
    """Give the CPU platform one XLA device per available core (or ``num_devices`` of them), before jax starts.

    One XLA:CPU device runs a vmapped chunk on one core; a chunked job sharded over one device per core
    uses them all (the phase job's 2560 systems x 300 layers: 15.7 s on one device, 10.5 s on two, 2-core
    Intel Xeon), with the same results (each system's numbers do not depend on the device that runs it).
    Nothing is changed when ``XLA_FLAGS`` already sets ``--xla_force_host_platform_device_count``, when
    ``jax_num_cpu_devices`` is set, or once jax has started its backends (then a process keeps its
    devices). Returns the count set, or None. Accelerators are not affected (the job shards over them).

    Example:
        >>> import jax
        >>> _ = jax.numpy.zeros(1)          # jax has started: this process keeps its devices
        >>> cpu_device_per_core(None) is None
        True
    """
    import os

    import jax

    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return None
    if jax.config.jax_num_cpu_devices != -1:
        return None
    from .._resources import available_cores

    count = int(num_devices) if num_devices else available_cores()
    if count <= 1:
        return None
    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # the backends have started: this process keeps its devices
        return None
    return count


def run_options(args) -> dict:
    """The keyword arguments of a chunked job from :func:`add_run_options`' options.

    Example:
        >>> import argparse
        >>> p = argparse.ArgumentParser()
        >>> add_run_options(p)
        >>> run_options(p.parse_args(["--devices", "2"]))
        {'num_devices': 2, 'progress': None, 'processes': None}
    """
    return {"num_devices": args.devices, "progress": False if args.no_progress else None,
            "processes": process_options(args)}
