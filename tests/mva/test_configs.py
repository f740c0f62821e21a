"""One YAML per paper row (Zhou and Devlin 2021: Tables 1-4 and Table 5's own models), each parsed by the real command
line (``--print_config``) into the row's setting (Sec. 2.2, 3, 4, 5). Nothing is built, trained or downloaded:
ir_datasets ids are looked up in the registry only. Table 6 (multi-pass re-ranking) is not a training setting: it is
`python -m mva.evaluate --rescore CA_CKPT --rescore_top 1 10 50` over a trained first pass."""

from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import pytest
import torch

from common.data.irds import IrDatasetsSource
from common.data.specs import check_spec
from common.report import load_reported, paper_dataset
from mva import costs, train
from mva.model import temporal_pool
from mva.train import PAPER
from tests.printed_config import printed_config

CONFIGS = Path(train.__file__).parent / "configs"

TRAIN = "irds:msmarco-passage/train/split200-train"
DEV = "irds:msmarco-passage/train/split200-valid"  # held-out training queries (the paper holds out 10%)
TEST = "irds:msmarco-passage/dev/small"  # every table's MS MARCO Dev MRR@10


@dataclass(frozen=True)
class Setting:
    """What a row sets of `mva.ranker.MVARanker` (DE and CA: the architecture only; the rest are MVA's defaults)."""

    architecture: str = "mva"
    projection: int = 128
    heads: int = 1
    query_pooling: str = "all"
    query_timesteps: int | None = None
    query_factor: int | None = None
    doc_pooling: str = "all"
    doc_timesteps: int | None = None
    doc_factor: int | None = None


def full(p: int) -> Setting:
    """Every query and document token at projection size `p` (Table 2's "full query and document sequences")."""
    return Setting(projection=p)


def doc(pooling: str, p: int, *, timesteps: int | None = None, factor: int | None = None, heads: int = 1,
        query_cls: int | None = None) -> Setting:  # fmt: skip
    query = {"query_pooling": "cls", "query_timesteps": query_cls} if query_cls else {}
    return Setting(projection=p, heads=heads, doc_pooling=pooling, doc_timesteps=timesteps, doc_factor=factor,
                   **query)  # fmt: skip


#: Config -> the setting of its row(s).
FILES = {
    # Table 1: document pooling at p = 768 (its All Tokens row is Table 2's 768 and Table 3's All Tokens, 35.8)
    "msmarco-mva-all-p768.yaml": full(768),
    **{f"msmarco-mva-firstk{k}-p768.yaml": doc("first_k", 768, timesteps=k) for k in (56, 28, 14)},
    **{f"msmarco-mva-cls{k}-p768.yaml": doc("cls", 768, timesteps=k) for k in (56, 28, 14)},
    **{f"msmarco-mva-temporal{112 // f}-p768.yaml": doc("temporal", 768, factor=f) for f in (2, 4, 8)},
    # Table 2: projection size on the full sequences
    **{f"msmarco-mva-all-p{p}.yaml": full(p) for p in (128, 64, 32, 16)},
    # Table 3: query [CLS] embeddings, full documents, p = 768
    **{f"msmarco-mva-all-p768-qcls{k}.yaml": Setting(projection=768, query_pooling="cls", query_timesteps=k)
       for k in (1, 2, 8, 33)},
    # Table 4: document [CLS] embeddings, H heads of p
    "msmarco-mva-cls56-p64.yaml": doc("cls", 64, timesteps=56),
    "msmarco-mva-cls28-p64-h2.yaml": doc("cls", 64, timesteps=28, heads=2),
    "msmarco-mva-cls28-p128.yaml": doc("cls", 128, timesteps=28),
    "msmarco-mva-cls14-p64-h4.yaml": doc("cls", 64, timesteps=14, heads=4),
    "msmarco-mva-cls14-p256.yaml": doc("cls", 256, timesteps=14),
    # Table 5: the baselines and the cheaper operating points (8 query [CLS], mva/costs.py)
    "msmarco-de.yaml": Setting(architecture="de"),
    "msmarco-ca.yaml": Setting(architecture="ca"),
    "msmarco-mva-cls24-p64-qcls8.yaml": doc("cls", 64, timesteps=24, query_cls=8),
    "msmarco-mva-cls16-p32-qcls8.yaml": doc("cls", 32, timesteps=16, query_cls=8),
}

#: (table, row as printed: its cells joined by " | ") -> (config, the paper's MS MARCO Dev MRR@10).
ROWS = {
    ("1", "All Tokens | ~70"): ("msmarco-mva-all-p768.yaml", 35.8),
    ("1", "First-K | 56"): ("msmarco-mva-firstk56-p768.yaml", 35.4),
    ("1", "First-K | 28"): ("msmarco-mva-firstk28-p768.yaml", 34.5),
    ("1", "First-K | 14"): ("msmarco-mva-firstk14-p768.yaml", 31.9),
    ("1", "Multiple CLS | 56"): ("msmarco-mva-cls56-p768.yaml", 35.2),
    ("1", "Multiple CLS | 28"): ("msmarco-mva-cls28-p768.yaml", 34.9),
    ("1", "Multiple CLS | 14"): ("msmarco-mva-cls14-p768.yaml", 33.2),
    ("1", "Temporal Pooling | 56"): ("msmarco-mva-temporal56-p768.yaml", 35.4),
    ("1", "Temporal Pooling | 28"): ("msmarco-mva-temporal28-p768.yaml", 34.1),
    ("1", "Temporal Pooling | 14"): ("msmarco-mva-temporal14-p768.yaml", 32.8),
    ("2", "768"): ("msmarco-mva-all-p768.yaml", 35.8),
    ("2", "128"): ("msmarco-mva-all-p128.yaml", 36.0),
    ("2", "64"): ("msmarco-mva-all-p64.yaml", 35.4),
    ("2", "32"): ("msmarco-mva-all-p32.yaml", 35.0),
    ("2", "16"): ("msmarco-mva-all-p16.yaml", 34.7),
    ("3", "All Tokens (Avg. ~6)"): ("msmarco-mva-all-p768.yaml", 35.8),
    ("3", "1 CLS"): ("msmarco-mva-all-p768-qcls1.yaml", 32.6),
    ("3", "2 CLS"): ("msmarco-mva-all-p768-qcls2.yaml", 33.5),
    ("3", "8 CLS"): ("msmarco-mva-all-p768-qcls8.yaml", 34.9),
    ("3", "33 CLS"): ("msmarco-mva-all-p768-qcls33.yaml", 35.9),
    ("4", "All Tokens (Avg. ~70) | 1 | 64"): ("msmarco-mva-all-p64.yaml", 35.4),
    ("4", "56 | 1 | 64"): ("msmarco-mva-cls56-p64.yaml", 34.6),
    ("4", "28 | 2 | 64"): ("msmarco-mva-cls28-p64-h2.yaml", 33.5),
    ("4", "28 | 1 | 128"): ("msmarco-mva-cls28-p128.yaml", 34.4),
    ("4", "14 | 4 | 64"): ("msmarco-mva-cls14-p64-h4.yaml", 31.7),
    ("4", "14 | 1 | 256"): ("msmarco-mva-cls14-p256.yaml", 33.5),
    ("5", "CA (Ours)"): ("msmarco-ca.yaml", 38.0),
    ("5", "DE (Ours)"): ("msmarco-de.yaml", 29.6),
    ("5", "MVA¹"): ("msmarco-mva-all-p128.yaml", 36.0),
    ("5", "MVA²"): ("msmarco-mva-cls24-p64-qcls8.yaml", 34.7),
    ("5", "MVA³"): ("msmarco-mva-cls16-p32-qcls8.yaml", 32.7),
}
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


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_config_parses_into_its_rows_setting(name):
    parsed_config = config(name)
    model, data, trainer = parsed_config["model"], parsed_config["data"], parsed_config["trainer"]
    assert {key: model[key] for key in asdict(FILES[name])} == asdict(FILES[name])
    # Sec. 3: BERT-base (bert-base-uncased for the paper's own C4 pre-training), Adam, lr 3e-5, no joint pre-training
    assert model["encoder"] == "bert-base-uncased" and data["tokenizer"] == "bert-base-uncased"
    assert (model["init_encoder"], model["init_checkpoint"]) == (None, None)
    assert (model["lr"], model["weight_decay"], model["dropout"]) == (3e-5, 0.0, 0.1)
    assert "tokenizer" not in model and "architecture" not in data  # linked from data.tokenizer, model.architecture
    # Sec. 2.3, 3: <query, positive, negative> triples, 256 a batch; queries 32 and documents 112 tokens
    assert (data["negatives"], data["batch_size"]) == (1, 256)
    assert (data["query_length"], data["passage_length"]) == (32, 112)
    assert (data["train"], data["dev"], data["test"]) == (TRAIN, DEV, TEST)
    assert paper_dataset(PAPER, data["test"]) == "msmarco-passage-dev"
    assert (data["depth"], data["dev_depth"], data["dev_queries"], data["test_queries"]) == (1000, None, None, None)
    assert data["relevance_level"] == 1
    # chosen (the paper is silent): 6.4M triples, 10% warm-up, dev every 2,500 steps ending at the last
    assert trainer["max_steps"] * data["batch_size"] == 6_400_000 and model["warmup_steps"] == 2_500
    assert trainer["max_steps"] % trainer["val_check_interval"] == 0 and trainer["check_val_every_n_epoch"] is None
    assert parsed_config["compare_with"] == [] and parsed_config["ckpt_path"] is None
    # the header names each of its rows, the first on the first line
    rows = rows_of(name)
    lines = (CONFIGS / name).read_text().splitlines()
    header = " ".join(line.removeprefix("# ") for line in lines if line.startswith("#"))
    assert lines[0].startswith(f'# Table {rows[0][0]}, row "{rows[0][1]}"'), (name, lines[0])
    for table, row in rows:
        assert f'Table {table}, row "{row}"' in header, (name, table, row)
    assert "bert-base-uncased" in header and "C4" in header  # the backbone that stands in for the paper's


def test_every_reported_row_has_a_config_and_every_config_a_row():
    reported = load_reported(PAPER, table=[1, 2, 3, 4, 5], metric="mrr@10")
    printed = {(str(row.table), label(row)): row.value for row in reported.itertuples()}
    assert len(printed) == len(reported) == 33
    assert set(printed) == set(ROWS) | LEFT_OUT
    for key, (name, mrr) in ROWS.items():
        assert printed[key] == mrr, key
    written = {p.name for p in CONFIGS.glob("msmarco-*.yaml")}
    assert written == set(FILES) == {name for name, _ in ROWS.values()}


def test_rows_that_share_a_config_are_one_setting_in_the_paper():
    """The same MRR@10 printed in each table, the settings the captions give identical."""
    by_file = {}
    for key, (name, mrr) in ROWS.items():
        by_file.setdefault(name, []).append((key, mrr))
    shared = {name: sorted(key for key, _ in rows) for name, rows in by_file.items() if len(rows) > 1}
    assert shared == {
        "msmarco-mva-all-p768.yaml": [("1", "All Tokens | ~70"), ("2", "768"), ("3", "All Tokens (Avg. ~6)")],
        "msmarco-mva-all-p128.yaml": [("2", "128"), ("5", "MVA¹")],
        "msmarco-mva-all-p64.yaml": [("2", "64"), ("4", "All Tokens (Avg. ~70) | 1 | 64")],
    }
    for name in shared:
        assert len({mrr for _, mrr in by_file[name]}) == 1, name


def test_table1_rows_keep_the_printed_document_timesteps():
    """First-K and multiple [CLS] keep K; temporal pooling of the 112-token document by rho keeps 112 / rho."""
    for (table, row), (name, _) in ROWS.items():
        if table != "1" or row.startswith("All Tokens"):
            continue
        setting, timesteps = FILES[name], int(row.split(" | ")[1])
        if setting.doc_pooling == "temporal":
            hidden, keep = torch.zeros(1, 112, 2), torch.ones(1, 112, dtype=torch.bool)
            pooled, pooled_keep = temporal_pool(hidden, keep, setting.doc_factor)
            assert pooled.shape == (1, timesteps, 2 * setting.doc_factor) and pooled_keep.all()
        else:
            assert setting.doc_timesteps == timesteps, name
        assert (setting.projection, setting.query_pooling) == (768, "all")


def test_table4_rows_hold_length_times_dimension_constant():
    for (table, row), (name, _) in ROWS.items():
        if table == "4" and not row.startswith("All Tokens"):
            setting = FILES[name]
            assert setting.doc_pooling == "cls" and setting.query_pooling == "all"
            assert setting.doc_timesteps * setting.heads * setting.projection == 3_584, name


def as_printed(value: float, printed: float) -> float:
    """`value` rounded at the printed number's last significant digit (130: tens; 25 and 8: units)."""
    digits = str(int(printed))
    place = 10 ** (len(digits) - len(digits.rstrip("0")))
    return round(value / place) * place


def test_table5_operating_points_fit_the_printed_costs():
    """Storage 2 d H p and joint compute (mva/costs.py's convention) of each MVA config, as Table 5 prints them;
    MVA² and MVA³'s 8 query [CLS] timesteps are what their printed joint compute needs."""
    reported = load_reported(PAPER, table=5)
    printed = {(row.method, row.metric): row.value for row in reported.itertuples()}
    for method in ("MVA¹", "MVA²", "MVA³"):
        setting = FILES[ROWS[("5", method)][0]]
        d = setting.doc_timesteps or costs.DOC_TIMESTEPS  # all tokens: MS MARCO's ~70
        q = setting.query_timesteps or costs.QUERY_TIMESTEPS  # all tokens: [CLS] and ~6
        assert costs.mva_storage(d, setting.projection, setting.heads) == printed[(method, "storage_floats_per_doc")]
        mflops = costs.mva_macs(q, d, setting.projection, setting.heads) * costs.CANDIDATES / 1e6
        paper = printed[(method, "joint_compute_mflops")]
        assert as_printed(mflops, paper) == paper, (method, mflops, paper)
        if method != "MVA¹":  # every query token (q = 7) would not give the printed figure
            mflops = costs.mva_macs(costs.QUERY_TIMESTEPS, d, setting.projection) * costs.CANDIDATES / 1e6
            assert as_printed(mflops, paper) != paper, (method, mflops)


@pytest.mark.parametrize("spec", [TRAIN, DEV, TEST])
def test_the_msmarco_tasks_are_registered_with_all_four_parts(spec):
    """Registry look-ups only: the training task has qrels and BM25 candidates (top1000.train) to draw triples from,
    the dev and test tasks BM25's top 1,000 to re-rank."""
    check_spec(spec)
    source = IrDatasetsSource(spec.removeprefix("irds:"))
    assert source.provides() == {"topics", "qrels", "candidates", "documents"}
