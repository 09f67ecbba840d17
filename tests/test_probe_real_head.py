"""The sensitivity study for a trained head (configs/probe-sensitivity-minilm.toml): the config
path loads all-MiniLM-L6-v2's head, and the gradient of a level matches a central difference
on one entry (float64), at tiny cost (2 layers, a 4-token sentence)."""

import json

import jax
import jax.numpy as jnp
import numpy as np

from attnflow.observables import diameter
from attnflow.probe import load_probe_config, parse_probe_config, run_probe
from attnflow.probe._real_head import load_real_head
from attnflow.probe._sensitivity import levels_of


def test_real_head_sensitivity_config_runs_and_matches_central_difference(tmp_path):
    config = load_probe_config("probe-sensitivity-minilm.toml", {"head": {"text": "Hello world"},
                                                                  "dynamics": {"t1": 0.2, "dt": 0.1}})
    assert config["system"]["source"] == "minilm" and config["head"]["layer"] == 3
    summary = run_probe(config, tmp_path, progress=False)
    row = summary["rows"][0]
    G = np.asarray(row["da_dV"])
    assert G.shape == (384, 384) and np.isfinite(G).all() and row["n"] == 4
    assert summary["fd_check_passed"]  # the study's own directional check (tolerance in the config)
    assert json.loads((tmp_path / "summary.json").read_text())["source"] == "minilm"
    assert (tmp_path / "sensitivity_0.png").stat().st_size > 0
    # one entry, by central differences, independently of the study's code path
    i, j = np.unravel_index(np.argmax(np.abs(G)), G.shape)
    with jax.enable_x64(True):
        h = load_real_head(parse_probe_config(config).head)
        s = diameter(h.x0)
        a = jax.jit(lambda V: levels_of(h.Q, h.K, V, h.x0, s, dt=0.1, layers=2,
                                        temperature=config["levels"]["temperature"], beta=h.beta)[0])
        step = 1e-6
        E = jnp.zeros_like(h.V).at[i, j].set(step)
        fd = (float(a(h.V + E)) - float(a(h.V - E))) / (2 * step)
    # float64, h = 1e-6: truncation ~ h^2 |a'''| and rounding ~ eps |a| / h, both << 1e-6 of |G| ~ 1
    assert abs(fd - G[i, j]) <= 1e-6 * max(1.0, abs(G[i, j]))
