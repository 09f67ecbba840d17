"""attnflow.plot's public face: every function documented with a runnable example, nothing that changes
matplotlib's global state on import, and every job's figure drawn through it."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import attnflow.plot as ap

ROOT = Path(__file__).resolve().parent.parent


def test_every_public_function_has_an_example():
    missing = [name for name in ap.__all__ if callable(getattr(ap, name)) and not inspect.isclass(getattr(ap, name))
               and ">>>" not in (getattr(ap, name).__doc__ or "")]
    assert not missing, f"public functions of attnflow.plot without an Example: {missing}"


def test_importing_the_package_leaves_matplotlibs_backend_and_settings_alone():
    code = ("import matplotlib; before = (matplotlib.get_backend(), dict(matplotlib.rcParams)); "
            "import attnflow.plot; print(before == (matplotlib.get_backend(), dict(matplotlib.rcParams)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.stdout.strip() == "True", out.stderr[-2000:]


def test_no_job_draws_or_saves_a_figure_outside_attnflow_plot():
    offenders = []
    for path in sorted((ROOT / "attnflow").rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py")):
        if "plot" in path.relative_to(ROOT).parts[:2]:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bplt\.|\.savefig\(|matplotlib\.use\(", line) and ">>>" not in line:
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
