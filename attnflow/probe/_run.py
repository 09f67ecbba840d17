r"""``attnflow probe CONFIG --out DIR``: run one gradient-based study of the paper's assumptions
and write a report folder (report.md, summary.json, figures, resolved config, provenance).

The study is named by the config's ``study`` key; its shipped config
``configs/probe-<study>.toml`` is the default and the schema (unknown keys are refused).
Optimisation state is checkpointed under ``DIR/checkpoints``: the same command after an
interruption resumes; a different config in the same folder is refused.

Several processes (``--coordinator HOST:PORT --num-processes P --process-id I``, :func:`attnflow.runs.init_distributed`)
split a study's independent units over a shared ``DIR``: the two searches of distance-to-failure, the systems of
sensitivity (process p takes the units p, p + P, ...; process 0 waits for the others' and writes the report).
beyond-pd is one batched optimisation: process 0 runs it and the others return at once.
"""

from __future__ import annotations

from pathlib import Path

from ..runs import atomic_write_json, atomic_write_text, init_distributed, open_run, releases_output_dirs
from ._beyond_pd import run_beyond_pd
from ._config import STUDIES, ProbeConfig, load_probe_config, parse_probe_config, read_probe_config
from ._failure import run_failure
from ._sensitivity import run_sensitivity

__all__ = ["STUDIES", "load_probe_config", "read_probe_config", "run_probe"]

#: study name -> its runner ``(config, out, progress=, interrupt_after=, fingerprint=, process_index=, process_count=,
#: work=) -> (summary, markdown, figures)`` (None on a process other than 0; ``work`` receives what this process did)
RUNNERS = {"distance-to-failure": run_failure, "beyond-pd": run_beyond_pd, "sensitivity": run_sensitivity}


@releases_output_dirs
def run_probe(config: ProbeConfig | dict, out: str | Path, *, progress: bool = True,
              interrupt_after: int | None = None, processes: dict | None = None) -> dict:
    """Run the study of a parsed ``config`` (:func:`read_probe_config`), or of a resolved dict (see
    :func:`load_probe_config`; parsed here, before ``out`` is claimed), into ``out``; returns the summary. Computation runs in float64
    (``jax.enable_x64``, scoped). The fingerprint covers the config and the bytes of
    ``system.weights_file``.

    ``processes`` (``coordinator``, ``num_processes``, ``process_id``: a manual launch of one command per
    process, :func:`attnflow.runs.init_distributed`) splits the study's independent units over processes
    that share ``out`` (see the module docstring). Every process but 0 returns only what it did
    (``study``, ``process_index``, ``process_count``, ``units_computed``, ``units``); process 0 writes the
    same report, tables and summary.json as one process, and its returned summary adds those keys.
    The processes join before any JAX computation, and parsing a config checks its memory (which starts
    JAX): with ``processes`` give the resolved dict, or join first (:func:`attnflow.runs.init_distributed`,
    as ``attnflow probe`` does) and then parse.

    ``interrupt_after`` (testing): stop like a kill after that many optimiser steps.
    """
    import jax

    pidx, pcount = init_distributed(False, **(processes or {}))  # before any JAX computation
    if isinstance(config, dict):
        config = parse_probe_config(config)  # before the folder is claimed or anything compiles
    run = open_run(out, "probe", config, process=pidx, seed=config.seed, marker={"study": config.study})
    out, fingerprint = run.out, run.fingerprint
    work: dict = {}
    with jax.enable_x64(True):
        result = RUNNERS[config.study](config, out, progress=progress, interrupt_after=interrupt_after,
                                       fingerprint=fingerprint, process_index=pidx, process_count=pcount, work=work)
    done = {"study": config.study, "process_index": pidx, "process_count": pcount, **work} if pcount > 1 else {}
    if result is None:
        return done
    summary, body, figures = result
    prov = run.write_provenance()
    summary = {**summary, "figures": figures, "provenance": prov}
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "report.md", "\n".join([
        f"# attnflow probe: {config.study}", "",
        f"seed {config.seed}, config fingerprint {fingerprint}, commit {prov['git_commit']}; "
        "resolved config in config.json, versions in provenance.json.", "", body]))
    return {**summary, **done}
