"""The mean-field study's results: tables (CSV), figures (through :mod:`attnflow.plot`), report.md."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..runs import atomic_write_text, fmt, write_rows

GROWTH_COLUMNS = ("normalisation", "beta", "seed", "k", "predicted", "particles_rate", "particles_lo",
                  "particles_hi", "pde_rate", "pde_lo", "pde_hi", "particles_points", "pde_points", "k_star",
                  "k_star_runner_up", "k_star_margin", "clusters_formed", "formed_at", "lifetime", "censored", "horizon", "pde_min_density")


def _csv(path: Path, columns, rows) -> None:
    write_rows(path, rows, list(columns), extra="ignore")  # a missing or None value: an empty cell


def _fmt(x, spec=".3g") -> str:
    return fmt(x, spec=spec, missing="n/a")


def _agreement(rows) -> dict:
    """Per normalisation: the median relative error of the particles' and the PDE's rates against
    the prediction at the modes that grow fastest (k* and its neighbours), and how many intervals
    contain the prediction."""
    out = {}
    for norm in sorted({r["normalisation"] for r in rows}):
        near = [r for r in rows if r["normalisation"] == norm and abs(r["k"] - r["k_star"]) <= 1]
        summary = {}
        for who in ("particles", "pde"):
            rel = [abs(r[f"{who}_rate"] / r["predicted"] - 1) for r in near if r[f"{who}_rate"] is not None]
            inside = [r[f"{who}_lo"] <= r["predicted"] <= r[f"{who}_hi"] for r in near
                      if r[f"{who}_lo"] is not None and r[f"{who}_hi"] is not None]
            summary[who] = {"median_rel_error": float(np.median(rel)) if rel else None, "fits": len(rel),
                            "interval_contains_prediction": int(sum(inside)), "intervals": len(inside)}
        both = [abs(r["particles_rate"] / r["pde_rate"] - 1) for r in near
                if r["particles_rate"] is not None and r["pde_rate"] is not None]
        summary["particles_vs_pde_max_rel_difference"] = float(max(both)) if both else None
        out[norm] = summary
    return out


def _clusters(rows) -> list[dict]:
    """Per (normalisation, beta): k*, the clusters formed per seed, their lifetimes and censoring."""
    seen = {}
    for r in rows:
        key = (r["normalisation"], r["beta"])
        seen.setdefault(key, {})[r["seed"]] = r
    out = []
    for (norm, beta), by_seed in sorted(seen.items()):
        rs = list(by_seed.values())
        out.append({"normalisation": norm, "beta": beta, "k_star": rs[0]["k_star"],
                    "runner_up": rs[0]["k_star_runner_up"], "margin": rs[0]["k_star_margin"],
                    "clusters_formed": [r["clusters_formed"] for r in rs],
                    "lifetimes": [r["lifetime"] for r in rs], "censored": [bool(r["censored"]) for r in rs],
                    "horizon": rs[0]["horizon"]})
    return out


TRANSITION_COLUMNS = ("normalisation", "beta", "sigma_c", "sigma", "ratio", "from_uniform", "from_clustered",
                      "drift_uniform", "drift_clustered", "min_density_uniform", "min_density_clustered")


def _transition_rows(transition: list[dict]) -> list[dict]:
    """transition.csv: per (normalisation, beta, sigma) the order parameter at t1 from both starts (NaN: the run
    went non-finite, an empty cell), its drift over the last tenth of the run and the smallest density."""
    rows = []
    for t in transition:
        for i, sigma in enumerate(t["sigma"]):
            rows.append({"normalisation": t["normalisation"], "beta": t["beta"], "sigma_c": t["sigma_c"],
                         "sigma": float(sigma), "ratio": float(sigma) / t["sigma_c"],
                         **{f"from_{k}": _finite(t[f"from_{k}"][i]) for k in ("uniform", "clustered")},
                         **{f"drift_{k}": _finite(t["drift"][i, j]) for j, k in enumerate(("uniform", "clustered"))},
                         **{f"min_density_{k}": _finite(t["min_density"][i, j])
                            for j, k in enumerate(("uniform", "clustered"))}})
    return rows


def _finite(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _transition_summary(transition: list[dict], d: int = 2) -> list[dict]:
    """Per (normalisation, beta): :func:`~attnflow.meanfield._transition.read_transition` of its end states."""
    from ._linear import tricritical_beta
    from ._transition import read_transition

    out = []
    for t in transition:
        r = read_transition(t["sigma"], t["from_uniform"], t["from_clustered"], t["drift"], t["sigma_c"])
        out.append({"normalisation": t["normalisation"], "beta": t["beta"], "sigma_c": t["sigma_c"],
                    "beta_star": float(tricritical_beta(d)), "threshold_lo": r["threshold"]["lo"],
                    "threshold_hi": r["threshold"]["hi"], "contains_sigma_c": r["threshold"]["contains_sigma_c"],
                    "bistable": [float(x) for x in r["bistable"]], "nonfinite": [float(x) for x in r["nonfinite"]],
                    "max_abs_drift": float(np.nanmax(np.abs(t["drift"]))) if np.isfinite(t["drift"]).any() else None})
    return out


def _transition_lines(config, summary: list[dict]) -> list[str]:
    if not summary:
        return []
    from ._transition import ORDERED, STATIONARY

    tr = config.transition
    if config.d == 3:
        setting = (f"The noisy continuity equation d_t rho = (sigma^2/2) Laplace-Beltrami rho - div(rho v[rho]) on S^2, "
                   f"spectral to degree {tr.degree} (integrating-factor RK4, steps of at most {tr.dt:g}) to "
                   f"t1 = {tr.t1:g}, from a nearly uniform start (1 + {tr.epsilon:g} sqrt(3) z) / 4 pi and from a "
                   f"clustered one (von Mises-Fisher, kappa = {tr.kappa:g}), at sigma = {list(tr.sigma_ratios)} x "
                   "sigma_c; the order parameter r = |int x rho| at t1 (transition.csv). ")
        closed = "(sigma_c^2 / 2 = c K_1 / beta, K_1 the first Funk-Hecke coefficient, c = 1 or 1 / K_0)"
    else:
        setting = (f"The noisy continuity equation d_t rho = (sigma^2/2) rho'' - (rho v[rho])' on G = {tr.grid} "
                   f"points (integrating-factor RK4, dt = {tr.dt:g}) to t1 = {tr.t1:g}, from a nearly uniform start "
                   f"(1 + {tr.epsilon:g} cos theta) / 2 pi and from a clustered one (von Mises, kappa = {tr.kappa:g}), "
                   f"at sigma = {list(tr.sigma_ratios)} x sigma_c; the order parameter r = |int rho e^(i theta)| at "
                   "t1 (transition.csv). ")
        closed = "(sigma_c^2 / 2 = I_1(beta) / beta for 1/n attention, I_1(beta) / (beta I_0(beta)) for the softmax)"
    lines = ["## The phase transition of noisy tokens", "",
             setting + f"A state counts as ordered when r > {ORDERED:g}. sigma_c is the closed form {closed}; "
             f"Mun and Rosenzweig's classification (1/n attention): continuous below beta* = "
             f"{summary[0]['beta_star']:.4f}, discontinuous with a bistable range above it.", "",
             "| normalisation | beta | sigma_c | measured threshold (uniform start) | holds sigma_c | bistable sigma "
             "| largest drift over the last tenth |", "|---|---|---|---|---|---|---|"]
    for r in summary:
        bist = ", ".join(f"{x:.4g}" for x in r["bistable"]) or "none"
        lines.append(f"| {r['normalisation']} | {r['beta']:g} | {r['sigma_c']:.4g} | [{_fmt(r['threshold_lo'], '.4g')}, "
                     f"{_fmt(r['threshold_hi'], '.4g')}] | {'yes' if r['contains_sigma_c'] else 'no'} | {bist} | "
                     f"{_fmt(r['max_abs_drift'], '.2g')} |")
    lines += ["", "Reading: the uniform start measures the loss of stability of the uniform state (its interval "
              "lies between the last ordered and the first disordered sigma of the grid); the clustered start stays "
              "ordered past it only where a clustered state is stable too (bistability, the hysteresis of a "
              "discontinuous transition). A sigma counts as bistable only where the clustered state is not melting "
              f"(its r fell by at most {STATIONARY:g} over the last tenth of the run): near sigma_c relaxation "
              "slows down to zero (the first mode is marginal there), and a clustered state still melting at t1 is "
              "no evidence; a large drift says that some point is not yet stationary.", ""]
    return lines


def write_results(config, out: Path, conv: dict, growth: list[dict], largest: dict, rate_fits,
                  transition: list[dict] | None = None, draw: bool = True) -> dict:
    """Write every table, figure (none with ``draw=False``) and report.md of a finished study; return the
    summary's results."""
    from .. import plot as ap

    c, g = config.convergence, config.growth
    sphere = config.d == 3
    distance = "D" if sphere else "w1"
    figures, lines = [], []
    conv_rows, fits = [], {}
    for norm, res in conv.items():
        fits[norm] = rate_fits(config, res["w1"], res["times"], res["pde_negative"])
        for i, n in enumerate(c.n):
            for j, t in enumerate(res["times"]):
                vals = res["w1"][i, :, j]
                ok = vals[np.isfinite(vals)]
                conv_rows.append({"normalisation": norm, "n": n, "t": t,
                                  f"{distance}_mean": float(ok.mean()) if ok.size else None,
                                  f"{distance}_std": float(ok.std(ddof=1)) if ok.size > 1 else None,
                                  "seeds": int(ok.size), "excluded": int(vals.size - ok.size)})
        if not draw:
            continue
        ax = ap.distance_vs_n(c.n, res["w1"], times=[float(t) for t in res["times"]], fits=fits[norm],
                              title=rf"{norm}: particles against the PDE, $\beta$ = {c.beta:g}",
                              **({"ylabel": "$D$(particles, PDE), degrees 1-3"} if sphere else {}))
        figures += ap.save(ax.figure, out / (f"distance_vs_n_{norm}.png" if sphere else f"w1_vs_n_{norm}.png"),
                           close=True)
        if res["frames"] is not None:
            figures += (_sphere_density_figure if sphere else _circle_density_figure)(config, out, norm, res)
    _csv(out / "convergence.csv", ("normalisation", "n", "t", f"{distance}_mean", f"{distance}_std", "seeds", "excluded"),
         conv_rows)
    rate_rows = [{"normalisation": norm, **row} for norm, rows in fits.items() for row in rows]
    _csv(out / "rates.csv", ("normalisation", "t", "rate", "lo", "hi", "points", "excluded", "pde_negative"),
         rate_rows)
    if sphere:  # modes are harmonic degrees l on S^2
        _csv(out / "growth.csv", [_degree_name(k) for k in GROWTH_COLUMNS],
             [{_degree_name(k): x for k, x in r.items()} for r in growth])
    else:
        _csv(out / "growth.csv", GROWTH_COLUMNS, growth)

    mode = "l" if sphere else "k"
    for norm in config.normalisations if draw else ():
        rows = [r for r in growth if r["normalisation"] == norm]
        fig, axes = ap.new_figure(len(g.beta), panel=(3.4, 3.0))
        axes = axes.ravel()
        for ax, beta in zip(axes, g.beta):
            here = [r for r in rows if r["beta"] == beta and r["seed"] == 0]
            nan = lambda key: [np.nan if r[key] is None else r[key] for r in here]  # noqa: E731
            ap.growth_vs_prediction([r["k"] for r in here], [r["predicted"] for r in here],
                                    [nan("particles_rate"), nan("pde_rate")], lo=[nan("particles_lo"), nan("pde_lo")],
                                    hi=[nan("particles_hi"), nan("pde_hi")], names=["particles", "PDE"], ax=ax,
                                    title=rf"$\beta$ = {beta:g} (${mode}^*$ = {here[0]['k_star']})", mode=mode)
        what = "harmonic degrees" if sphere else "modes"
        fig.suptitle(f"{norm} attention: growth of the {what} of a near-uniform start (n = {g.n})", fontsize="medium")
        figures += ap.save(fig, out / f"growth_{norm}.png", close=True)

    transition = transition or []
    if transition:
        _csv(out / "transition.csv", TRANSITION_COLUMNS, _transition_rows(transition))
        for norm in config.normalisations if draw else ():
            here = [t for t in transition if t["normalisation"] == norm]
            if here:
                from ._linear import tricritical_beta

                fig, axes = ap.new_figure(len(here), panel=(4.4, 3.4))
                for ax, t in zip(axes.ravel(), here):
                    ap.order_vs_noise(np.asarray(t["sigma"]) / t["sigma_c"], t["from_uniform"], t["from_clustered"],
                                      beta=t["beta"], beta_star=float(tricritical_beta(config.d)), ax=ax)
                fig.suptitle(f"{norm} attention: the order parameter at t = {config.transition.t1:g}",
                             fontsize="medium")
                figures += ap.save(fig, out / f"transition_{norm}.png", close=True)
    transition_summary = _transition_summary(transition, config.d)

    agreement = _agreement(growth)
    clusters = _clusters(growth)
    text = _SPHERE_TEXT if sphere else _CIRCLE_TEXT
    m = mode
    lines += [text["title"], "", text["setting"].format(norms=", ".join(config.normalisations), dtype=config.dtype), "",
              "## Particles converge to the PDE", "",
              text["convergence"].format(modes=list(c.start_modes), amps=list(c.start_amplitudes), beta=c.beta,
                                         n=list(c.n), seeds=c.seeds, grid=c.grid, degree=c.degree), "",
              f"| normalisation | t | rate r in {text['distance']} ~ n^-r | 95% interval | points |",
              "|---|---|---|---|---|"]
    for r in rate_rows:
        rate = "PDE negative: unresolved, no fit" if r["pde_negative"] else _fmt(r["rate"])
        lines.append(f"| {r['normalisation']} | {r['t']:g} | {rate} | [{_fmt(r['lo'])}, {_fmt(r['hi'])}] | "
                     f"{r['points']} |")
    lines += ["", f"Reading: iid samples of a density are at {text['distance']} distance of order n^-1/2 from it, and "
              "the flow is Lipschitz over a fixed time, so a rate near 1/2 at every time says the particles follow "
              "the PDE with no bias above the sampling noise; a rate falling with t would show a bias (time step, "
              f"{'degree' if sphere else 'grid'}) that does not vanish with n.", ""]
    for norm, res in conv.items():
        mass = res["mass"]
        extra = f", start above degree {c.degree} discarded {res['discarded']:.2g} (relative L2)" if sphere else ""
        lines.append(f"- {norm}: PDE mass drift {float(np.max(np.abs(mass - mass[0]))):.2g} (rounding), smallest "
                     f"density {float(np.min(res['min_density'])):.3g} (positivity monitor){extra}.")
    lines += ["", "## Instability of the uniform measure", "",
              text["growth"].format(n=g.n, modes=g.modes, half=g.epsilon / 2, grid=g.grid, degree=g.degree,
                                    seeds=g.seeds, amax=g.max_amplitude, min_mass=g.min_mass), "",
              f"| normalisation | method | median rel. error at {m}*-1..{m}*+1 | intervals containing lambda_{m} |",
              "|---|---|---|---|"]
    for norm, a in agreement.items():
        for who in ("particles", "pde"):
            s = a[who]
            lines.append(f"| {norm} | {who} | {_fmt(s['median_rel_error'])} | {s['interval_contains_prediction']} "
                         f"of {s['intervals']} |")
    lines += [""] + [f"- {norm}: the particles' and the PDE's rates at {m}*-1..{m}*+1 differ by at most "
                     f"{_fmt(a['particles_vs_pde_max_rel_difference'], '.2g')} (relative)." for norm, a in agreement.items()]
    lines += ["", f"| normalisation | beta | {m}* | runner-up (margin) | clusters formed (per seed) | lifetime (per seed; "
              "censored at the horizon marked >) | horizon |", "|---|---|---|---|---|---|---|"]
    for r in clusters:
        life = ", ".join(("> " if cen else "") + _fmt(x) for x, cen in zip(r["lifetimes"], r["censored"]))
        lines.append(f"| {r['normalisation']} | {r['beta']:g} | {r['k_star']} | {r['runner_up']} "
                     f"({_fmt(100 * r['margin'], '.2g')}%) | {r['clusters_formed']} | {life} | {r['horizon']:.3g} |")
    lines += ["", text["growth_reading"], "",
              *_transition_lines(config, transition_summary),
              "## The largest run", "",
              f"n = {config.largest.n} tokens, beta = {config.largest.beta:g}, {config.largest.layers} Euler layers "
              f"on the {text['path']}: {largest['run_s']:.3g} s after a {largest['compile_s']:.3g} s compile "
              f"({config.largest.n * config.largest.layers / largest['run_s']:.3g} particle-steps per second); "
              f"state {largest['state_bytes'] / 2**20:.1f} MiB, compiled temporaries "
              f"{max(largest['temp_bytes'], 0) / 2**20:.1f} MiB; finite: {largest['finite']}.", "",
              "## Figures", ""] + ([f"![{Path(f).stem}]({Path(f).name})" for f in figures if f.endswith(".png")]
                                   if draw else [("Not drawn (figures=False, `--no-figures`); the same run with "
                                                  "figures resumes every unit and draws them.")])
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    return {"convergence": {norm: {"rates": fits[norm], "pde_mass_drift": float(np.max(np.abs(res["mass"] - res["mass"][0]))),
                                   "pde_min_density": float(np.min(res["min_density"]))} for norm, res in conv.items()},
            "growth": {"agreement": agreement, "clusters": clusters}, "largest": largest,
            **({"transition": transition_summary} if transition_summary else {}),
            "figures": [Path(f).name for f in figures]}


_GROWTH_READING = (
    "Reading: the window ends for every {mode_word} when the largest one leaves the linear regime, so each {mode_word} "
    "is fitted while the quadratic term rho v is still small; the {mode_word}s near {m}* then grow at lambda_{m} in "
    "the particles and in the PDE alike. A {mode_word} far slower than the fastest barely grows within the window, "
    "and the products of the fast {mode_word}s ({products}) overtake it before the window ends: its fitted rate is "
    "no measurement of lambda_{m} (growth.csv holds every {mode_word} with its predicted rate). The margin is the "
    "relative gap (lambda_{m}* - lambda_runner-up) / lambda_{m}*: where it is a few percent, two {mode_word}s grow "
    "alike and the number of clusters that form may follow either.")

_CIRCLE_TEXT = {
    "title": "# attnflow meanfield: the circle flow against its continuity equation",
    "setting": "Tokens on the circle, Q = K = V = I; normalisations: {norms}; {dtype}. Particles: the ODE flow (Tsit5, "
               "constant steps) on the Fourier fast path; PDE: the pseudo-spectral continuity equation (RK4). "
               "Resolved config in config.json.",
    "convergence": "Start density (1 + sum a_k cos k(theta - phi_k)) / 2 pi with modes {modes}, amplitudes {amps}; "
                   "beta = {beta:g}; n in {n}, {seeds} seeds each; PDE grid G = {grid}. W1 is exact on the circle "
                   "(through the CDFs). Times of the mean normalisation are divided by I_0(beta): near the uniform "
                   "measure its velocity is I_0(beta) times the softmax one, so both are read at the same stage.",
    "distance": "W1",
    "growth": "Near-uniform starts (n = {n} equally spaced angles displaced so that every mode k <= {modes} has "
              "amplitude epsilon / 2 = {half:g}, random phases; the PDE from the same density on G = {grid} points), "
              "{seeds} seeds per beta. Each mode's rate is the least-squares slope of log |mu_k| over the joint "
              "linear window (until the largest |mu_k| first exceeds {amax:g}: from then on the fast modes drive the "
              "others); the prediction is the linearised rate lambda_k = k^2 I_k(beta) / beta (mean) or / "
              "(beta I_0(beta)) (softmax).",
    "growth_reading": _GROWTH_READING.format(mode_word="mode", m="k",
                                             products="modes j and k - j drive mode k at lambda_j + lambda_{k-j}"),
    "path": "Fourier fast path",
}

_SPHERE_TEXT = {
    "title": "# attnflow meanfield: the flow on the sphere S^2 against its continuity equation",
    "setting": "Tokens on S^2 (d = 3), Q = K = V = I; normalisations: {norms}; {dtype}. Particles: the ODE flow "
               "(Tsit5, constant steps) on the harmonic path (O(n L^2), exact to rounding) from n >= 4 (L + 1)^2 "
               "tokens, where it is faster than the direct sum; PDE: the continuity "
               "equation spectral in spherical harmonics (RK4). Resolved config in config.json.",
    "convergence": "Start density (1 + sum a_k P_(l_k)(<x, u_k>)) / 4 pi, P_l the Legendre polynomials, with degrees "
                   "{modes}, amplitudes {amps}, axes u_k = (sin phi_k, 0, cos phi_k); beta = {beta:g}; n in {n}, "
                   "{seeds} seeds each; PDE to degree L = {degree}. The distance D = sqrt(E_1 + E_2 + E_3) of the "
                   "difference of the harmonic coefficients (degrees 1 to 3) is an MMD computed exactly from the "
                   "particles; its bias for iid draws is E D^2 = sum_(l <= 3, m) Var Y_lm(X) / n (15 / n from the "
                   "uniform measure). Times of the mean normalisation are divided by sinh(beta) / beta, the mean of "
                   "the kernel over the uniform measure on S^2.",
    "distance": "D",
    "growth": "Near-uniform starts (n = {n} points of a randomly rotated Fibonacci lattice moved along the gradient "
              "of sum_lm g_lm Y_lm / (l (l + 1)), so that every degree l <= {modes} has amplitude sqrt(E_l) = "
              "epsilon / 2 = {half:g} in a random direction; the PDE from the same first-order density, to degree "
              "{degree}), {seeds} seeds per beta. Each degree's rate is the least-squares slope of log sqrt(E_l) over "
              "the joint linear window (until the largest first exceeds {amax:g}); the prediction is the Funk-Hecke "
              "rate lambda_l = l (l + 1) K_l / beta (mean) or / (beta K_0) (softmax). Clusters: connected cells of a "
              "32 x 64 equal-area grid holding at least {min_mass:g} of the mass each (0 while the cloud is spread).",
    "growth_reading": _GROWTH_READING.format(mode_word="degree", m="l",
                                             products="degrees j and k drive the degrees |j - k|..j + k"),
    "path": "harmonic path",
}


def _degree_name(key: str) -> str:
    """growth.csv's column on S^2: the mode k is the harmonic degree l."""
    return {"k": "l", "k_star": "l_star", "k_star_runner_up": "l_star_runner_up",
            "k_star_margin": "l_star_margin"}.get(key, key)


def _circle_density_figure(config, out: Path, norm: str, res: dict) -> list[str]:
    """The particles' histogram and the PDE's density in (theta, t), side by side."""
    from .. import plot as ap

    c = config.convergence
    frames, hist = res["frames"]
    fig, axes = ap.new_figure(2, panel=(4.6, 3.4))
    axes = axes.ravel()
    hist = np.asarray(hist)
    top = 2 * math.pi * max(float(np.max(res["pde_density"])), float(np.max(hist)) * hist.shape[1] / (2 * math.pi))
    ap.circle_density(hist * hist.shape[1] / (2 * math.pi), t=frames, ax=axes[0], vmax=top,
                      title=f"particles, n = {c.n[-1]} (histogram)")
    ap.circle_density(res["pde_density"], t=res["pde_ts"], ax=axes[1], vmax=top,
                      title=f"continuity equation, G = {res['pde_density'].shape[1]}")
    fig.suptitle(rf"{norm} attention, $\beta$ = {c.beta:g}: density in ($\theta$, $t$)", fontsize="medium")
    return ap.save(fig, out / f"density_{norm}.png", close=True)


#: the PDE's density on S^2 is drawn on the grid of at least this degree (a finer map than the solve's own grid)
MAP_DEGREE = 48


def _sphere_density_figure(config, out: Path, norm: str, res: dict) -> list[str]:
    """Mollweide maps at the first, middle and last frame: the particles' histogram (top) and the PDE (bottom)."""
    import jax.numpy as jnp

    from .. import plot as ap
    from ._sphere_pde import sphere_density_on_grid, sphere_grid

    c = config.convergence
    frames, hist = res["frames"]
    hist = np.asarray(hist)
    cells = hist.shape[1] * hist.shape[2]
    picks = sorted({0, len(frames) // 2, len(frames) - 1})
    pde_at = [int(np.argmin(np.abs(res["pde_ts"] - frames[i]))) for i in picks]
    degree = max(MAP_DEGREE, c.degree)
    grid = sphere_grid(degree)
    maps = np.asarray(sphere_density_on_grid(jnp.asarray(res["pde_coefficients"][pde_at]), degree))
    particles = hist[picks] * cells / (4 * math.pi)
    top = 4 * math.pi * max(float(np.max(maps)), float(np.max(particles)))
    fig, axes = ap.new_figure(len(picks), 2, panel=(4.0, 2.5), projection="mollweide")
    for j, (i, q) in enumerate(zip(picks, pde_at)):
        ap.sphere_density_map(particles[j], ax=axes[0][j], vmax=top,
                              title=f"particles, n = {c.n[-1]}, t = {frames[i]:.3g}")
        ap.sphere_density_map(maps[j], z=np.asarray(grid.z), phi=np.asarray(grid.phi), ax=axes[1][j], vmax=top,
                              title=f"PDE, degree {c.degree}, t = {res['pde_ts'][q]:.3g}")
    fig.suptitle(rf"{norm} attention, $\beta$ = {c.beta:g}: density on $S^2$ (Mollweide, equal area)",
                 fontsize="medium")
    return ap.save(fig, out / f"density_{norm}.png", close=True)
