"""``attnflow heads --format``: the assumption table as Markdown, JSON rows or CSV."""

import csv
import io
import json

import numpy as np
import pytest

from attnflow.cli.main import main
from attnflow.models import assumption_table, load_model
from attnflow.models._heads import table_records
from model_fixtures import write_albert


@pytest.fixture(scope="module")
def albert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("albert_heads")
    write_albert(folder, dtype=np.float32)
    return folder


@pytest.fixture(scope="module")
def records(albert):
    return table_records(assumption_table(load_model(str(albert))))


def test_json_rows(albert, records, capsys):
    assert main(["heads", "--model", str(albert), "--format", "json"]) == 0
    out, err = capsys.readouterr()
    rows = json.loads(out)  # stdout holds the rows only
    assert len(rows) == len(records) == 5 and list(rows[0]) == list(records[0])
    assert {"layer", "head", "lambda1_re", "cond1", "good", "status"} <= set(rows[0])
    for got, want in zip(rows, records):
        for key, value in want.items():
            if isinstance(value, float) and not np.isfinite(value):
                assert got[key] is None
            else:
                assert got[key] == pytest.approx(value) if isinstance(value, float) else got[key] == value
    assert "Def 4.1(1): 3 of 5 heads; good triples: 2" in err


def test_csv_rows(albert, records, capsys):
    assert main(["heads", "--model", str(albert), "--format", "csv", "--layer", "0"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out)))
    assert out.splitlines()[0] == ",".join(records[0])  # the header
    assert len(rows) == len(records)
    assert [int(r["head"]) for r in rows] == [r["head"] for r in records]
    assert [r["status"] for r in rows] == [r["status"] for r in records]
    assert [float(r["gap"]) for r in rows] == pytest.approx([r["gap"] for r in records])
    assert "good triples: 2" in err


def test_markdown_is_the_default(albert, capsys):
    assert main(["heads", "--model", str(albert)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("| layer | head | lambda_1 |") and "Def 4.1(1): 3 of 5 heads" in out


def test_bad_format(albert, capsys):
    with pytest.raises(SystemExit):
        main(["heads", "--model", str(albert), "--format", "xml"])
    assert "invalid choice: 'xml'" in capsys.readouterr().err
