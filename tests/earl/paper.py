"""What EARL's tests hold the code and the configs against, read at test time rather than retyped: the paper's text
(``../shared/papers/earl.txt`` beside the checkout: Gao, Dai, Callan 2020), the rows it prints with their
descriptors (``results/reported/earl.csv``, read with `csv`), and which of them each config (``earl/configs``)
reproduces.
"""

from __future__ import annotations

import csv
import re
from functools import cache
from pathlib import Path

from tests import papers

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO.parent / "shared" / "papers" / "earl.txt"
REPORTED = REPO / "results" / "reported" / "earl.csv"
CONFIGS = REPO / "earl" / "configs"


# --- the paper's text -------------------------------------------------------------------------------------------


def paper_text() -> str:
    """The paper's text; skips the test where ``../shared/papers`` does not hold it."""
    return papers.paper_text(PAPER, "EARL")


def quoted(sentence: str) -> tuple[str, ...]:
    """The groups of `sentence`, a regular expression of a sentence of the paper, which the paper must contain."""
    return papers.quoted(PAPER, "EARL", sentence)


def msmarco_training() -> dict:
    """Sec. 4.3's MS MARCO training: 2M examples in batches of 128, AdamW at 3e-5, 1,000 warm-up steps, a linear
    schedule."""
    examples, batch, lr, warmup = quoted(
        r"the model were trained (\d+)M training examples\. We use stochastic gradient descent to train the model "
        r"with a batch size of (\d+)\. We use AdamW optimizer with a learning rate of (\d+e-\d+), a warm-up of "
        r"(\d+) steps and a linear learning rate scheduler\.")
    return {"examples": int(examples) * 1_000_000, "batch_size": int(batch), "lr": float(lr),
            "warmup_steps": int(warmup)}


def clueweb_training() -> dict:
    """Sec. 4.3's ClueWeb09-B transfer: "a batch size of 32 and a learning rate of 5e-6", from the MS MARCO model."""
    quoted(r"we take trained model on MS MARCO, and continue training over ClueWeb09-B’s training data")
    batch, lr = quoted(r"We use a batch size of (\d+) and a learning rate of (\d+e-\d+)\.")
    return {"batch_size": int(batch), "lr": float(lr)}


def encoder() -> str:
    """Footnote 1: the pretrained weights (``bert-base-uncased``)."""
    return quoted(r"This work uses the official ([\w-]+) weight\.")[0]


def layers() -> dict:
    """Sec. 4.2: T_doc's 12 layers, T_qry's 10 and K = 2 judge blocks by default."""
    (doc,) = quoted(r"All EARL variants have document understanding module of (\d+) transformer layers")
    query, blocks = quoted(r"By default, the query understating module uses (\d+) transformer layers, and the "
                           r"relevance judging module uses (\d+) layers of the judger blocks")
    return {"doc": int(doc), "query": int(query), "blocks": int(blocks)}


def speed_test_query_length() -> int:
    """Sec. 5.2: "we fixed query length at 16" (the speed test's; the paper gives no training lengths)."""
    return int(quoted(r"we fixed query length at (\d+)")[0])


def trec_dl_queries() -> int:
    """Sec. 4.1: the TREC 2019 DL query set "contains 43 queries"."""
    return int(quoted(r"It contains (\d+) queries that have multiple relevant documents")[0])


# --- the printed rows ---------------------------------------------------------------------------------------------


def settings(setting: str) -> dict[str, str]:
    """A row's ``setting`` cell as a dict: its first part under ``candidates`` (``rerank-top1000-bm25``), then its
    ``key=value`` parts: ``rerank-top1000-bm25; judger_blocks=1`` -> {candidates: ..., judger_blocks: 1}."""
    first, *rest = (part.strip() for part in setting.split(";"))
    return {"candidates": first, **dict(part.split("=", 1) for part in rest if "=" in part)}


@cache
def reported() -> tuple[dict, ...]:
    """Every row of ``results/reported/earl.csv`` (in the repository: no skip), its ``setting`` parsed into
    ``settings``."""
    with open(REPORTED, newline="", encoding="utf-8") as f:
        return tuple({**row, "settings": settings(row["setting"])} for row in csv.DictReader(f))


def depth(row: dict) -> int:
    """The candidates a row re-ranks, from its descriptor: ``rerank-top1000-bm25`` -> 1000."""
    return int(re.fullmatch(r"rerank-top(\d+)-.*", row["settings"]["candidates"]).group(1))


#: Sec. 4.2's sentence that names the pools (`model_of_method`).
POOLS = (r"ClsPool takes the \[CLS\] token's representation to produce the final ranking score\. AvePool takes the "
         r"average of the token representations in the last layer\.")


def model_of_method(method: str) -> dict:
    """The model a Table 2, 4 or 5 method name describes (Sec. 4.2, `POOLS`): the BERT ranker, the BERT-Siamese
    ranker, or EARL with ClsPool ("the [CLS] token's representation") or AvePool ("the average of the token
    representations"), its T_qry tied to T_doc's first layers where the name says Tied."""
    if method == "BERT ranker":
        return {"architecture": "bert_ranker"}
    if method == "BERT-Siamese ranker":
        return {"architecture": "bert_siamese"}
    found = re.fullmatch(r"EARL (ClsPool|AvePool)( Tied)?", method)
    assert found, method
    return {"architecture": "earl", "pool": {"ClsPool": "cls", "AvePool": "mean"}[found.group(1)],
            "tied": bool(found.group(2))}


def default_blocks() -> int:
    """K of the rows that do not say: Table 4's notes, "2 blocks is the default configuration of Table 2" (Sec. 4.2's
    default, `layers`)."""
    (blocks,) = {int(found.group(1)) for row in reported() if row["table"] == "4"
                 for found in [re.search(r"(\d+) blocks is the default configuration of Table 2", row["note"])]
                 if found}
    return blocks


def model_of_row(row: dict) -> dict:
    """What a reported row fixes of the model: `model_of_method`, K judge blocks (the row's ``judger_blocks``, else
    `default_blocks`) and whether the cross-attention starts as a copy of BERT's self-attention (its
    ``cross_attention_init``; Sec. 3.4's copy by default)."""
    cross = row["settings"].get("cross_attention_init", "copy-from-bert-self-attention")
    assert cross in ("copy-from-bert-self-attention", "random"), row
    blocks = int(row["settings"].get("judger_blocks", default_blocks()))
    return {**model_of_method(row["method"]), "num_blocks": blocks, "copy_cross": cross != "random"}


# --- the configs --------------------------------------------------------------------------------------------------


def _table2(method: str) -> list[tuple]:
    """Table 2's row of `method`, as (table, method, None)."""
    return [("2", method, None)]


#: Each paper config (under ``earl/configs``) -> its reported rows, as (table, method, the note's ``printed as`` name
#: or None): Table 2's rows of a msmarco/ config are its MS MARCO columns, of a clueweb09b/ config its ClueWeb09-B ones.
CONFIG_ROWS = {
    "msmarco/earl-cls.yaml": [*_table2("EARL ClsPool"), ("4", "EARL ClsPool", "2 blocks"),
                              ("5", "EARL ClsPool", "w/ copy")],
    "msmarco/earl-cls-tied.yaml": [*_table2("EARL ClsPool Tied"), ("4", "EARL ClsPool Tied", "2 blocks"),
                                   ("5", "EARL ClsPool Tied", "w/ copy")],
    "msmarco/earl-mean.yaml": _table2("EARL AvePool"),
    "msmarco/earl-mean-tied.yaml": _table2("EARL AvePool Tied"),
    "msmarco/bert-ranker.yaml": _table2("BERT ranker"),
    "msmarco/bert-siamese.yaml": _table2("BERT-Siamese ranker"),
    **{f"msmarco/earl-cls{tied}-k{k}.yaml": [("4", f"EARL ClsPool{tied.replace('-tied', ' Tied')}",
                                              f"{k} block{'s' if k > 1 else ''}")]
       for tied in ("", "-tied") for k in (1, 2, 3, 4)},
    "msmarco/earl-cls-nocopy.yaml": [("5", "EARL ClsPool", "w/o copy")],
    "msmarco/earl-cls-tied-nocopy.yaml": [("5", "EARL ClsPool Tied", "w/o copy")],
    **{f"clueweb09b/{row}.yaml": _table2(method) for row, method in (
        ("earl-cls", "EARL ClsPool"), ("earl-cls-tied", "EARL ClsPool Tied"), ("earl-mean", "EARL AvePool"),
        ("earl-mean-tied", "EARL AvePool Tied"), ("bert-ranker", "BERT ranker"))},
}


def paper_configs() -> list[str]:
    """The configs of the paper's rows (MS MARCO and ClueWeb09-B), relative to ``earl/configs``."""
    return sorted(CONFIG_ROWS)


def named_rows(name: str) -> list[dict]:
    """The reported rows of config `name` (`CONFIG_ROWS`)."""
    clueweb = name.startswith("clueweb09b/")
    rows = []
    for table, method, printed in CONFIG_ROWS[name]:
        found = [row for row in reported() if row["table"] == table and row["method"] == method
                 and (f"printed as '{printed}'" in row["note"] if printed is not None
                      else (row["dataset"] == "clueweb09b") == clueweb)]
        assert found, (name, table, method, printed)
        rows += found
    return rows
