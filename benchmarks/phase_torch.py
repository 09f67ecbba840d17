#!/usr/bin/env python
r"""A phase diagram of the sphere model in PyTorch, written the way the peers' script does it.

For each inverse temperature beta (a Python loop), ``systems`` clouds of n tokens on the unit
sphere :math:`S^{d-1}` (float64, shape (systems, n, d)) take ``t1 / dt`` projected Euler layers

.. math::  x_i \leftarrow N\Big(x_i + \Delta t\, \mathrm{Proj}_{x_i^\perp} \sum_j \mathrm{softmax}_j(\beta\langle x_i, x_j\rangle)\, x_j\Big),
           \qquad N(y) = y / |y|,

with batched matrix products (``torch.bmm``) and ``torch.softmax``. With ``--sigma`` (noise strengths, a loop
outside the betas' loop) every layer adds independent tangent noise, Euler-Maruyama as the peers would add it:
:math:`y_i = x_i + \Delta t\,\mathrm{drift}_i + \sigma\sqrt{\Delta t}\,\mathrm{Proj}_{x_i^\perp}\xi_i`,
:math:`\xi_i \sim N(0, I_d)` from ``torch.randn`` (one generator seeded by ``--seed``), then :math:`x_i = N(y_i)`;
sigma = 0 draws nothing (the noiseless layer). At every checkpoint layer it
records, per system, the statistics ``attnflow phase`` records (on the directions
:math:`u_i = x_i / |x_i|`, Gram matrix :math:`G = U U^T` from one ``torch.bmm``):

* ``pairs_clustered``: fraction of the n(n-1) ordered pairs with :math:`G_{ij} \ge` threshold;
* ``clusters``: connected components of that graph (min-label propagation with a pointer jump,
  until no label changes);
* ``energy``: :math:`\frac{1}{2\beta n^2}\sum_{ij} e^{\beta G_{ij}}` (through ``logsumexp``);
* ``span``: eigenvalues (``torch.linalg.eigvalsh``) of the smaller of :math:`U U^T` and
  :math:`U^T U` above 1e-6 times the trace;
* ``ip_min``, ``ip_mean``, ``ip_max``: smallest, mean and largest off-diagonal :math:`G_{ij}`;

and writes their per-beta means over the systems whose whole run stayed finite (a CSV with one row
per (beta, checkpoint layer); columns as in attnflow's cells.csv). The checkpoint layers are
attnflow's uniform ones (``round(linspace(0, layers, checkpoints))``); ``--x0 FILE`` (a .npy array
(systems, n, d)) starts from given clouds, so that the same start as an attnflow run can be fed in.
``--device cuda`` runs the same loop on a GPU (float64 still; the start clouds and the noise are drawn on the
CPU and copied, so every device starts from the same clouds and draws the same noise).

Example (the peers' default diagram):

    python benchmarks/phase_torch.py --systems 2048 --betas 0.1 9 90 --out torch_phase.csv --threads 1
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
import time
from pathlib import Path

import numpy as np

#: the per-system statistics, in the order of attnflow's cells.csv
OBSERVABLES = ("pairs_clustered", "clusters", "energy", "span", "ip_min", "ip_mean", "ip_max")
#: eigenvalues of the Gram matrix above this times its trace count towards the span (attnflow's value)
SPAN_REL_TOL = 1e-6


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="phase_torch.py", description=__doc__.split("\n\n")[0],
                                epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", type=int, default=2048, help="random clouds per beta (default 2048)")
    p.add_argument("--n", type=int, default=32, help="tokens per cloud (default 32)")
    p.add_argument("--d", type=int, default=2, help="token dimension (default 2)")
    p.add_argument("--betas", type=float, nargs=3, default=(0.1, 9.0, 90), metavar=("START", "STOP", "NUM"),
                   help="inverse temperatures linspace(START, STOP, NUM) (default 0.1 9 90)")
    p.add_argument("--t1", type=float, default=30.0, help="final time (default 30; t1 / dt layers)")
    p.add_argument("--dt", type=float, default=0.1, help="layer step (default 0.1)")
    p.add_argument("--checkpoints", type=int, default=200, help="layers with statistics, incl. 0 and the last (default 200)")
    p.add_argument("--threshold", type=float, default=0.999, help="pairs with <u_i, u_j> >= this are clustered (default 0.999)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random start clouds (ignored with --x0) and of "
                   "the noise (default 0)")
    p.add_argument("--sigma", type=float, nargs="+", default=[0.0], help="noise strengths (default 0: no noise)")
    p.add_argument("--x0", type=Path, help=".npy file of start clouds (systems, n, d), used for every beta")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default 0: PyTorch's choice)")
    p.add_argument("--device", default="cpu", help="torch device of the tensors: cpu (default) or cuda (cuda:K)")
    p.add_argument("--out", type=Path, default=Path("phase_torch.csv"), help="CSV of the per-beta means (default phase_torch.csv)")
    return p.parse_args(argv)


def beta_grid(start: float, stop: float, num: int) -> list[float]:
    """attnflow's linear range: linspace rounded to 12 significant digits."""
    return [float(f"{b:.12g}") for b in np.linspace(start, stop, int(num))]


def checkpoint_layers(layers: int, checkpoints: int) -> list[int]:
    """attnflow's uniform checkpoint layers: distinct rounded linspace(0, layers, checkpoints)."""
    if checkpoints >= layers + 1:
        return list(range(layers + 1))
    return sorted({int(k) for k in np.round(np.linspace(0, layers, checkpoints)).astype(int)})


def start_clouds(torch, systems: int, n: int, d: int, seed: int):
    """Uniform random clouds on the sphere (normalised Gaussians), float64, on the CPU."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(systems, n, d, generator=g, dtype=torch.float64)
    return x / x.norm(dim=-1, keepdim=True)


def components(torch, adjacent):
    """Connected components per system of a batch of symmetric boolean graphs (B, n, n)."""
    B, n, _ = adjacent.shape
    labels = torch.arange(n, device=adjacent.device).expand(B, n).contiguous()
    big = torch.tensor(n, device=adjacent.device)
    while True:
        new = torch.where(adjacent, labels[:, None, :], big).min(dim=-1).values
        new = torch.gather(new, 1, new)  # pointer jump: a label never exceeds its node's index
        if torch.equal(new, labels):
            break
        labels = new
    return (labels == torch.arange(n, device=adjacent.device)).sum(dim=-1)


def statistics(torch, x, beta: float, threshold: float) -> dict:
    """The observables of a batch of clouds (B, n, d), each (B,)."""
    B, n, d = x.shape
    norm = x.norm(dim=-1, keepdim=True)
    u = torch.where(norm > 0, x / torch.where(norm > 0, norm, 1.0), 0.0)
    G = torch.bmm(u, u.transpose(1, 2))
    eye = torch.eye(n, dtype=torch.bool, device=x.device)
    adjacent = (G >= threshold) | eye
    off = ~eye
    pairs = (adjacent.sum(dim=(1, 2)) - n).double() / max(n * (n - 1), 1)
    energy = torch.exp(torch.logsumexp(beta * G.reshape(B, -1), dim=-1) - math.log(2 * beta * n * n))
    small = G if n <= d else torch.bmm(u.transpose(1, 2), u)
    eigenvalues = torch.linalg.eigvalsh(small)
    trace = (u * u).sum(dim=(1, 2))
    span = (eigenvalues > SPAN_REL_TOL * trace[:, None]).sum(dim=-1) * (trace > 0)
    return {"pairs_clustered": pairs.double(), "clusters": components(torch, adjacent).double(), "energy": energy,
            "span": span.double(), "ip_min": torch.where(off, G, math.inf).amin(dim=(1, 2)),
            "ip_mean": (G.sum(dim=(1, 2)) - G.diagonal(dim1=1, dim2=2).sum(dim=-1)) / max(n * (n - 1), 1),
            "ip_max": torch.where(off, G, -math.inf).amax(dim=(1, 2))}


def run_beta(torch, x0, beta: float, *, dt: float, layers: int, ckpt: list[int], threshold: float,
             sigma: float = 0.0, generator=None) -> dict:
    """One beta: every system's statistics at the checkpoints, (K, B) each, and which runs stayed finite
    (``sigma > 0``: tangent noise from ``generator`` at every layer)."""
    x = x0.clone()
    saved = {name: [] for name in OBSERVABLES}
    at = set(ckpt)
    finite = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    for layer in range(layers + 1):
        if layer in at:
            for name, value in statistics(torch, x, beta, threshold).items():
                saved[name].append(value)
        if layer == layers:
            break
        p = torch.softmax(beta * torch.bmm(x, x.transpose(1, 2)), dim=-1)
        drift = torch.bmm(p, x)
        drift = drift - ((drift * x).sum(dim=-1, keepdim=True) / (x * x).sum(dim=-1, keepdim=True)) * x
        if sigma:
            xi = torch.randn(x.shape, generator=generator, dtype=x.dtype).to(x.device)  # the CPU's draws
            xi = xi - ((xi * x).sum(dim=-1, keepdim=True) / (x * x).sum(dim=-1, keepdim=True)) * x
            drift = drift + (sigma / math.sqrt(dt)) * xi  # dt * drift + sigma sqrt(dt) xi below
        y = x + dt * drift
        x = y / y.norm(dim=-1, keepdim=True)
        finite &= torch.isfinite(x).all(dim=-1).all(dim=-1)
    out = {name: torch.stack(values) for name, values in saved.items()}
    for values in out.values():
        finite &= torch.isfinite(values).all(dim=0)
    return {**out, "finite": finite}


def main(argv=None) -> int:
    args = parse(argv)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    layers = round(args.t1 / args.dt)
    if layers < 1 or not math.isclose(layers * args.dt, args.t1, rel_tol=1e-9):
        print("phase_torch.py: error: t1 / dt must be a whole number of layers (>= 1).", file=sys.stderr)
        return 2
    if args.x0 is not None:
        x0 = torch.from_numpy(np.load(args.x0).astype(np.float64))
        if x0.ndim != 3:
            print(f"phase_torch.py: error: --x0 must hold an array (systems, n, d), got shape {tuple(x0.shape)}.",
                  file=sys.stderr)
            return 2
    else:
        x0 = start_clouds(torch, args.systems, args.n, args.d, args.seed)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("phase_torch.py: error: --device cuda, but PyTorch sees no CUDA device.", file=sys.stderr)
        return 2
    x0 = x0.to(device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    systems, n, d = x0.shape
    betas = beta_grid(*args.betas)
    ckpt = checkpoint_layers(layers, args.checkpoints)
    sync()
    start = time.perf_counter()
    rows = []
    generator = torch.Generator().manual_seed(args.seed)
    with torch.inference_mode():
        for sigma in args.sigma:
            for beta in betas:
                r = run_beta(torch, x0, beta, dt=args.dt, layers=layers, ckpt=ckpt, threshold=args.threshold,
                             sigma=sigma, generator=generator)
                ok = r["finite"]
                means = {name: r[name][:, ok].mean(dim=1).tolist() for name in OBSERVABLES}
                for j, layer in enumerate(ckpt):
                    rows.append({"beta": beta, "n": n, "d": d, "sigma": sigma, "t": round(layer * args.dt, 12),
                                 "layer": layer, "systems": int(ok.sum()), "nonfinite": int((~ok).sum()),
                                 **{name: means[name][j] for name in OBSERVABLES}})
    sync()
    seconds = time.perf_counter() - start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"phase_torch: {len(args.sigma)} sigma x {len(betas)} betas x {systems} systems x {layers} layers (n = {n}, d = {d}), "
          f"{len(ckpt)} checkpoints, {torch.get_num_threads()} thread(s)"
          f"{'' if device.type == 'cpu' else f' on {device}'}: {seconds:.2f} s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
