r"""``attnflow probe CONFIG --out DIR``: run one gradient-based study of the paper's assumptions
and write a report folder (report.md, summary.json, figures, resolved config, provenance).

The study is named by the config's ``study`` key; its shipped config
``configs/probe-<study>.toml`` is the default and the schema (unknown keys are refused).
Optimisation state is checkpointed under ``DIR/checkpoints``: the same command after an
interruption resumes; a different config in the same folder is refused.
"""

from __future__ import annotations

from pathlib import Path

from ..runs import atomic_write_json, atomic_write_text, open_run, releases_output_dirs
from ._beyond_pd import run_beyond_pd
from ._config import STUDIES, ProbeConfig, load_probe_config, parse_probe_config, read_probe_config
from ._failure import run_failure
from ._sensitivity import run_sensitivity

__all__ = ["STUDIES", "load_probe_config", "read_probe_config", "run_probe"]

#: study name -> its runner ``(config, out, progress=, interrupt_after=, fingerprint=) -> (summary, markdown, figures)``
RUNNERS = {"distance-to-failure": run_failure, "beyond-pd": run_beyond_pd, "sensitivity": run_sensitivity}


@releases_output_dirs
def run_probe(config: ProbeConfig | dict, out: str | Path, *, progress: bool = True,
              interrupt_after: int | None = None) -> dict:
    """Run the study of a parsed ``config`` (:func:`read_probe_config`), or of a resolved dict (see
    :func:`load_probe_config`; parsed here, before ``out`` is claimed), into ``out``; returns the summary. Computation runs in float64
    (``jax.enable_x64``, scoped). The fingerprint covers the config and the bytes of
    ``system.weights_file``.

    ``interrupt_after`` (testing): stop like a kill after that many optimiser steps.
    """
    import jax

    if isinstance(config, dict):
        config = parse_probe_config(config)  # before the folder is claimed or anything compiles
    run = open_run(out, "probe", config, seed=config.seed, marker={"study": config.study})
    out, fingerprint = run.out, run.fingerprint
    with jax.enable_x64(True):
        summary, body, figures = RUNNERS[config.study](config, out, progress=progress,
                                                       interrupt_after=interrupt_after, fingerprint=fingerprint)
    prov = run.write_provenance()
    summary = {**summary, "figures": figures, "provenance": prov}
    atomic_write_json(out / "summary.json", summary)
    atomic_write_text(out / "report.md", "\n".join([
        f"# attnflow probe: {config.study}", "",
        f"seed {config.seed}, config fingerprint {fingerprint}, commit {prov['git_commit']}; "
        "resolved config in config.json, versions in provenance.json.", "", body]))
    return summary
