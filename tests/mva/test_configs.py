"""One YAML per paper row (Zhou and Devlin 2021: Tables 1-4 and Table 5's own models), each parsed by the real command
line (``--print_config``) into what the file says, and each file's values held against what the paper prints and
says, read at test time (`tests.mva.paper`): every model setting against its rows' descriptors in
``results/reported/mva.csv`` (Sec. 2.2, 4, 5), the fine-tuning setup against the sentences of Sec. 2.3 and 3 in
``../shared/papers/mva.txt`` (skipped where that file is absent). Nothing is built, trained or downloaded:
ir_datasets ids are looked up in the registry only. Table 6 (multi-pass re-ranking) is not a training setting: it is
`python -m mva.evaluate --rescore CA_CKPT --rescore_top 1 10 50` over a trained first pass."""

import inspect
from functools import cache
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from common.data.irds import IrDatasetsSource, load_dataset
from common.data.specs import check_spec
from common.report import load_reported, paper_dataset
from mva import costs, train
from mva.data import MVADataModule
from mva.model import temporal_pool
from mva.ranker import MVARanker
from mva.train import PAPER
from tests.mva import paper
from tests.printed_config import printed_config

CONFIGS = Path(train.__file__).parent / "configs"

TRAIN = "irds:msmarco-passage/train/split200-train"
DEV = "irds:msmarco-passage/train/split200-valid"  # held-out training queries (the paper holds out 10%)
TEST = "irds:msmarco-passage/dev/small"  # every table's MS MARCO Dev MRR@10
#: "the <query, positive document, negative document> training triples provided by MSMARCO" (Sec. 2.3)
TRIPLES = "irds:msmarco-passage/train/triples-small"


ROWS = paper.ROWS
#: Rows of Tables 1-5 with no config: figures Table 5 quotes from Khattab and Zaharia (2020), not this paper's models.
LEFT_OUT = {("5", "BERT_Base"), ("5", "ColBERT")}


@cache
def parsed(*args: str) -> dict:
    """The config ``python -m mva.train ARGS --print_config`` resolves, parsed once per argument list."""
    return printed_config(train.main, "mva.train", *args)


def config(name: str) -> dict:
    return parsed("--config", str(CONFIGS / name))


def label(row) -> str:
    """A reported row as ROWS names it: the cells the paper prints to tell it apart, joined by " | "."""
    settings = dict(part.split("=", 1) for part in row.setting.split("; ") if "=" in part)
    table = str(row.table)
    if table == "1":
        return f"{row.method} | {settings['doc_timesteps']}"
    if table == "2":
        return settings["projection_size"]
    if table == "3":
        return settings["query_timesteps"]
    if table == "4":
        return " | ".join(settings[key] for key in ("doc_timesteps", "num_heads", "projection_size"))
    return row.method


def rows_of(name: str) -> list[tuple[str, str]]:
    return [key for key, (file, _) in ROWS.items() if file == name]


# --- what a printed row fixes of its config's model -----------------------------------------------------------------

#: The model arguments (`mva.ranker.MVARanker`) that an MVA row fixes; DE's and CA's rows fix the architecture alone.
MVA_KEYS = ("architecture", "projection", "heads", "query_pooling", "query_timesteps", "query_factor", "doc_pooling",
            "doc_timesteps", "doc_factor")
ALL = ("all", None, None)  # a side's (pooling, K, rho): every token


def mva(projection: int, heads: int = 1, query=ALL, doc=ALL) -> dict:
    return dict(zip(MVA_KEYS, ("mva", projection, heads, *query, *doc)))


def full_projection() -> int:
    """Tables 1 and 3 print no projection size; their all-tokens rows print the MRR@10 of one row of Table 2 (35.8:
    p = 768, "full query and document sequences"), whose setting they are."""
    all_tokens = {row["value"] for row in paper.rows("1") if row["method"] == "All Tokens"}
    all_tokens |= {row["value"] for row in paper.rows("3") if row["settings"]["query_timesteps"].startswith("All")}
    (projection,) = [int(row["settings"]["projection_size"]) for row in paper.rows("2") if row["value"] in all_tokens]
    return projection


def printed_query_timesteps(method: str, d: int, p: int) -> int:
    """The one number of query timesteps q whose joint compute, 2 q d p + q p multiply-adds a candidate (Sec. 2.1's
    Q_K D_K^T, attention-weighted D_V and dot products with Q_V, one head) over 1,000 candidates, rounds to the
    figure Table 5 prints for `method` (MVA¹ 130, MVA² 25, MVA³ 8)."""
    printed = paper.printed("5", method, "joint_compute_mflops")
    fits = [q for q in range(1, 65) if as_printed((2 * q * d * p + q * p) * 1000 / 1e6, printed) == printed]
    assert len(fits) == 1, (method, fits)
    return fits[0]


def printed_setting(table: str, row: dict, passage_length: int) -> dict:
    """The model setting a printed row (`tests.mva.paper.rows`) fixes, from its cells (the ``setting`` column),
    its method and its table's caption (Sec. 2.2, 4, 5). Temporal pooling's rho: Sec. 2.2 reshapes n positions into
    n / rho, n the config's passage length (held to Sec. 3's 112 by `test_each_config_has_the_papers_fine_tuning`).
    """
    cells, method = row["settings"], row["method"]
    if table == "1":  # "pooling approaches applied to documents"; every query token; p as Table 2's row
        if method == "All Tokens":
            return mva(full_projection())
        k = int(cells["doc_timesteps"])
        if method == "Temporal Pooling":
            assert passage_length % k == 0, (passage_length, k)
        doc = {"First-K": ("first_k", k, None), "Multiple CLS": ("cls", k, None),
               "Temporal Pooling": ("temporal", None, passage_length // k)}[method]
        return mva(full_projection(), doc=doc)
    if table == "2":  # "projections ... on the full query and document sequences"
        assert "full query and document sequences" in row["setting"]
        return mva(int(cells["projection_size"]))
    if table == "3":  # "Multiple CLS pooling applied to the query sequence with full document sequences"
        assert "full document sequence" in row["setting"]
        k = cells["query_timesteps"]
        query = ALL if k.startswith("All Tokens") else ("cls", int(k.removesuffix(" CLS")), None)
        return mva(full_projection(), query=query)
    if table == "4":  # "the length is varied using [CLS] embeddings"; every query token
        k = cells["doc_timesteps"]
        doc = ALL if k.startswith("All Tokens") else ("cls", int(k), None)
        return mva(int(cells["projection_size"]), int(cells["num_heads"]), doc=doc)
    assert table == "5", table
    if method in ("CA (Ours)", "DE (Ours)"):
        return {"architecture": method[:2].lower()}
    # the footnote's d and p; d = MS MARCO's average passage (Table 4's "Avg. ~70") is every token, fewer are
    # [CLS] embeddings (Sec. 5: the cheaper variants "use aggressive projections and [CLS] pooling"); the footnotes
    # name no query timesteps: every query token, Sec. 4's "no pooling for query sequences"
    paper.quoted(r"Multiple \[CLS\] pooling for short document representations, and no pooling for query sequences")
    d, p = int(cells["doc_timesteps"]), int(cells["projection_size"])
    doc = ALL if d == paper.printed_average("4", "doc_timesteps") else ("cls", d, None)
    return mva(p, doc=doc)


def printed_rows(name: str) -> list[tuple[str, dict]]:
    """The printed MRR@10 rows (table, row) that `name` stands for (ROWS)."""
    keys = set(rows_of(name))
    found = [(row["table"], row) for row in paper.reported() if row["metric"] == "mrr@10"
             and (row["table"], label(SimpleNamespace(**row))) in keys]
    assert len(found) == len(keys), (name, keys)
    return found


@pytest.mark.parametrize("name", [name for name in paper.msmarco_configs() if name not in paper.ALTERNATIVES])
def test_each_config_is_the_setting_its_printed_rows_give(name):
    """The config's resolved model section is what each of its rows prints: the pooling of each side
    and its K or rho, the projection size and the heads (DE and CA: the architecture; the rest is unused). A
    config that stands for rows of several tables gets the same setting from each."""
    resolved = paper.config(name)
    model = resolved["model"]
    settings = [printed_setting(table, row, resolved["data"]["passage_length"]) for table, row in printed_rows(name)]
    assert settings and all(setting == settings[0] for setting in settings), (name, settings)
    assert {key: model[key] for key in settings[0]} == settings[0], name


@pytest.mark.parametrize("name", paper.msmarco_configs())
def test_each_config_has_the_papers_fine_tuning(name):
    """Sec. 3 and 2.3 as the paper's text says them: inputs cut to 32 query and 112 document tokens; batches of 256
    triples, one negative with each positive, softmax loss; Adam (no weight decay) at lr 3e-5; re-ranking the
    top 1,000 of BM25; BERT-base's sizes."""
    resolved = paper.config(name)
    model, data = resolved["model"], resolved["data"]
    assert (data["query_length"], data["passage_length"]) == paper.lengths()
    batch_size, lr = paper.fine_tuning()
    assert (data["batch_size"], model["lr"], model["weight_decay"]) == (batch_size, lr, 0.0)
    paper.quoted(r"fine-tuned using a softmax loss with the <query, positive document, negative document> training "
                 r"triples provided by MSMARCO\.")
    assert data["negatives"] == 1  # a triple: the positive and one negative
    assert data["train_triples"] == TRIPLES  # MS MARCO's provided ones (triples.train.small)
    (depth,) = paper.quoted(r"the MS-MARCO top-(\d+) candidates \(originally retrieved by BM25\)")
    assert data["depth"] == int(depth)
    assert paper.hidden_size() == 768 and model["encoder"].startswith("bert-base")  # BERT-base: h 768, 12 layers


def test_the_defaults_are_the_papers():
    """The data module's and the ranker's defaults, and the cost calculator's constants, are what the paper says:
    32 and 112 tokens, 256 triples, lr 3e-5, BERT-base's 12 layers, 12 heads and h = 768; MS MARCO's averages of
    ~6 query tokens (so 7 query timesteps with [CLS], Sec. 4) and ~70 document tokens; 1,000 candidates."""
    data = inspect.signature(MVADataModule).parameters
    ranker = inspect.signature(MVARanker).parameters
    assert (data["query_length"].default, data["passage_length"].default) == paper.lengths()
    assert (data["batch_size"].default, ranker["lr"].default) == paper.fine_tuning()
    layers, heads, hidden = paper.quoted(r"We use a (\d+)-layer Transformer model with (\d+) attention heads and "
                                         r"hidden size (\d+)")
    assert (ranker["num_layers"].default, ranker["num_heads"].default, ranker["hidden_size"].default) == (
        int(layers), int(heads), int(hidden))
    assert (costs.LAYERS, costs.HIDDEN) == (int(layers), int(hidden))
    assert (costs.QUERY_TIMESTEPS, costs.DOC_TIMESTEPS) == (paper.all_tokens_query_timesteps(),
                                                            paper.average_lengths()[1])
    (candidates,) = paper.quoted(r"the MS-MARCO top-(\d+) candidates")
    assert costs.CANDIDATES == int(candidates)


@pytest.mark.parametrize("name", paper.msmarco_configs())
def test_each_config_parses_into_what_it_says(name):
    """The command line links the tokenizer and the architecture; the settings the paper leaves open are the base's
    (mva/configs/msmarco.yaml)."""
    parsed_config = config(name)
    model, data, trainer = parsed_config["model"], parsed_config["data"], parsed_config["trainer"]
    # bert-base-uncased for the paper's own C4 pre-training; no joint pre-training; BERT's dropout
    assert model["encoder"] == "bert-base-uncased" and data["tokenizer"] == "bert-base-uncased"
    assert (model["init_encoder"], model["init_checkpoint"], model["dropout"]) == (None, None, 0.1)
    assert "tokenizer" not in model and "architecture" not in data  # linked from data.tokenizer, model.architecture
    assert (data["train"], data["dev"], data["test"]) == (TRAIN, DEV, TEST)
    assert paper_dataset(PAPER, data["test"]) == "msmarco-passage-dev"
    assert (data["dev_depth"], data["dev_queries"], data["test_queries"]) == (None, None, None)
    assert data["relevance_level"] == 1
    # chosen (the paper is silent): 6.4M triples, 10% warm-up, dev every 2,500 steps ending at the last
    assert trainer["max_steps"] * data["batch_size"] == 6_400_000 and model["warmup_steps"] == 2_500
    assert trainer["max_steps"] % trainer["val_check_interval"] == 0 and trainer["check_val_every_n_epoch"] is None
    assert parsed_config["compare_with"] == [] and parsed_config["ckpt_path"] is None


def test_every_reported_row_has_a_config_and_every_config_a_row():
    reported = load_reported(PAPER, table=[1, 2, 3, 4, 5], metric="mrr@10")
    printed = {(str(row.table), label(row)): row.value for row in reported.itertuples()}
    assert len(printed) == len(reported) == 33
    assert set(printed) == set(ROWS) | LEFT_OUT
    for key, (name, mrr) in ROWS.items():
        assert printed[key] == mrr, key
    written = {f"msmarco/{path.name}" for path in CONFIGS.glob("msmarco/*.yaml")}
    assert written == set(paper.msmarco_configs()) == {name for name, _ in ROWS.values()} | set(paper.ALTERNATIVES)


@pytest.mark.parametrize("name", sorted(paper.ALTERNATIVES))
def test_an_alternative_is_its_rows_setting_with_the_query_length_the_printed_cost_fits(name):
    """Table 5's MVA² and MVA³ read with q query [CLS], q the one query length whose joint compute rounds to the
    printed figure (8 for both; every query token, q = 7 with [CLS], gives 22.0 and 7.4 against 25 and 8)."""
    table, method = paper.ALTERNATIVES[name]
    (row,) = [row for row in paper.rows(table) if row["method"] == method]
    d, p = int(row["settings"]["doc_timesteps"]), int(row["settings"]["projection_size"])
    q = printed_query_timesteps(method, d, p)
    assert q == 8 != 1 + paper.printed_average("3", "query_timesteps")
    model = paper.config(name)["model"]
    expected = mva(p, query=("cls", q, None), doc=("cls", d, None))
    assert {key: model[key] for key in expected} == expected


def test_rows_that_share_a_config_are_one_setting_in_the_paper():
    """The same MRR@10 printed in each table, the settings the captions give identical."""
    by_file = {}
    for key, (name, mrr) in ROWS.items():
        by_file.setdefault(name, []).append((key, mrr))
    shared = {name: sorted(key for key, _ in rows) for name, rows in by_file.items() if len(rows) > 1}
    assert shared == {
        "msmarco/mva-all-p768.yaml": [("1", "All Tokens | ~70"), ("2", "768"), ("3", "All Tokens (Avg. ~6)")],
        "msmarco/mva-all-p128.yaml": [("2", "128"), ("5", "MVA¹")],
        "msmarco/mva-all-p64.yaml": [("2", "64"), ("4", "All Tokens (Avg. ~70) | 1 | 64")],
    }
    for name in shared:
        assert len({mrr for _, mrr in by_file[name]}) == 1, name


def test_table1_rows_keep_the_printed_document_timesteps():
    """First-K and multiple [CLS] keep K; the model's temporal pooling of a full document of the config's passage
    length (Sec. 3's 112) by its rho keeps the printed 112 / rho timesteps, all real."""
    for (table, row), (name, _) in ROWS.items():
        if table != "1" or row.startswith("All Tokens"):
            continue
        resolved = paper.config(name)
        model, timesteps, n = resolved["model"], int(row.split(" | ")[1]), resolved["data"]["passage_length"]
        if model["doc_pooling"] == "temporal":
            hidden, keep = torch.zeros(1, n, 2), torch.ones(1, n, dtype=torch.bool)
            pooled, pooled_keep = temporal_pool(hidden, keep, model["doc_factor"])
            assert pooled.shape == (1, timesteps, 2 * model["doc_factor"]) and pooled_keep.all()
        else:
            assert model["doc_timesteps"] == timesteps, name
        assert (model["projection"], model["query_pooling"]) == (full_projection(), "all")


def test_table4_rows_hold_length_times_dimension_constant():
    """Table 4's [CLS] rows: "(length x projection_size) is held constant" (Sec. 4), H heads of p counting H p."""
    products = {}
    for (table, row), (name, _) in ROWS.items():
        if table == "4" and not row.startswith("All Tokens"):
            model = paper.config(name)["model"]
            assert model["doc_pooling"] == "cls" and model["query_pooling"] == "all"
            products[name] = model["doc_timesteps"] * model["heads"] * model["projection"]
    assert len(products) == 5 and len(set(products.values())) == 1, products


def as_printed(value: float, printed: float) -> float:
    """`value` rounded at the printed number's last significant digit (130: tens; 25 and 8: units)."""
    digits = str(int(printed))
    place = 10 ** (len(digits) - len(digits.rstrip("0")))
    return round(value / place) * place


def test_table5_operating_points_fit_the_printed_costs():
    """Storage 2 d H p and joint compute (mva/costs.py's convention) of each MVA config, as Table 5 prints them: MVA¹
    with every query token; MVA² and MVA³ with every query token (q = 7) give 22.0 and 7.4 against the printed 25 and
    8, which their alternatives' 8 query [CLS] give."""
    reported = load_reported(PAPER, table=5)
    printed = {(row.method, row.metric): row.value for row in reported.itertuples()}
    alternatives = {method: name for name, (_, method) in paper.ALTERNATIVES.items()}
    for method in ("MVA¹", "MVA²", "MVA³"):
        for name in (ROWS[("5", method)][0], alternatives.get(method)):
            if name is None:
                continue
            model = paper.config(name)["model"]
            d = model["doc_timesteps"] or costs.DOC_TIMESTEPS  # all tokens: MS MARCO's ~70
            q = model["query_timesteps"] or costs.QUERY_TIMESTEPS  # all tokens: [CLS] and ~6
            p, heads = model["projection"], model["heads"]
            assert costs.mva_storage(d, p, heads) == printed[(method, "storage_floats_per_doc")]
            mflops = costs.mva_macs(q, d, p, heads) * costs.CANDIDATES / 1e6
            figure = printed[(method, "joint_compute_mflops")]
            fits = method == "MVA¹" or name in paper.ALTERNATIVES
            assert (as_printed(mflops, figure) == figure) == fits, (name, mflops, figure)


@pytest.mark.parametrize("spec", [TRAIN, DEV, TEST])
def test_the_msmarco_tasks_are_registered_with_all_four_parts(spec):
    """Registry look-ups only: the training task's queries and passages (its triples are TRIPLES'), the dev and test
    tasks BM25's top 1,000 to re-rank."""
    check_spec(spec)
    source = IrDatasetsSource(spec.removeprefix("irds:"))
    assert source.provides() == {"topics", "qrels", "candidates", "documents"}


def test_the_triples_are_registered_with_ms_marcos_count():
    """Registry metadata: triples-small holds triples.train.small's 39,780,811 docpairs, more than the 6.4M trained
    on."""
    triples = load_dataset(TRIPLES.removeprefix("irds:"))
    assert triples.has_docpairs() and triples.docpairs_count() == 39_780_811
