"""What MVA's tests hold the code against, read at test time rather than retyped: the paper's text
(``../shared/papers/mva.txt`` beside the checkout: Zhou and Devlin 2021), the numbers and row descriptors it prints
(``results/reported/mva.csv``, read with `csv`), and the configs as YAML files (``mva/configs``, read with `yaml`).
"""

from __future__ import annotations

import csv
import re
from functools import cache
from pathlib import Path

import yaml

from tests import papers

REPO = Path(__file__).resolve().parents[2]
PAPERS = REPO.parent / "shared" / "papers"
PAPER = PAPERS / "mva.txt"
REPORTED = REPO / "results" / "reported" / "mva.csv"
CONFIGS = REPO / "mva" / "configs"


def paper_text() -> str:
    """The paper's text; skips the test where ``../shared/papers`` does not hold it."""
    return papers.paper_text(PAPER, "MVA")


def quoted(sentence: str) -> tuple[str, ...]:
    """The groups of `sentence`, a regular expression of a sentence of the paper, which the paper must contain."""
    return papers.quoted(PAPER, "MVA", sentence)


def lengths() -> tuple[int, int]:
    """Sec. 3: the query and document lengths inputs are cut to (32, 112)."""
    query, document = quoted(r"We truncate query sequences to length (\d+) and documents to length (\d+)\.")
    return int(query), int(document)


def fine_tuning() -> tuple[int, float]:
    """Sec. 3: fine-tuning's batch size in triples and Adam's learning rate (256, 3e-5)."""
    batch, lr = quoted(r"We fine-tune on MS-MARCO using a batch size of (\d+) triples and Adam with learning rate "
                       r"(\d+(?:\.\d+)?e-\d+)\.")  # fmt: skip
    return int(batch), float(lr)


def average_lengths() -> tuple[int, int]:
    """Sec. 3: MS MARCO's average query and document lengths in tokens (6, 70)."""
    query, document = quoted(r"average lengths of queries and documents in MS-MARCO are around (\d+) and (\d+)")
    return int(query), int(document)


def all_tokens_query_timesteps() -> int:
    """An all-tokens query's timesteps: "one [CLS] token plus each actual (non-padding) token" (Sec. 4) of an average
    query (Sec. 3): 1 + 6."""
    quoted(r"the query representation corresponds to one \[CLS\] token plus each actual \(non-padding\) token")
    return 1 + average_lengths()[0]


def hidden_size() -> int:
    """Sec. 3: the encoder's hidden size h (768, BERT-base)."""
    return int(quoted(r"12-layer Transformer model with 12 attention heads and hidden size (\d+)")[0])


# --- the printed rows ---------------------------------------------------------------------------------------------


def settings(setting: str) -> dict[str, str]:
    """A row's ``setting`` cell as a dict: ``doc_timesteps=24; projection_size=64`` -> {doc_timesteps: 24, ...};
    parts without ``=`` left out."""
    return dict(part.strip().split("=", 1) for part in setting.split(";") if "=" in part)


@cache
def reported() -> tuple[dict, ...]:
    """Every row of ``results/reported/mva.csv``, its ``setting`` parsed into ``settings``."""
    with open(REPORTED, newline="") as f:
        return tuple({**row, "settings": settings(row["setting"])} for row in csv.DictReader(f))


def rows(table: str, metric: str = "mrr@10") -> list[dict]:
    return [row for row in reported() if row["table"] == table and row["metric"] == metric]


def printed(table: str, method: str, metric: str) -> float:
    (row,) = [row for row in rows(table, metric) if row["method"] == method]
    return float(row["value"])


# --- the configs ----------------------------------------------------------------------------------------------------


@cache
def _config(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())


def config(name: str) -> dict:
    """``mva/configs/NAME`` as YAML (a fresh copy)."""
    import copy

    return copy.deepcopy(_config(name))


def header(name: str) -> str:
    """The config's header comment, its lines joined."""
    lines = (CONFIGS / name).read_text().splitlines()
    return " ".join(line.removeprefix("# ") for line in lines if line.startswith("#"))


def msmarco_configs() -> list[str]:
    return sorted(path.name for path in CONFIGS.glob("msmarco-*.yaml"))


def config_of_row(table: str, row: str) -> str:
    """The one MS MARCO config whose header names ``Table T, row "ROW"``."""
    named = [name for name in msmarco_configs() if f'Table {table}, row "{row}"' in header(name)]
    assert len(named) == 1, (table, row, named)
    return named[0]


def printed_average(table: str, key: str) -> int:
    """The average length a table's all-tokens row prints beside it: Table 3's query timesteps "All Tokens (Avg.
    ~6)", Table 4's document timesteps "All Tokens (Avg. ~70)"."""
    (average,) = {int(m.group(1)) for row in rows(table) if (m := re.search(r"All Tokens \(Avg\. ~(\d+)\)",
                                                                               row["settings"].get(key, "")))}
    return average


def operating_point(method: str) -> tuple[int, int, int, int]:
    """(q, d, p, H) of Table 5's MVA row `method` (``MVA¹``...): d and p from the row's footnote, each checked
    against the row's config (`config_of_row`); H the config's; q the config's query [CLS] count, or for an
    all-tokens query Sec. 4's "one [CLS] token plus each actual (non-padding) token" of Table 3's average query."""
    (row,) = [row for row in rows("5", "joint_compute_mflops") if row["method"] == method]
    d, p = int(row["settings"]["doc_timesteps"]), int(row["settings"]["projection_size"])
    model = config(config_of_row("5", method))["model"]
    assert model["architecture"] == "mva" and model["projection"] == p, (method, model)
    if model["doc_pooling"] == "cls":
        assert model["doc_timesteps"] == d, (method, model)
    else:  # every document token: the footnote's d is MS MARCO's average passage
        assert model["doc_pooling"] == "all" and d == printed_average("4", "doc_timesteps"), (method, model)
    if model["query_pooling"] == "cls":
        q = model["query_timesteps"]
    else:
        assert model["query_pooling"] == "all", (method, model)
        q = 1 + printed_average("3", "query_timesteps")
    return q, d, p, model["heads"]
