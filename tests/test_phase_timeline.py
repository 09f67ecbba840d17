"""benchmarks/phase_timeline.py: one phase command's stretches, stamped from inside its process; the
settings a bench record names; the phase bench's two ratios (with and without figures)."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def test_the_stretches_of_a_first_and_a_kept_run_add_up_to_the_command(tmp_path, capsys):
    """A first run compiles (trace and XLA compile > 0), a second reads the kept programs (neither); the stretches
    of each run add up to its wall time; the figure that ended last is named; the record holds every stamp."""
    from benchmarks import phase_timeline

    out = tmp_path / "tl.json"
    assert phase_timeline.main(["--row", "small", "--quick", "--runs", "2", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    first, kept = (r["stretches"] for r in record["runs"])
    parts = ("start-up", "trace and lowering", "XLA compile", "computation", "tables and figures", "exit")
    for s in (first, kept):
        assert sum(s[k] for k in parts) == pytest.approx(s["wall"], abs=1e-6)
        assert all(s[k] >= 0 for k in parts) and s["cpu"] > 0
        assert s["last figure"] in ("heat_maps", "curves", "staircase", "lifetimes")
    assert first["trace and lowering"] > 0 and first["XLA compile"] > 0
    assert kept["trace and lowering"] == 0 and kept["XLA compile"] == 0
    assert "XLA compile" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        phase_timeline.main(["--row", "default", "--quick"])  # no toy size of that row: refused before any work


def test_the_chunk_files_are_timed_apart_from_the_computations(tmp_path):
    """With --chunk-size the toy row runs in several chunks: one write stamped per chunk (start before end, on the
    writer thread), the time between chunks and a chunk's write as medians, each within the computation's
    stretch plus the tail (a write goes behind the next chunk, the last one's into the tables)."""
    from benchmarks import phase_timeline

    out = tmp_path / "tl.json"
    assert phase_timeline.main(["--row", "small", "--quick", "--runs", "1", "--chunk-size", "32",
                                "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["chunk_size"] == 32
    run = record["runs"][0]
    s = run["stretches"]
    assert s["chunk files"] == 4  # 32 systems x 4 betas in chunks of 32 pairs
    writes = [x for x in run["stamps"] if x["what"] in ("start write", "end write")]
    assert len(writes) == 8 and {x["thread"] for x in writes} == {"attnflow-chunk-writer_0"}
    assert all(a["what"] == "start write" and b["what"] == "end write" and a["t"] <= b["t"]
               for a, b in zip(writes[::2], writes[1::2]))
    assert 0 < s["between chunks (median)"] <= s["computation"]
    assert 0 < s["chunk write (median)"] <= s["computation"] + s["tables and figures"]
    with pytest.raises(SystemExit):
        phase_timeline.main(["--row", "small", "--quick", "--chunk-size", "0"])


def test_a_record_names_the_kernel_and_thread_settings_in_force(monkeypatch):
    """A bench run under ``XLA_FLAGS`` / ``ATEN_CPU_CAPABILITY`` (other kernels than the machine's own) says so in
    its record and its printed table; a run without them names nothing."""
    from benchmarks.bench_phase import format_result
    from benchmarks.common import ENVIRONMENT_KEYS, machine_info

    for key in ENVIRONMENT_KEYS:
        monkeypatch.delenv(key, raising=False)
    plain = machine_info()
    assert plain["environment"] == {}
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=AVX2")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    limited = machine_info()
    assert limited["environment"] == {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    result = {"machine": limited, "matmul_f64": {"flops_per_s": 1e11}, "rows": []}
    assert "settings in force: XLA_FLAGS=--xla_cpu_max_isa=AVX2, ATEN_CPU_CAPABILITY=avx2" in format_result(result)
    assert "settings in force" not in format_result({**result, "machine": plain})


def test_the_phase_bench_prints_torch_against_the_command_with_and_without_figures():
    """Both ratios per round (torch seconds over attnflow seconds), the first run's apart from the kept programs'
    spread, each printed on its own line."""
    from benchmarks.bench_phase import _spread, _tables_ratios, format_result
    from benchmarks.common import machine_info

    torch_s, with_figures, tables = [18.0, 20.0, 19.0], [6.0, 5.0, 4.0], [4.5, 4.0, 5.0]
    ratios = _tables_ratios(torch_s, tables)
    assert ratios["ratio_tables_first_run"] == pytest.approx(4.0)
    assert ratios["ratio_tables_kept_programs"] == pytest.approx({"min": 3.8, "median": 4.4, "max": 5.0})
    row = {"row": "small", "systems": 256, "betas": 10, "d": 2, "flops": 6.9e9, "attnflow_s": with_figures,
           "attnflow_tables_s": tables, "torch_s": torch_s, "attnflow_s_per_system_step": 1e-6,
           "torch_s_per_system_step": 2e-6, "attnflow_fraction_of_matmul": 0.01, "torch_fraction_of_matmul": 0.005,
           "attnflow_fraction_of_matmul_without_projections": 0.01,
           "torch_fraction_of_matmul_without_projections": 0.005, "load_before": (0.5, 0.5, 0.5),
           "ratio": _spread([t / a for t, a in zip(torch_s, with_figures)]), "ratio_first_run": 3.0,
           "ratio_kept_programs": _spread([4.0, 4.75]), **ratios}
    text = format_result({"machine": machine_info(), "matmul_f64": {"flops_per_s": 7e10}, "rows": [row]})
    assert "small: the first run (XLA compiles) 6.00 s, ratio 3.00; later runs (kept programs) 4.50 s, " \
           "ratio 4.00/4.38/4.75" in text
    assert "small without figures (the torch script's outputs: tables only): the first run (XLA compiles) 4.50 s, " \
           "ratio 4.00; later runs (kept programs) 4.50 s, ratio 3.80/4.40/5.00" in text
