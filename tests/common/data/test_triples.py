"""Provided training triples (`common.data.triples`, ``--data.train_triples``), on made data: the table and its groups
worked by hand; an ir_datasets task's docpairs (ir_datasets' own ``TsvDocPairs`` over a local file, registered for
the test, as MS MARCO's ``msmarco-passage/train/triples-small`` is read) streamed into the cache once; EARL's data
module training on them, each batch holding the triples' positive and negative passages in the order the loader
draws; a missing docpairs file named before anything starts; bad settings refused naming their option.

The made triples (query, positive, negative), in the file's order: (q1, d1, d2), (q9, d4, d5), (q2, d3, d1),
(q1, d6, d2). The training task's queries are q1 and q2 (q9 is held out of it, as MS MARCO's split200-valid is of
split200-train), so the groups are, in order: (q1: d1, d2), (q2: d3, d1), (q1: d6, d2).
"""

import json
import os
import subprocess
import sys

import pytest
import torch

ir_datasets = pytest.importorskip("ir_datasets")

from ir_datasets.datasets.base import Dataset  # noqa: E402
from ir_datasets.formats import TsvDocPairs, TsvDocs, TsvQueries  # noqa: E402
from ir_datasets.util import LocalDownload  # noqa: E402

from common.data.formats import Document  # noqa: E402
from common.data.irds import DatasetUnavailableError, IrDatasetsSource  # noqa: E402
from common.data.irds_files import missing_files  # noqa: E402
from common.data.samplers import TrainingGroup  # noqa: E402
from common.data.triples import TriplesSampler, TriplesTable  # noqa: E402
from common.refusals import SettingError  # noqa: E402

pytestmark = pytest.mark.usefixtures("network")  # offline; `network`, `register`: conftest.py

TRIPLES = [("q1", "d1", "d2"), ("q9", "d4", "d5"), ("q2", "d3", "d1"), ("q1", "d6", "d2")]
QUERIES = {"q1": "what do fleas eat", "q2": "highest mountain in europe", "q9": "a held out query"}
TRAINING_QUERIES = ("q1", "q2")
TEXTS = {"d1": "Fleas feed on the blood of mammals and birds.", "d2": "A flea market sells second-hand goods.",
         "d3": "Mount Elbrus is the highest peak in Europe.", "d4": "The Alps cross eight countries.",
         "d5": "Bread rises in the oven.", "d6": "Adult fleas live on blood meals."}
#: The groups of the triples of the training queries, in the triples' order (module docstring).
GROUPS = [TrainingGroup("q1", ("d1", "d2"), (1.0, 0.0)), TrainingGroup("q2", ("d3", "d1"), (1.0, 0.0)),
          TrainingGroup("q1", ("d6", "d2"), (1.0, 0.0))]


def test_the_table_and_its_groups_worked_by_hand():
    """Ids sorted (a row is a code), each triple as three codes in the triples' order; the sampler keeps the triples
    of the topics' queries, positive first with labels (1, 0), whatever the epoch."""
    table = TriplesTable.of(TRIPLES)
    assert table.queries.tolist() == [b"q1", b"q2", b"q9"]
    assert table.docs.tolist() == [b"d1", b"d2", b"d3", b"d4", b"d5", b"d6"]
    assert table.triples.tolist() == [[0, 0, 1], [2, 3, 4], [1, 2, 0], [0, 5, 1]]
    sampler = TriplesSampler(table, {qid: QUERIES[qid] for qid in TRAINING_QUERIES})
    assert (len(sampler), sampler.left_out) == (3, 1)
    assert [sampler[i] for i in range(3)] == GROUPS
    assert [sampler.item(i, 5) for i in range(3)] == GROUPS
    with pytest.raises(IndexError):
        sampler.item(3, 0)


def test_no_triple_of_a_training_query_is_refused():
    with pytest.raises(ValueError, match="none of the 4 triples' 3 queries is a topic of the training task"):
        TriplesSampler(TriplesTable.of(TRIPLES), {"q5": "another query"})


def write(path, lines):
    path.write_text("".join("\t".join(fields) + "\n" for fields in lines), encoding="utf-8")
    return path


@pytest.fixture
def tasks(tmp_path, register, monkeypatch):
    """(the training task's id: queries q1, q2 and the passages; the triples' id: the four docpairs alone), registered
    for the test, with the repository's cache in `tmp_path`."""
    monkeypatch.setattr("common.data.irds.cache_root", lambda: tmp_path / "cache")
    training = Dataset(TsvQueries(LocalDownload(write(tmp_path / "queries.tsv", [(q, QUERIES[q])
                                                                                 for q in TRAINING_QUERIES]))),
                       TsvDocs(LocalDownload(write(tmp_path / "docs.tsv", TEXTS.items()))))
    triples = Dataset(TsvDocPairs(LocalDownload(write(tmp_path / "triples.tsv", TRIPLES))))
    return register(training, "train"), register(triples, "triples")


def test_an_ir_datasets_tasks_docpairs_are_streamed_into_the_cache_once(tasks, tmp_path):
    _, triples_id = tasks
    table = IrDatasetsSource(triples_id).triples_table()
    assert table.folder.parent == tmp_path / "cache" / "triples"
    assert [(table.query_id(q), *table.doc_ids([p, n])) for q, p, n in table.triples.tolist()] == TRIPLES
    meta = json.loads((table.folder / "triples.json").read_text())
    assert (meta["triples"], meta["queries"], meta["documents"]) == (4, 3, 6)
    assert meta["source"] == {"ir_datasets": triples_id}
    (tmp_path / "triples.tsv").unlink()  # built: read from the cache alone
    again = IrDatasetsSource(triples_id).triples_table()
    assert again.folder == table.folder and again.triples.tolist() == table.triples.tolist()


def test_ms_marcos_own_triples_small_gives_query_positive_negative(tmp_path):
    """The real ``msmarco-passage/train/triples-small``, its triples in the file ir_datasets keeps them in once it has
    mapped triples.train.small's texts to ids (``<IR_DATASETS_HOME>/msmarco-passage/train/small.triples.qidpid.tsv``:
    query id, positive id, negative id), read in a process of its own (ir_datasets fixes its home at import): the
    table holds each line's three ids in the file's order, nothing downloaded."""
    home = tmp_path / "irds"
    (home / "msmarco-passage" / "train").mkdir(parents=True)
    lines = [("1185869", "0", "8841822"), ("1185868", "16", "7"), ("1185869", "2", "65")]
    write(home / "msmarco-passage" / "train" / "small.triples.qidpid.tsv", lines)
    read = ("from common.data.irds import IrDatasetsSource\n"
            "table = IrDatasetsSource('msmarco-passage/train/triples-small').triples_table()\n"
            "print([(table.query_id(q), *table.doc_ids([p, n])) for q, p, n in table.triples.tolist()])")
    done = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "IR_DATASETS_HOME": str(home),
                               "EFFICIENT_RANKERS_CACHE": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == repr(lines)


def data_module(tasks, **settings):
    from earl.data import EARLDataModule

    train_id, triples_id = tasks
    return EARLDataModule(**{"train": f"irds:{train_id}", "train_triples": f"irds:{triples_id}", "dev": None,
                             "test": None, "tokenizer": "builtin", "batch_size": 3, "query_length": 12,
                             "passage_length": 24, **settings})


def test_batches_hold_the_triples_passages_positive_then_negative_in_the_loaders_order(tasks):
    """`EARLDataModule` with ``train_triples``: its training set is `GROUPS` (q9's triple left out), each epoch the
    same; its loader's batch of the 3 groups holds them in the order torch draws for the seed
    (``torch.randperm(3)`` from ``manual_seed(0)``), each group's positive then its negative, labels 1 and 0, the
    passages the texts of those ids (each query's text encoded once, spread by ``query_index``)."""
    data = data_module(tasks)
    data.prepare_data()  # the triples' table, as prepare_data builds it on one process
    dataset = data.dataset("train")
    assert [dataset[i] for i in range(len(dataset))] == GROUPS
    assert [dataset[(1, i)] for i in range(len(dataset))] == GROUPS  # epoch 1: the same groups
    (batch,) = list(data.train_dataloader())
    order = torch.randperm(3, generator=torch.Generator().manual_seed(0)).tolist()
    groups = [GROUPS[i] for i in order]
    doc_ids = [doc_id for group in groups for doc_id in group.doc_ids]
    assert batch["doc_ids"] == doc_ids and batch["group_size"] == 2
    assert batch["qids"] == [group.qid for group in groups for _ in range(2)]
    assert batch["labels"].tolist() == [1.0, 0.0] * 3
    expected = data.encoder([QUERIES[group.qid] for group in groups for _ in range(2)],
                            [Document(doc_id, TEXTS[doc_id]) for doc_id in doc_ids])
    for key in ("doc_tokens", "doc_mask", "query_tokens", "query_mask", "query_index"):
        torch.testing.assert_close(batch[key], expected[key], rtol=0, atol=0)


def test_with_triples_the_training_task_is_read_for_its_text_only():
    """The training task of a run with ``train_triples`` is checked for its queries and passages only (its qrels and
    candidates are not read); the triples' task for its docpairs (`BertTriplesDataModule.other_tasks`)."""
    from earl.data import EARLDataModule

    assert EARLDataModule.split_parts({"train_triples": "irds:x"}) == {"train": ("docs", "queries")}
    assert EARLDataModule.split_parts({"train_triples": None}) == {}
    assert EARLDataModule.other_tasks == {"train_triples": ("docpairs",)}


def test_a_missing_docpairs_file_is_named_before_anything_starts(tmp_path, register):
    """The check every training command runs first (`common.data.irds_files`) names the triples' missing file as a
    file of the training triples; reading them names it too."""
    absent = tmp_path / "gone" / "triples.tsv"
    triples_id = register(Dataset(TsvDocPairs(LocalDownload(absent))), "triples")
    (line,) = missing_files([f"irds:{triples_id}"], ["--data.train_triples"], [("docpairs",)])
    assert line.startswith(f"--data.train_triples irds:{triples_id}: missing {absent}, a file of the training "
                           "triples (docpairs)")
    with pytest.raises(DatasetUnavailableError, match="training triples|docpairs"):
        IrDatasetsSource(triples_id).triples_table()


def test_a_training_command_checks_the_triples_and_only_the_text_of_the_training_task(tmp_path, register, capsys,
                                                                                     monkeypatch):
    """``earl.train`` with ``--data.train_triples``: before anything is built, the one missing file it names is the
    triples'; the training task's qrels and candidates, missing too, are not read and not named. Without the triples,
    the same training task's two missing files are named."""
    from ir_datasets.formats import TrecQrels, TrecScoredDocs

    from earl import train

    monkeypatch.setattr(sys, "argv", ["earl.train"])  # the command line is the args given
    training = Dataset(TsvQueries(LocalDownload(write(tmp_path / "queries.tsv", [("q1", QUERIES["q1"])]))),
                       TrecQrels(LocalDownload(tmp_path / "gone" / "qrels.txt"), {1: "relevant"}),
                       TrecScoredDocs(LocalDownload(tmp_path / "gone" / "run.txt")),
                       TsvDocs(LocalDownload(write(tmp_path / "docs.tsv", TEXTS.items()))))
    train_id = register(training, "train")
    triples_id = register(Dataset(TsvDocPairs(LocalDownload(tmp_path / "gone" / "triples.tsv"))), "triples")
    args = ["--data.train", f"irds:{train_id}", "--data.dev", "null", "--data.test", "null", "--compare_with", "[]",
            "--output_dir", str(tmp_path / "out")]
    for triples, named in ((f"irds:{triples_id}", ["triples.tsv"]), ("null", ["qrels.txt", "run.txt"])):
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_info:
            train.main([*args, "--data.train_triples", triples])
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
        assert exit_info.value.code == 2 and len(errors) == len(named), errors
        assert all(str(tmp_path / "gone" / name) in line for name, line in zip(named, errors)), errors
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("settings, option, message", [
    ({"train_triples": "builtin:train"}, "data.train_triples", "irds:<id>"),
    ({"train_triples": "irds:no-such/dataset"}, "data.train_triples", "unknown ir_datasets id"),
    ({"train_triples": "TRAIN"}, "data.train_triples", "has no docpairs"),
    ({"train": "builtin:train"}, "data.train", "give an ir_datasets task"),
    ({"negatives": 2}, "data.negatives", "a training triple holds one negative"),
])
def test_bad_triples_settings_are_refused_naming_the_option(tasks, settings, option, message):
    train_id, _ = tasks
    if settings.get("train_triples") == "TRAIN":
        settings = {"train_triples": f"irds:{train_id}"}  # a task without docpairs
    with pytest.raises(SettingError, match=message) as refused:
        data_module(tasks, **settings)
    assert refused.value.option == option
