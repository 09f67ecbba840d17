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
  file and a rename (JSON as the standard defines it, :func:`json_text`: a number that is not finite is null);
  :func:`save_verified_npz` / :func:`load_verified_npz` store arrays with their identity and a checksum;
  :class:`UnitStore` loads a verified unit or computes and saves it, and :func:`wait_for_units` waits for
  the units other processes of a multi-process run store in a shared folder;
* :func:`start_chunked` / :func:`run_chunks` run a plan of chunks (:func:`plan_chunks`) resumably (their files
  written behind the computation, :class:`WriteBehind`),
  sharded over the local devices (:func:`make_mesh`, :func:`sharded`) and over processes
  (:func:`init_distributed`);
* :func:`write_table` / :func:`write_tables` write tidy CSV / Parquet tables (:func:`write_rows` a list of
  rows), :func:`read_csv` reads
  them back, :func:`fmt` formats a number for a report;
* :func:`enable_compile_cache` keeps the ``attnflow`` command's compiled programs between runs (JAX's
  persistent compilation cache in ``~/.cache/attnflow/xla``; ``ATTNFLOW_COMPILE_CACHE`` moves or disables it)
  and its traced programs (:func:`kept_jit`, :func:`enable_program_store`: ``jax.export`` files in its
  ``programs`` folder, so that a later run neither traces nor compiles a program it ran before);
* :func:`load_config` reads a TOML config over its shipped default (the schema), :func:`count_kept`
  counts the work a job kept for the line an interrupted command prints.
"""

from .._lazy import lazy_names as _lazy_names

#: public name -> the module that defines it, imported on first use (PEP 562): a figure worker that only
#: writes files atomically does not import JAX with the chunk runner
_LAZY = {
    **dict.fromkeys(("atomic_path", "atomic_write_bytes", "atomic_write_json", "atomic_write_text", "json_text",
                     "remove_stale_temporaries", "temp_target"), "._atomic"),
    **dict.fromkeys(("Chunk", "plan_chunks", "run_chunks", "WriteBehind"), "._chunks"),
    "JobConfig": "._config",
    **dict.fromkeys(("COMPILE_CACHE_ENV", "MAX_CACHE_BYTES", "compile_cache_dir", "enable_compile_cache"),
                    "._compile_cache"),
    "init_distributed": "._distributed",
    **dict.fromkeys(("PROGRAMS_SUBDIR", "enable_program_store", "kept_jit", "program_store"), "._programs"),
    **dict.fromkeys(("EXECUTION_KEYS", "config_fingerprint", "execution_free", "fingerprint"), "._fingerprint"),
    **dict.fromkeys(("MARKER", "MIN_FREE_BYTES", "claim_output_dir", "discard_output_dir", "read_marker",
                     "releases_output_dirs", "write_marker"), "._folder"),
    "fmt": "._format",
    **dict.fromkeys(("KeptWork", "count_kept", "interrupted_sentence"), "._kept"),
    **dict.fromkeys(("check_eig_route", "callback_mesh", "make_mesh", "needs_per_system_loop", "sharded"),
                  "._mesh"),
    **dict.fromkeys(("Run", "open_run", "table_of"), "._open"),
    **dict.fromkeys(("git_commit", "provenance"), "._provenance"),
    **dict.fromkeys(("ChunkedRun", "check_table_memory", "start_chunked"), "._runner"),
    **dict.fromkeys(("DTYPES", "RunSettings", "check_job_table", "run_settings"), "._settings"),
    **dict.fromkeys(("TABLE_FORMATS", "check_table_formats", "concat", "csv_cell", "csv_text", "read_csv",
                     "write_rows", "write_table", "write_tables"), "._tables"),
    **dict.fromkeys(("CONFIG_DIR", "default_config_path", "config_path", "load_config", "merge_config", "read_toml"),
                    "._toml"),
    **dict.fromkeys(("UnitStore", "wait_for_units"), "._units"),
    **dict.fromkeys(("load_verified_npz", "npz_problem", "save_verified_npz", "set_aside"), "._verified"),
}

__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())

__all__ = [
    "COMPILE_CACHE_ENV", "MAX_CACHE_BYTES", "compile_cache_dir", "enable_compile_cache",
    "PROGRAMS_SUBDIR", "enable_program_store", "program_store", "kept_jit",
    "open_run", "Run", "table_of", "JobConfig", "fingerprint", "config_fingerprint", "execution_free", "EXECUTION_KEYS",
    "claim_output_dir", "releases_output_dirs", "discard_output_dir", "write_marker", "read_marker", "MARKER",
    "MIN_FREE_BYTES", "provenance", "git_commit",
    "atomic_write_bytes", "atomic_write_text", "atomic_write_json", "json_text", "atomic_path",
    "remove_stale_temporaries",
    "temp_target", "save_verified_npz", "load_verified_npz", "npz_problem", "set_aside", "UnitStore", "wait_for_units",
    "Chunk", "plan_chunks", "run_chunks", "WriteBehind", "ChunkedRun", "start_chunked", "check_table_memory",
    "make_mesh",
    "needs_per_system_loop", "check_eig_route", "callback_mesh", "sharded", "init_distributed", "RunSettings",
    "run_settings",
    "check_job_table", "DTYPES",
    "TABLE_FORMATS", "check_table_formats", "write_table", "write_tables", "write_rows", "csv_text", "concat", "csv_cell",
    "read_csv", "fmt",
    "CONFIG_DIR", "default_config_path", "config_path", "load_config", "merge_config", "read_toml",
    "KeptWork", "count_kept", "interrupted_sentence",
]
