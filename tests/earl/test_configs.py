"""One YAML per paper row (Gao, Dai, Callan 2020: Table 2, Table 4's judge blocks, Table 5's w/o copy), each parsed by
the real command line (``--print_config``) into the paper's setting (Sec. 4.1-4.3). Nothing is built, trained or
downloaded: ir_datasets ids are looked up in the registry only."""

from functools import cache
from pathlib import Path

import pytest

from common.data.irds import IrDatasetsSource
from common.data.specs import FILE_TASK_KEYS, check_spec
from common.report import load_reported, paper_dataset
from earl import train
from earl.train import PAPER, PAPER_METHODS
from tests.printed_config import printed_config

CONFIGS = Path(train.__file__).parent / "configs"

#: File slug -> (architecture, pool, tied) of Table 2's six rows.
VARIANTS = {
    "earl-cls": ("earl", "cls", False),
    "earl-mean": ("earl", "mean", False),
    "earl-cls-tied": ("earl", "cls", True),
    "earl-mean-tied": ("earl", "mean", True),
    "bert-ranker": ("bert_ranker", "cls", False),
    "bert-siamese": ("bert_siamese", "cls", False),
}
#: MS MARCO configs -> (slug, K judge blocks, copy_cross): Table 2, Table 4 (K = 1..4), Table 5 (w/o copy).
MSMARCO = {
    **{f"msmarco-{slug}.yaml": (slug, 2, True) for slug in VARIANTS},
    **{f"msmarco-{slug}-k{k}.yaml": (slug, k, True) for slug in ("earl-cls", "earl-cls-tied") for k in (1, 2, 3, 4)},
    **{f"msmarco-{slug}-nocopy.yaml": (slug, 2, False) for slug in ("earl-cls", "earl-cls-tied")},
}
#: ClueWeb09-B configs -> slug: Table 2's rows with ClueWeb09-B numbers (all but BERT-Siamese).
CLUEWEB = {f"clueweb09b-{slug}.yaml": slug for slug in VARIANTS if slug != "bert-siamese"}

TRAIN = "irds:msmarco-passage/train/judged"
DEV = "irds:msmarco-passage/dev/small"
TEST = "irds:msmarco-passage/trec-dl-2019/judged"


@cache
def parsed(*args: str) -> dict:
    """The config ``python -m earl.train ARGS --print_config`` resolves, parsed once per argument list."""
    return printed_config(train.main, "earl.train", *args)


def config(name: str) -> dict:
    return parsed("--config", str(CONFIGS / name))


def check_model(model: dict, slug: str, num_blocks: int, copy_cross: bool) -> None:
    """Sec. 3.4 and 4.2: bert-base-uncased, l = 12 - K query layers, the hinge loss, BERT's dropout."""
    architecture, pool, tied = VARIANTS[slug]
    assert (model["architecture"], model["pool"], model["tied"]) == (architecture, pool, tied)
    assert (model["num_blocks"], model["copy_cross"]) == (num_blocks, copy_cross)
    assert model["query_layers"] is None  # l = L - K: 12 - K of bert-base-uncased's layers
    assert model["encoder"] == "bert-base-uncased"
    assert (model["loss"], model["margin"], model["dropout"], model["weight_decay"]) == ("hinge", 1.0, 0.1, 0.0)
    assert "tokenizer" not in model  # linked from data.tokenizer


def check_data(data: dict) -> None:
    assert data["tokenizer"] == "bert-base-uncased"
    assert (data["query_length"], data["passage_length"], data["negatives"]) == (16, 128, 1)
    assert data["relevance_level"] == 1
    assert "architecture" not in data  # linked from model.architecture


@pytest.mark.parametrize("name", sorted(MSMARCO))
def test_each_msmarco_row_parses_into_the_paper_setting(name):
    slug, num_blocks, copy_cross = MSMARCO[name]
    parsed_config = config(name)
    model, data, trainer = parsed_config["model"], parsed_config["data"], parsed_config["trainer"]
    check_model(model, slug, num_blocks, copy_cross)
    assert (model["lr"], model["warmup_steps"]) == (3e-5, 1000)
    check_data(data)
    assert (data["train"], data["dev"], data["test"]) == (TRAIN, DEV, TEST)
    assert paper_dataset(PAPER, data["test"]) == "trec-dl-2019-passage"
    assert (data["depth"], data["dev_depth"], data["batch_size"]) == (1000, None, 128)  # BM25's top 1,000
    assert data["dev_queries"] == 500  # a sample for checkpoint selection (the paper does not say)
    assert trainer["max_steps"] == 15_625 and trainer["max_steps"] * data["batch_size"] == 2_000_000
    assert trainer["max_steps"] % trainer["val_check_interval"] == 0  # the last validation is at the last step
    assert trainer["check_val_every_n_epoch"] is None  # val_check_interval counts steps across epochs
    assert parsed_config["compare_with"] == [] and parsed_config["ckpt_path"] is None


@pytest.mark.parametrize("name", sorted(CLUEWEB))
def test_each_clueweb_row_parses_into_the_paper_setting(name):
    parsed_config = config(name)
    model, data, trainer = parsed_config["model"], parsed_config["data"], parsed_config["trainer"]
    check_model(model, CLUEWEB[name], 2, True)
    assert model["lr"] == 5e-6 and data["batch_size"] == 32  # Sec. 4.3
    assert model["warmup_steps"] == 100 and trainer["max_epochs"] == 3 and trainer["max_steps"] == -1  # chosen
    check_data(data)
    assert data["depth"] == 100 and data["dev"] is None  # Dai & Callan's top 100; no dev set
    for split in ("train", "test"):
        task = data[split]
        assert set(task) <= set(FILE_TASK_KEYS) and task["topics_path"].endswith(f"title/fold1/{split}.topics.tsv")
        assert task["collection_path"] == "../shared/data/clueweb09b/firstp.jsonl"
    assert parsed_config["compare_with"] == [] and parsed_config["ckpt_path"] is None
    # Sec. 4.3: "we take trained model on MS MARCO, and continue training": its weights, a fresh optimizer
    source = name.replace('clueweb09b-', 'msmarco-').removesuffix('.yaml')
    assert model["init_checkpoint"] == f"outputs/{source}/checkpoints/last.ckpt"


def test_a_clueweb_fold_is_passed_as_flags():
    """The header's loop: each fold's files replace fold 1's, the rest of the config stays."""
    folder = "../shared/data/clueweb09b/description/fold2"
    flags = [f"--data.{split}.{key}_path={folder}/{split}.{suffix}" for split in ("train", "test")
             for key, suffix in (("topics", "topics.tsv"), ("qrels", "qrels.txt"), ("candidates", "run.txt"))]
    data = parsed("--config", str(CONFIGS / "clueweb09b-earl-cls.yaml"), *flags)["data"]
    for split in ("train", "test"):
        assert data[split] == {"topics_path": f"{folder}/{split}.topics.tsv",
                               "qrels_path": f"{folder}/{split}.qrels.txt",
                               "candidates_path": f"{folder}/{split}.run.txt",
                               "collection_path": "../shared/data/clueweb09b/firstp.jsonl"}  # fmt: skip
    assert data["batch_size"] == 32


def test_the_dev_column_is_the_msmarco_config_tested_on_dev():
    """Table 2's MS MARCO Dev column (and Tables 4 and 5): the same config with ``--data.test`` the dev queries."""
    data = parsed("--config", str(CONFIGS / "msmarco-earl-cls.yaml"), "--data.test", DEV)["data"]
    assert data["test"] == DEV and data["test_queries"] is None  # all 6,980
    assert paper_dataset(PAPER, data["test"]) == "msmarco-passage-dev"


@pytest.mark.parametrize("spec", [TRAIN, DEV, TEST])
def test_the_msmarco_tasks_are_registered_with_all_four_parts(spec):
    """Registry look-ups only: the training task has qrels and BM25 candidates (top1000.train) to draw triples from,
    the evaluation tasks BM25's top 1,000 to re-rank."""
    check_spec(spec)
    source = IrDatasetsSource(spec.removeprefix("irds:"))
    assert source.provides() == {"topics", "qrels", "candidates", "documents"}


def expected_config(row) -> str:
    """The config of a reported row of Tables 2, 4 and 5."""
    slug = {method: run for run, method in PAPER_METHODS.items()}[row.method].replace("_", "-")
    if row.dataset == "clueweb09b":
        return f"clueweb09b-{slug}.yaml"
    settings = dict(part.split("=", 1) for part in row.setting.split("; ")[1:])
    if str(row.table) == "4":
        return f"msmarco-{slug}-k{settings['judger_blocks']}.yaml"
    if str(row.table) == "5" and settings["cross_attention_init"] == "random":
        return f"msmarco-{slug}-nocopy.yaml"
    return f"msmarco-{slug}.yaml"


def test_every_reported_row_has_a_config_and_every_config_a_row():
    reported = load_reported("earl", table=[2, 4, 5])
    assert set(reported["table"].astype(str)) == {"2", "4", "5"}
    covered = {}
    for row in reported.itertuples():
        name = expected_config(row)
        covered.setdefault(name, set()).add(str(row.table))
        settings = dict(part.split("=", 1) for part in row.setting.split("; ")[1:])
        model = config(name)["model"]
        assert model["num_blocks"] == int(settings.get("judger_blocks", 2)), (name, row.setting)
        assert model["copy_cross"] == (settings.get("cross_attention_init", "copy") != "random"), (name, row.setting)
    written = {p.name for p in CONFIGS.glob("*.yaml") if p.name.startswith(("msmarco-", "clueweb09b-"))}
    assert written == set(covered) == set(MSMARCO) | set(CLUEWEB)
    for name, tables in covered.items():  # the header names the paper's table of the row
        first = (CONFIGS / name).read_text().splitlines()[0]
        assert any(first.startswith(f"# Table {table}, ") for table in tables), (name, first)
