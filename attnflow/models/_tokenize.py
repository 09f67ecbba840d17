"""Tokenisation with the model folder's ``tokenizer.json`` (the ``tokenizers`` library; no network).

Padding is switched off (all-MiniLM-L6-v2's file pads to 128); a text longer than the model's
``max_position_embeddings`` is refused (never cut short without a word).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._checkpoint import _REPLACE, model_file, read_text

#: the largest tokenizer.json read (multilingual vocabularies take tens of MiB)
MAX_TOKENIZER_BYTES = 512 * 2**20

__all__ = ["Tokenized", "load_tokenizer", "tokenize"]


@dataclass(frozen=True)
class Tokenized:
    """Token ids (n,) and their strings (n,) of one text."""

    text: str
    input_ids: np.ndarray
    tokens: tuple[str, ...]


def load_tokenizer(folder: str | Path, max_length: int):
    """The folder's ``tokenizer.json``, padding off, at most ``max_length`` tokens a text (:func:`tokenize`
    refuses a longer one); the file is read only inside the folder (see
    :func:`~attnflow.models._checkpoint.model_file`).

    Example:
        >>> from attnflow.models import default_model_path, load_tokenizer
        >>> tok = load_tokenizer(default_model_path(), 512)
        >>> tok.encode("Hello world").tokens
        ['[CLS]', 'hello', 'world', '[SEP]']
    """
    from tokenizers import Tokenizer

    if type(max_length) is not int or max_length < 1:
        raise InputError(f"max_length must be a positive integer (the model's max_position_embeddings), "
                         f"got {max_length!r}.")
    path = model_file(folder, "tokenizer.json")
    if not path.is_file():
        raise InputError(f"the model folder {folder} has no tokenizer.json; it is needed to turn text into tokens.")
    text = read_text(path, MAX_TOKENIZER_BYTES)
    try:
        tok = Tokenizer.from_str(text)
    except Exception as err:  # the tokenizers library raises plain Exception for every defect
        raise InputError(f"{path} is not a tokenizer.json the tokenizers library can read ({err}); "
                         f"{_REPLACE}.") from None
    tok.no_padding()
    tok.enable_truncation(max_length=max_length)
    return tok


def tokenize(tokenizer, text: str) -> Tokenized:
    """Encode one text into ids and token strings (special tokens included); a text of more tokens than the
    tokenizer's ``max_length`` (the model's positions: :func:`load_tokenizer`) is refused.

    Example:
        >>> from attnflow.models import default_model_path, load_tokenizer, tokenize
        >>> t = tokenize(load_tokenizer(default_model_path(), 512), "Hello world")
        >>> t.input_ids.tolist()
        [101, 7592, 2088, 102]
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"the text to track must be a non-empty string, got {text!r}.")
    enc = tokenizer.encode(text)
    if enc.overflowing:  # truncation cut the text: count what it holds, and refuse it
        limit = (tokenizer.truncation or {}).get("max_length", len(enc.ids))
        special = tokenizer.post_processor.num_special_tokens_to_add(False) if tokenizer.post_processor else 0
        count = len(enc.ids) + sum(len(o.ids) - special for o in enc.overflowing)
        words = len(text.split())
        raise InputError(f"the text to track ({words} words, starting {' '.join(text.split()[:6])!r}) gives {count} "
                         f"tokens; this model takes at most {limit} (its max_position_embeddings): shorten it, or "
                         "give a text file with one sentence a line.")
    if not enc.ids:
        raise InputError(f"the text {text!r} gives no tokens with this tokenizer; give a text with words in it.")
    return Tokenized(text, np.asarray(enc.ids, np.int32), tuple(enc.tokens))
