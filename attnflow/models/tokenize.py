"""Tokenisation with the model folder's ``tokenizer.json`` (the ``tokenizers`` library; no network).

Padding is switched off (all-MiniLM-L6-v2's file pads to 128) and sequences are truncated to
the model's ``max_position_embeddings``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError

__all__ = ["Tokenized", "load_tokenizer", "tokenize"]


@dataclass(frozen=True)
class Tokenized:
    """Token ids (n,) and their strings (n,) of one text."""

    text: str
    input_ids: np.ndarray
    tokens: tuple[str, ...]


def load_tokenizer(folder: str | Path, max_length: int):
    """The folder's ``tokenizer.json``, padding off, truncation at ``max_length``.

    Example:
        >>> from attnflow.models import default_model_path, load_tokenizer
        >>> tok = load_tokenizer(default_model_path(), 512)
        >>> tok.encode("Hello world").tokens
        ['[CLS]', 'hello', 'world', '[SEP]']
    """
    from tokenizers import Tokenizer

    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        raise InputError(f"the model folder {folder} has no tokenizer.json; it is needed to turn text into tokens.")
    tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def tokenize(tokenizer, text: str) -> Tokenized:
    """Encode one text into ids and token strings (special tokens included).

    Example:
        >>> from attnflow.models import default_model_path, load_tokenizer, tokenize
        >>> t = tokenize(load_tokenizer(default_model_path(), 512), "Hello world")
        >>> t.input_ids.tolist()
        [101, 7592, 2088, 102]
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"the text to track must be a non-empty string, got {text!r}.")
    enc = tokenizer.encode(text)
    return Tokenized(text, np.asarray(enc.ids, np.int32), tuple(enc.tokens))
