"""What MVA's tests hold the code against, read at test time rather than retyped: the paper's text
(``../shared/papers/mva.txt`` beside the checkout: Zhou and Devlin 2021), the numbers and row descriptors it prints
(``results/reported/mva.csv``, read with `csv`), which of them each config reproduces, and what the configs
(``mva/configs``) resolve to.
"""

from __future__ import annotations

import csv
import re
from functools import cache
from pathlib import Path

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
                       r"(\d+(?:\.\d+)?e-\d+)\.")
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


#: (table, row as printed: its cells joined by " | ") -> (config, the paper's MS MARCO Dev MRR@10).
ROWS = {
    ("1", "All Tokens | ~70"): ("msmarco/mva-all-p768.yaml", 35.8),
    ("1", "First-K | 56"): ("msmarco/mva-firstk56-p768.yaml", 35.4),
    ("1", "First-K | 28"): ("msmarco/mva-firstk28-p768.yaml", 34.5),
    ("1", "First-K | 14"): ("msmarco/mva-firstk14-p768.yaml", 31.9),
    ("1", "Multiple CLS | 56"): ("msmarco/mva-cls56-p768.yaml", 35.2),
    ("1", "Multiple CLS | 28"): ("msmarco/mva-cls28-p768.yaml", 34.9),
    ("1", "Multiple CLS | 14"): ("msmarco/mva-cls14-p768.yaml", 33.2),
    ("1", "Temporal Pooling | 56"): ("msmarco/mva-temporal56-p768.yaml", 35.4),
    ("1", "Temporal Pooling | 28"): ("msmarco/mva-temporal28-p768.yaml", 34.1),
    ("1", "Temporal Pooling | 14"): ("msmarco/mva-temporal14-p768.yaml", 32.8),
    ("2", "768"): ("msmarco/mva-all-p768.yaml", 35.8),
    ("2", "128"): ("msmarco/mva-all-p128.yaml", 36.0),
    ("2", "64"): ("msmarco/mva-all-p64.yaml", 35.4),
    ("2", "32"): ("msmarco/mva-all-p32.yaml", 35.0),
    ("2", "16"): ("msmarco/mva-all-p16.yaml", 34.7),
    ("3", "All Tokens (Avg. ~6)"): ("msmarco/mva-all-p768.yaml", 35.8),
    ("3", "1 CLS"): ("msmarco/mva-all-p768-qcls1.yaml", 32.6),
    ("3", "2 CLS"): ("msmarco/mva-all-p768-qcls2.yaml", 33.5),
    ("3", "8 CLS"): ("msmarco/mva-all-p768-qcls8.yaml", 34.9),
    ("3", "33 CLS"): ("msmarco/mva-all-p768-qcls33.yaml", 35.9),
    ("4", "All Tokens (Avg. ~70) | 1 | 64"): ("msmarco/mva-all-p64.yaml", 35.4),
    ("4", "56 | 1 | 64"): ("msmarco/mva-cls56-p64.yaml", 34.6),
    ("4", "28 | 2 | 64"): ("msmarco/mva-cls28-p64-h2.yaml", 33.5),
    ("4", "28 | 1 | 128"): ("msmarco/mva-cls28-p128.yaml", 34.4),
    ("4", "14 | 4 | 64"): ("msmarco/mva-cls14-p64-h4.yaml", 31.7),
    ("4", "14 | 1 | 256"): ("msmarco/mva-cls14-p256.yaml", 33.5),
    ("5", "CA (Ours)"): ("msmarco/ca.yaml", 38.0),
    ("5", "DE (Ours)"): ("msmarco/de.yaml", 29.6),
    ("5", "MVA¹"): ("msmarco/mva-all-p128.yaml", 36.0),
    ("5", "MVA²"): ("msmarco/mva-cls24-p64.yaml", 34.7),
    ("5", "MVA³"): ("msmarco/mva-cls16-p32.yaml", 32.7),
}
#: Configs that stand for no printed row: Table 5's MVA² and MVA³ with 8 query [CLS], the query length that fits
#: their printed joint compute (mva/costs.py), beside the rows' every-token query side (Sec. 4).
ALTERNATIVES = {"msmarco/mva-cls24-p64-qcls8.yaml": ("5", "MVA²"), "msmarco/mva-cls16-p32-qcls8.yaml": ("5", "MVA³")}


@cache
def _config(name: str) -> dict:
    from mva import train
    from tests.printed_config import printed_config

    return printed_config(train.main, "mva.train", "--config", str(CONFIGS / name))


def config(name: str) -> dict:
    """What ``mva/configs/NAME`` resolves to (``--print_config``; a fresh copy)."""
    import copy

    return copy.deepcopy(_config(name))


def msmarco_configs() -> list[str]:
    """The MS MARCO row configs, relative to ``mva/configs``."""
    return sorted(f"msmarco/{path.name}" for path in CONFIGS.glob("msmarco/*.yaml"))


def config_of_row(table: str, row: str) -> str:
    """The MS MARCO config of ``Table T, row "ROW"`` (`ROWS`)."""
    return ROWS[(table, row)][0]


def printed_average(table: str, key: str) -> int:
    """The average length a table's all-tokens row prints beside it: Table 3's query timesteps "All Tokens (Avg.
    ~6)", Table 4's document timesteps "All Tokens (Avg. ~70)"."""
    (average,) = {int(m.group(1)) for row in rows(table) if (m := re.search(r"All Tokens \(Avg\. ~(\d+)\)",
                                                                               row["settings"].get(key, "")))}
    return average


def operating_point(method: str) -> tuple[int, int, int, int]:
    """(q, d, p, H) of Table 5's MVA row `method` (``MVA¹``...) as its printed joint compute counts it: d and p from
    the row's footnote, each checked against the config (the row's, or for MVA² and MVA³ its 8-query-[CLS]
    alternative, `ALTERNATIVES`: the one that fits the printed cost); H the config's; q the config's query [CLS]
    count, or for an all-tokens query Sec. 4's "one [CLS] token plus each actual (non-padding) token" of Table 3's
    average query."""
    (row,) = [row for row in rows("5", "joint_compute_mflops") if row["method"] == method]
    d, p = int(row["settings"]["doc_timesteps"]), int(row["settings"]["projection_size"])
    name = next((name for name, (_, alt) in ALTERNATIVES.items() if alt == method), config_of_row("5", method))
    model = config(name)["model"]
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
