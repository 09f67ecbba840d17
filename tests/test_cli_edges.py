"""Edges of the command-line jobs that no library module owns: text input of ``attnflow track``."""

from __future__ import annotations

import pytest

from attnflow.errors import InputError
from attnflow.models import read_texts


def test_non_utf8_text_file_is_one_sentence(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8 text") as err:
        read_texts(str(path))
    assert str(path) in str(err.value)


def test_text_file_lines_are_read(tmp_path):
    path = tmp_path / "sentences.txt"
    path.write_text("Tokens are particles.\n\n  Layers are time.  \n", encoding="utf-8")
    assert read_texts(str(path)) == ["Tokens are particles.", "Layers are time."]


def test_track_refuses_a_malformed_model_before_claiming_the_output_folder(tmp_path):
    from attnflow.models import track

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{not json", encoding="utf-8")
    (model / "model.safetensors").write_bytes(b"")
    out = tmp_path / "run"
    with pytest.raises(InputError, match="config.json"):
        track("Tokens are particles.", out, model=model, progress=False)
    assert not out.exists()
