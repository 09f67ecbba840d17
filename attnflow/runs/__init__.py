"""The job runtime: what claims a run folder, stores verified units, shards chunks and writes tables.

Every job (``attnflow sweep``, ``phase``, ``meanfield``, ``probe``, ``track``, ``reproduce``,
``extensions``) is a config object, a run folder and a function; the folder's life is this package's:

* :class:`JobConfig` is the base of every job's parsed config (its table, its fingerprint);
* :func:`open_run` claims, locks and fingerprints a run folder (:func:`fingerprint`: the config table
  without its execution-only keys), refuses a folder of another config with one sentence, and writes
  the marker, ``config.json`` and ``provenance.json`` (``replaces=True``: a job that writes its whole
  report anew each time, as ``reproduce`` and ``extensions`` do); :func:`claim_output_dir` is the claim
  step alone, :func:`releases_output_dirs` unlocks a job's folders when it returns;
* :func:`atomic_write_bytes` / ``_text`` / ``_json`` and :func:`atomic_path` write through a temporary
  file and a rename; :func:`save_verified_npz` / :func:`load_verified_npz` store arrays with their
  identity and a checksum; :class:`UnitStore` loads a verified unit or computes and saves it, and
  :func:`wait_for_units` waits for the units other processes of a multi-process run store in a shared folder;
* :func:`start_chunked` / :func:`run_chunks` run a plan of chunks (:func:`plan_chunks`) resumably,
  sharded over the local devices (:func:`make_mesh`, :func:`sharded`) and over processes
  (:func:`init_distributed`);
* :func:`write_table` / :func:`write_tables` write tidy CSV / Parquet tables (:func:`write_rows` a list of
  rows), :func:`read_csv` reads
  them back, :func:`fmt` formats a number for a report;
* :func:`load_config` reads a TOML config over its shipped default (the schema), :func:`count_kept`
  counts the work a job kept for the line an interrupted command prints.
"""

from ._atomic import (atomic_path, atomic_write_bytes, atomic_write_json, atomic_write_text,
                      remove_stale_temporaries, temp_target)
from ._chunks import Chunk, plan_chunks, run_chunks
from ._config import JobConfig
from ._distributed import init_distributed
from ._fingerprint import EXECUTION_KEYS, config_fingerprint, execution_free, fingerprint
from ._folder import (MARKER, MIN_FREE_BYTES, claim_output_dir, discard_output_dir, read_marker,
                      releases_output_dirs, write_marker)
from ._format import fmt
from ._kept import KeptWork, count_kept, interrupted_sentence
from ._mesh import check_eig_route, make_mesh, needs_per_system_loop, sharded
from ._open import Run, open_run, table_of
from ._provenance import git_commit, provenance
from ._runner import ChunkedRun, check_table_memory, start_chunked
from ._settings import DTYPES, RunSettings, check_job_table, run_settings
from ._tables import (TABLE_FORMATS, check_table_formats, concat, csv_cell, csv_text, read_csv, write_rows,
                      write_table, write_tables)
from ._toml import CONFIG_DIR, default_config_path, load_config, merge_config, read_toml
from ._units import UnitStore, wait_for_units
from ._verified import load_verified_npz, npz_problem, save_verified_npz, set_aside

__all__ = [
    "open_run", "Run", "table_of", "JobConfig", "fingerprint", "config_fingerprint", "execution_free", "EXECUTION_KEYS",
    "claim_output_dir", "releases_output_dirs", "discard_output_dir", "write_marker", "read_marker", "MARKER",
    "MIN_FREE_BYTES", "provenance", "git_commit",
    "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "atomic_path", "remove_stale_temporaries",
    "temp_target", "save_verified_npz", "load_verified_npz", "npz_problem", "set_aside", "UnitStore", "wait_for_units",
    "Chunk", "plan_chunks", "run_chunks", "ChunkedRun", "start_chunked", "check_table_memory", "make_mesh",
    "needs_per_system_loop", "check_eig_route", "sharded", "init_distributed", "RunSettings", "run_settings",
    "check_job_table", "DTYPES",
    "TABLE_FORMATS", "check_table_formats", "write_table", "write_tables", "write_rows", "csv_text", "concat", "csv_cell",
    "read_csv", "fmt",
    "CONFIG_DIR", "default_config_path", "load_config", "merge_config", "read_toml",
    "KeptWork", "count_kept", "interrupted_sentence",
]
