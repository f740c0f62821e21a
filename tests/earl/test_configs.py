"""One YAML per paper row (Gao, Dai, Callan 2020: Table 2, Table 4's judge blocks, Table 5's w/o copy), each parsed by
the real command line (``--print_config``) into the paper's setting (Sec. 4.1-4.3). The paper's values are read at
test time (`tests.earl.paper`): the model of each row from its descriptors in ``results/reported/earl.csv`` (the
method's name, ``judger_blocks``, ``cross_attention_init``, the candidates ``rerank-top1000-bm25``), the training
setup from the paper's sentences (``../shared/papers/earl.txt``; skipped where it is absent); what the paper leaves
open is MORES's or our choice (`MORES`, `CHOSEN`). Nothing is built, trained or downloaded: ir_datasets ids are looked
up in the registry and its metadata only."""

from functools import cache

import ir_datasets
import pytest

from common.data.irds import IrDatasetsSource
from common.data.specs import FILE_TASK_KEYS, check_spec
from common.report import load_reported, paper_dataset
from earl import train
from earl.ranker import run_name
from earl.train import PAPER, PAPER_METHODS
from tests.earl import paper
from tests.printed_config import printed_config

CONFIGS = paper.CONFIGS
#: The configs of the MS MARCO rows (Tables 2, 4, 5) and of the ClueWeb09-B rows (Table 2 but BERT-Siamese).
MSMARCO = [name for name in paper.paper_configs() if name.startswith("msmarco/")]
CLUEWEB = [name for name in paper.paper_configs() if name.startswith("clueweb09b/")]

#: Training queries less the 200 held out for checkpoint selection (split200-valid), which are disjoint from Table 2's
#: Dev queries (msmarco-passage/dev/small, DEV_COLUMN) and TREC DL 2019 queries (TEST).
TRAIN = "irds:msmarco-passage/train/split200-train"
DEV = "irds:msmarco-passage/train/split200-valid"
#: MS MARCO's provided training triples (triples.train.small), those of TRAIN's queries trained on.
TRIPLES = "irds:msmarco-passage/train/triples-small"
DEV_COLUMN = "irds:msmarco-passage/dev/small"
TEST = "irds:msmarco-passage/trec-dl-2019/judged"

#: The loss of each architecture, with the paper's sentence that sets it (checked in the paper's text).
LOSSES = {
    # Sec. 3.4: "training end-to-end using standard ranking loss functions such as the pairwise hinge loss [6, 15]"
    "earl": ("hinge", r"training end-to-end using standard ranking loss functions such as the pairwise hinge loss "
                      r"\[6, 15\]"),
    # Sec. 4.2: "Following [14], we fine-tune the BERT ranker over ranking loss." [14] (Nogueira and Cho 2019) trains
    # with the cross-entropy over relevant and non-relevant pairs: the 2-class head's cross_entropy.
    "bert_ranker": ("cross_entropy", r"Following \[14\], we fine-tune the BERT ranker over ranking loss\."),
    # Sec. 4.2: "For the BERT-Siamese ranker, we follow [17] and train ranker over hinge loss."
    "bert_siamese": ("hinge", r"For the BERT-Siamese ranker, we follow \[17\] and train ranker over hinge loss\."),
}
#: Where the paper is silent, MORES (luyug/MORES at eff346e): arguments.py's q_max_len and p_max_len, run_marco.py's
#: bert-base-uncased config (dropout), TrainingArguments' default weight decay.
MORES = {"query_length": 16, "passage_length": 128, "dropout": 0.1, "weight_decay": 0.0}
#: Our choices: a unit hinge margin; on ClueWeb09-B, 3 epochs and 100 warm-up steps.
CHOSEN = {"margin": 1.0, "clueweb_epochs": 3, "clueweb_warmup_steps": 100}


@cache
def parsed(*args: str) -> dict:
    """The config ``python -m earl.train ARGS --print_config`` resolves, parsed once per argument list."""
    return printed_config(train.main, "earl.train", *args)


def config(name: str) -> dict:
    return parsed("--config", str(CONFIGS / name))


def row_model(name: str) -> dict:
    """The model setting every reported row of config `name` fixes (`tests.earl.paper.model_of_row`):
    one setting, whichever of its rows (Table 2's, 4's or 5's) it is read from."""
    settings = [paper.model_of_row(row) for row in paper.named_rows(name)]
    assert settings and all(setting == settings[0] for setting in settings), (name, settings)
    return settings[0]


def row_depth(name: str) -> int:
    """The candidates the config's rows re-rank (``rerank-top1000-bm25``: 1,000), one number for all of them."""
    (depth,) = {paper.depth(row) for row in paper.named_rows(name)}
    return depth


@pytest.mark.parametrize("name", paper.paper_configs())
def test_each_config_parses_into_its_rows_model(name):
    """Without the paper's text: the model is what the config's rows in results/reported/earl.csv describe
    (`row_model`: architecture, pool, tying, K, copy_cross; the baselines keep EARL's unused settings at their
    defaults), with l = L - K query layers (``query_layers`` null); the candidates re-ranked are the rows'
    (``rerank-top1000-bm25``: 1,000); margin (our choice), dropout, weight decay and token limits (MORES's); relevance
    level 1 (MS MARCO's training labels are all 1; Web Track labels 1-4 relevant); one negative per positive (a pair
    of the pairwise loss)."""
    parsed_config = config(name)
    model, data = parsed_config["model"], parsed_config["data"]
    expected = row_model(name)
    architecture = expected["architecture"]
    if architecture == "earl":
        assert {key: model[key] for key in expected} == expected, (name, expected)
    else:  # pool, tied, num_blocks and copy_cross are EARL's and unused: left at EARL's default
        assert model["architecture"] == architecture and (model["pool"], model["tied"]) == ("cls", False), name
        assert (model["num_blocks"], model["copy_cross"]) == (paper.default_blocks(), True), name
    assert model["query_layers"] is None  # l = L - K: 12 - K of bert-base-uncased's layers
    assert model["siamese_pooling"] == "mean"  # BERT-Siamese follows Sentence-BERT [17]: its default, the mean
    assert model["loss"] == LOSSES[architecture][0]
    # the run's name (its metrics' key) is the rows' method for earl.train's comparison with the paper
    (method,) = {row["method"] for row in paper.named_rows(name)}
    assert PAPER_METHODS[run_name(model["architecture"], model["pool"], model["tied"])] == method, name
    assert data["depth"] == row_depth(name)
    assert model["margin"] == CHOSEN["margin"]
    assert (model["dropout"], model["weight_decay"]) == (MORES["dropout"], MORES["weight_decay"])
    assert (data["query_length"], data["passage_length"]) == (MORES["query_length"], MORES["passage_length"])
    assert data["relevance_level"] == 1
    assert data["negatives"] == 1  # a pair: the positive and one negative
    assert "tokenizer" not in model and "architecture" not in data  # linked from data.tokenizer, model.architecture
    assert parsed_config["compare_with"] == [] and parsed_config["ckpt_path"] is None


def test_the_bert_ranker_follows_the_loss_of_the_paper_it_cites():
    """Sec. 4.2 defers the BERT ranker's loss to [14] ("Following [14], we fine-tune the BERT ranker over ranking
    loss."); Sec. 3.4 names the pairwise hinge loss for EARL, citing [6, 15]; [14] and [15] are one paper, Nogueira
    and Cho's, which trains with the cross-entropy (earl/configs/msmarco/bert-ranker.yaml): the BERT ranker's rows
    train with it, EARL's and BERT-Siamese's with the hinge loss."""
    for reference in (14, 15):
        paper.quoted(rf"\[{reference}\] Rodrigo Nogueira and Kyunghyun Cho\. 2019\. Passage Re-ranking with BERT\.")
    paper.quoted(LOSSES["bert_ranker"][1])
    paper.quoted(r"To train EARL, we connect the three Transformers and enforce module coupling by training end-to-end "
                 r"using standard ranking loss functions such as the pairwise hinge loss \[6, 15\]")
    for name in paper.paper_configs():
        model = config(name)["model"]
        assert model["loss"] == ("cross_entropy" if model["architecture"] == "bert_ranker" else "hinge"), name


def check_paper_model(model: dict, data: dict) -> None:
    """What the paper's text says of every row's model: footnote 1's encoder (and its tokenizer), Sec. 4.2's default
    K (the rows' default) and l = L - K of T_doc's layers (Sec. 3.4: T_qry "the first l layers", the judge the
    rest), the loss each architecture's sentence names (`LOSSES`), Sec. 4.2's pools (the method names' words),
    one negative per positive (the "pairwise" hinge loss)."""
    assert model["encoder"] == data["tokenizer"] == paper.encoder()
    layers = paper.layers()
    assert layers["blocks"] == paper.default_blocks() and layers["query"] + layers["blocks"] == layers["doc"]
    paper.quoted(r"for a\s+\$l\$\s+layer query understanding module, we use the first\s+\$l\$\s+layers of a "
                 r"pre-trained BERT")
    paper.quoted(LOSSES[model["architecture"]][1])
    paper.quoted(paper.POOLS)
    paper.quoted(r"the pairwise hinge loss")


@pytest.mark.parametrize("name", MSMARCO)
def test_each_msmarco_row_parses_into_the_paper_setting(name):
    """Sec. 4.3's MS MARCO training: AdamW at the paper's learning rate, its warm-up steps, its batch size, and its
    2M training examples as max_steps x batch; re-ranking BM25's top 1,000 (Sec. 4.1, the rows' candidates); the
    held-out training queries select the checkpoint, Table 2's TREC DL queries are tested; the query length also
    the speed test's (Sec. 5.2)."""
    parsed_config = config(name)
    model, data, trainer = parsed_config["model"], parsed_config["data"], parsed_config["trainer"]
    check_paper_model(model, data)
    training = paper.msmarco_training()
    assert (model["lr"], model["warmup_steps"], data["batch_size"]) == (training["lr"], training["warmup_steps"],
                                                                        training["batch_size"])
    assert trainer["max_steps"] * data["batch_size"] == training["examples"]
    assert (data["train"], data["dev"], data["test"]) == (TRAIN, DEV, TEST)
    # "a subset of Marco’s training set" (4.3): its provided triples, of TRAIN's queries, 2M of them
    paper.quoted(r"we trained EARL over a subset of Marco’s training set\.")
    assert data["train_triples"] == TRIPLES
    tested = {row["dataset"] for row in paper.reported() if row["table"] == "2" and row["split"] == "test"
              and row["dataset"] != "clueweb09b"}
    assert {paper_dataset(PAPER, data["test"])} == tested
    assert paper_dataset(PAPER, data["dev"]) is None  # selection on none of Table 2's datasets
    paper.quoted(r"the rankers were tested to re-rank the top %d documents of the MS MARCO official BM25 retrieval "
                 r"results" % data["depth"])
    assert data["dev_depth"] is None and data["dev_queries"] is None  # all 200 held-out queries, at full depth
    assert data["query_length"] == paper.speed_test_query_length()
    assert trainer["max_steps"] % trainer["val_check_interval"] == 0  # the last validation is at the last step
    assert trainer["check_val_every_n_epoch"] is None  # val_check_interval counts steps across epochs


@pytest.mark.parametrize("name", CLUEWEB)
def test_each_clueweb_row_parses_into_the_paper_setting(name):
    """Sec. 4.3's transfer: the MS MARCO model trained further at the paper's batch size and learning rate;
    re-ranking the rows' candidates (Dai and Callan's top 100, "which contains 100 candidate documents for each
    query"); epochs and warm-up our choice (`CHOSEN`); title queries of fold 1 (the others by flags)."""
    parsed_config = config(name)
    model, data, trainer = parsed_config["model"], parsed_config["data"], parsed_config["trainer"]
    check_paper_model(model, data)
    training = paper.clueweb_training()
    assert (model["lr"], data["batch_size"]) == (training["lr"], training["batch_size"])
    assert (model["warmup_steps"], trainer["max_epochs"]) == (CHOSEN["clueweb_warmup_steps"], CHOSEN["clueweb_epochs"])
    assert trainer["max_steps"] == -1
    paper.quoted(r"which contains %d candidate documents for each query" % data["depth"])
    assert data["dev"] is None  # no dev set
    assert data["train_triples"] is None  # ClueWeb09-B gives no triples: the training task's candidates
    queries = {row["settings"]["queries"] for row in paper.named_rows(name)}
    assert queries == {"title", "description"}
    for split in ("train", "test"):
        task = data[split]
        assert set(task) <= set(FILE_TASK_KEYS) and task["topics_path"].endswith(f"title/fold1/{split}.topics.tsv")
        assert task["collection_path"] == "../shared/data/clueweb09b/firstp.jsonl"
    # Sec. 4.3: "we take trained model on MS MARCO, and continue training": its weights, a fresh optimizer
    source = name.replace("clueweb09b/", "msmarco/")
    assert row_model(source) == row_model(name)  # the same row's MS MARCO model, trained to --output_dir below
    assert model["init_checkpoint"] == f"outputs/{source.replace('/', '-').removesuffix('.yaml')}/checkpoints/last.ckpt"


def test_a_clueweb_fold_is_passed_as_flags():
    """Each fold's files replace fold 1's, the rest of the config stays."""
    folder = "../shared/data/clueweb09b/description/fold2"
    flags = [f"--data.{split}.{key}_path={folder}/{split}.{suffix}" for split in ("train", "test")
             for key, suffix in (("topics", "topics.tsv"), ("qrels", "qrels.txt"), ("candidates", "run.txt"))]
    data = parsed("--config", str(CONFIGS / "clueweb09b/earl-cls.yaml"), *flags)["data"]
    for split in ("train", "test"):
        assert data[split] == {"topics_path": f"{folder}/{split}.topics.tsv",
                               "qrels_path": f"{folder}/{split}.qrels.txt",
                               "candidates_path": f"{folder}/{split}.run.txt",
                               "collection_path": "../shared/data/clueweb09b/firstp.jsonl"}
    assert data["batch_size"] == config("clueweb09b/earl-cls.yaml")["data"]["batch_size"]


def test_the_dev_column_is_the_msmarco_config_tested_on_dev():
    """Table 2's MS MARCO Dev column (and Tables 4 and 5): the same config with ``--data.test`` the dev queries."""
    data = parsed("--config", str(CONFIGS / "msmarco/earl-cls.yaml"), "--data.test", DEV_COLUMN)["data"]
    assert data["test"] == DEV_COLUMN and data["test_queries"] is None  # all of them
    dev = {row["dataset"] for row in paper.reported() if row["table"] in ("2", "4", "5") and row["split"] == "dev"}
    assert {paper_dataset(PAPER, data["test"])} == dev
    assert data["dev"] == DEV != DEV_COLUMN  # the tested queries select nothing


def test_the_tested_query_sets_have_the_papers_counts():
    """Sec. 4.1 (registry metadata): the MS MARCO Dev set "contains 6980 queries" (all of msmarco-passage/dev/small),
    the TREC 2019 DL set "contains 43 queries" (the judged ones, trec-dl-2019/judged)."""
    (count,) = paper.quoted(r"MS MARCO Dev Queries:\*\* this evaluation set contains (\d+) queries")
    assert ir_datasets.load(DEV_COLUMN[5:]).queries_count() == int(count)
    assert ir_datasets.load(TEST[5:]).queries_count() == paper.trec_dl_queries()


def test_the_held_out_queries_are_the_training_queries_not_trained_on():
    """ir_datasets' metadata (no download): split200-valid holds 200 training queries out of split200-train (131
    judgements, 119,011 BM25 candidates), which keeps the other 532,630 of msmarco-passage/train's 532,761
    judgements."""
    train_set, kept, held = (ir_datasets.load(name) for name in ("msmarco-passage/train", TRAIN[5:], DEV[5:]))
    assert (held.queries_count(), held.qrels_count(), held.scoreddocs_count()) == (200, 131, 119_011)
    assert train_set.qrels_count() == 532_761 and kept.qrels_count() == 532_630 == 532_761 - 131
    assert kept.queries_count() == train_set.queries_count() - held.queries_count()


def test_the_triples_are_ms_marcos_provided_ones_over_the_training_queries():
    """Registry metadata (no download): triples-small holds MS MARCO's 39,780,811 triples.train.small triples over
    msmarco-passage/train's queries and passages, the queries and passages of the training task (TRAIN, which holds
    out DEV's 200: their triples are left out, `common.data.triples`); 2M of them are Sec. 4.3's examples."""
    triples, train_set, kept = (ir_datasets.load(name) for name in (TRIPLES[5:], "msmarco-passage/train", TRAIN[5:]))
    assert triples.has_docpairs() and triples.docpairs_count() == 39_780_811
    assert triples.queries_handler() is train_set.queries_handler()
    assert triples.docs_handler() is train_set.docs_handler() is kept.docs_handler()
    assert paper.msmarco_training()["examples"] < triples.docpairs_count()  # a subset of them


@pytest.mark.parametrize("spec", [TRAIN, DEV, DEV_COLUMN, TEST])
def test_the_msmarco_tasks_are_registered_with_all_four_parts(spec):
    """Registry look-ups only: the training task's queries and passages (its triples are TRIPLES'), the evaluation
    tasks BM25's top 1,000 to re-rank."""
    check_spec(spec)
    source = IrDatasetsSource(spec.removeprefix("irds:"))
    assert source.provides() == {"topics", "qrels", "candidates", "documents"}


def test_every_reported_row_has_a_config_and_every_config_a_row():
    """Every row of Tables 2, 4 and 5 in results/reported/earl.csv is a paper config's (`tests.earl.paper.CONFIG_ROWS`),
    every row config on disk is one of them, and the configs of one row (Table 4's 2 blocks: Table 2's config and its
    -k2 copy) resolve to one setting."""
    reported = load_reported("earl", table=[2, 4, 5])
    assert set(reported["table"].astype(str)) == {"2", "4", "5"}
    rows = [row for row in paper.reported() if row["table"] in ("2", "4", "5")]
    assert len(rows) == len(reported)
    key = ("table", "dataset", "setting", "method", "metric")
    covered = {}
    for name in paper.paper_configs():
        for row in paper.named_rows(name):
            covered.setdefault(tuple(row[k] for k in key), set()).add(name)
    assert set(covered) == {tuple(row[k] for k in key) for row in rows}
    written = {str(path.relative_to(CONFIGS)) for folder in ("msmarco", "clueweb09b")
               for path in (CONFIGS / folder).glob("*.yaml")}
    assert written == set(paper.paper_configs()) == set(MSMARCO) | set(CLUEWEB)
    for names in covered.values():
        first, *others = sorted(names)
        for other in others:
            assert config(other) == config(first), (first, other)
