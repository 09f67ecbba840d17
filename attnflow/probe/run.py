r"""``attnflow probe CONFIG --out DIR``: run one gradient-based study of the paper's assumptions
and write a report folder (report.md, summary.json, figures, resolved config, provenance).

The study is named by the config's ``study`` key; its shipped config
``configs/probe-<study>.toml`` is the default and the schema (unknown keys are refused).
Optimisation state is checkpointed under ``DIR/checkpoints``: the same command after an
interruption resumes; a different config in the same folder is refused.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import InputError
from .config import check_probe_config
from ..runio import (
    atomic_write_json,
    atomic_write_text,
    claim_output_dir,
    config_fingerprint,
    load_config,
    provenance,
    releases_output_dirs,
    write_marker,
)

__all__ = ["STUDIES", "load_probe_config", "run_probe"]


def _runner(study: str):
    from .beyond_pd import run_beyond_pd
    from .failure import run_failure
    from .sensitivity import run_sensitivity

    return {"distance-to-failure": run_failure, "beyond-pd": run_beyond_pd, "sensitivity": run_sensitivity}[study]


#: study name -> shipped default config
STUDIES = {
    "distance-to-failure": "probe-distance-to-failure.toml",
    "beyond-pd": "probe-beyond-pd.toml",
    "sensitivity": "probe-sensitivity.toml",
}


def load_probe_config(path: str | Path, overrides: dict | None = None) -> dict:
    """The resolved config of a probe: the shipped default of its ``study`` with the file's
    values (and then ``overrides``, a nested dict) on top, checked by
    :func:`attnflow.probe.check_probe_config` (a relative ``system.weights_file`` in the file is
    read from the file's folder).

    Example:
        >>> from attnflow.probe import load_probe_config
        >>> c = load_probe_config("probe-sensitivity.toml", {"system": {"num_triples": 2}})
        >>> c["study"], c["system"]["num_triples"]
        ('sensitivity', 2)
    """
    from ..runio import CONFIG_DIR, merge_config

    p = Path(path)
    if not p.is_file() and (CONFIG_DIR / p.name).is_file() and p.parent == Path("."):
        p = CONFIG_DIR / p.name
    if not p.is_file():
        raise InputError(f"probe config {path} does not exist (shipped: {', '.join(STUDIES.values())}).")
    try:
        with open(p, "rb") as fh:
            study = tomllib.load(fh).get("study")
    except tomllib.TOMLDecodeError as err:
        raise InputError(f"probe config {p} is not valid TOML: {err}.") from err
    if study not in STUDIES:
        raise InputError(f"probe config {p} must set study to one of {sorted(STUDIES)}, got {study!r}.")
    config = load_config(p, STUDIES[study])
    weights_file = config["system"].get("weights_file", "")
    if weights_file and not Path(weights_file).is_absolute():  # read from the config file's folder
        config["system"]["weights_file"] = str((p.parent / weights_file).resolve())
    if overrides:
        config = merge_config(config, overrides, where="overrides")
    if config["study"] != study:
        raise InputError("the study of a probe config cannot be overridden.")
    check_probe_config(config)
    return config


@releases_output_dirs
def run_probe(config: dict, out: str | Path, *, progress: bool = True, interrupt_after: int | None = None) -> dict:
    """Run the study of a resolved ``config`` (see :func:`load_probe_config`; checked again here,
    before ``out`` is claimed) into ``out``; returns the summary. Computation runs in float64
    (``jax.enable_x64``, scoped). The fingerprint covers the config and the bytes of
    ``system.weights_file``.

    ``interrupt_after`` (testing): stop like a kill after that many optimiser steps.
    """
    import jax

    identity = check_probe_config(config)  # before the folder is claimed or anything compiles
    out, existed = claim_output_dir(out, "probe")
    fingerprint = config_fingerprint({**config, **identity})
    marker = out / "attnflow-run.json"
    if existed and marker.is_file():
        import json

        old = json.loads(marker.read_text()).get("fingerprint")
        if old is not None and old != fingerprint:
            raise InputError(f"--out {out} holds a probe run with a different config; choose a new folder.")
    write_marker(out, "probe", {"study": config["study"], "fingerprint": fingerprint})
    atomic_write_json(out / "config.json", config)
    with jax.enable_x64(True):
        summary, body, figures = _runner(config["study"])(config, out, progress=progress,
                                                          interrupt_after=interrupt_after, fingerprint=fingerprint)
    prov = provenance(seed=config["seed"], config=config)
    summary = {**summary, "figures": figures, "provenance": prov}
    atomic_write_json(out / "summary.json", summary)
    atomic_write_json(out / "provenance.json", prov)
    atomic_write_text(out / "report.md", "\n".join([
        f"# attnflow probe: {config['study']}", "",
        f"seed {config['seed']}, config fingerprint {fingerprint}, commit {prov['git_commit']}; "
        "resolved config in config.json, versions in provenance.json.", "", body]))
    return summary
