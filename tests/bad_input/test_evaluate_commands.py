"""``python -m qds.evaluate``, ``conformer_kernel.evaluate`` and ``conformer_kernel.index`` refuse bad input in one
line naming the option, or the file (and line), before anything is written: the options, the task's names and the
output folder before torch and Lightning are imported; a checkpoint of another kind once read; a malformed task file
once the task is opened (before the model is built).

Each case runs the command on files under ``tmp_path/inputs`` (``{in}`` in the arguments and the expected text),
which must be left as they were. The checkpoints are as small as the check they pass needs: a command reads a
checkpoint's kind, then the task, then builds the model.
"""

import subprocess
import sys
import zipfile

import pytest
import torch

from tests.bad_input.refusal import refused, write_inputs

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

FILES = {
    "topics.tsv": "q1\tthe cat\nq2\tdogs\n",
    "qrels.txt": "q1 0 d1 1\nq2 0 d2 1\n",
    "run.trec": "q1 Q0 d1 1 2.0 bm25\nq1 Q0 d2 2 1.0 bm25\nq2 Q0 d2 1 2.0 bm25\n",
    "docs.tsv": "d1\tthe cat sat\nd2\tdogs chase cats\n",
    "bad_topics.tsv": "q1\tthe cat\nq2 dogs\n",
    "bad_run.trec": "q1 Q0 d1 1 2.0 bm25\nq2 Q0 d2 first 2.0 bm25\n",
    "notackpt.txt": "not a checkpoint\n",
    "used/run.trec": "q1 Q0 d1 1 2.0 mine\n",
    "not_an_index/notes.txt": "mine\n",
    "unfinished/shards/plan.json": "{}\n",
    **{f"index/{name}": "" for name in ("data.npy", "indices.npy", "indptr.npy", "terms.txt", "doc_ids.txt",
                                        "meta.json")},
}
#: Checkpoint contents, each just enough to pass (or fail) the check of its kind.
CHECKPOINTS = {
    "qds.ckpt": {"state_dict": {}, "hyper_parameters": {"pattern": "qds"}},
    "ck.ckpt": {"state_dict": {}, "hyper_parameters": {"model": "ndrm3"}, "resources": {}},
    "dict.ckpt": {"weights": [1, 2]},
}

TASK = ["--topics", "{in}/topics.tsv", "--qrels", "{in}/qrels.txt", "--run", "{in}/run.trec",
        "--collection", "{in}/docs.tsv"]
QDS = ["--checkpoint", "{in}/qds.ckpt", "--task", "builtin:test"]
#: What every evaluate and index command answers to a precision that is not one of its choices, or bad workers.
PRECISION = "argument --precision: invalid choice: 'bf16' (choose from '32-true', 'bf16-mixed', '16-mixed')"
MATMUL_PRECISION = "argument --matmul_precision: invalid choice: 'medium' (choose from 'high', 'highest')"
NUM_WORKERS = "argument --num_workers: must be a non-negative integer, got -1"
#: 16-mixed, on a run told to compute on the CPU: refused once torch is imported, before anything is built.
NO_CUDA = "--precision: 16-mixed needs a CUDA GPU (float16 autocast runs on none here); bf16-mixed runs on CPUs"
QDS_CASES = [
    (["--checkpoint", "{in}/missing.ckpt"], "argument --checkpoint: no such checkpoint file: {in}/missing.ckpt"),
    (["--checkpoint", "{in}/notackpt.txt"],
     "argument --checkpoint: {in}/notackpt.txt is not a checkpoint (not a file torch.save wrote)"),
    (["--task", "builtin:nope"], "--task: unknown built-in split 'nope' in 'builtin:nope'; expected one of "
                                       "builtin:train, builtin:dev, builtin:test"),
    (["--task", "irds:no/such-id"], "--task: unknown ir_datasets id 'no/such-id'"),
    (["--depth", "0"], "argument --depth: must be a positive integer, got 0"),
    (["--batch_size", "0"], "argument --batch_size: must be a positive integer, got 0"),
    (["--window", "0"], "argument --window: must be a positive integer, got 0"),
    (["--window", "33"], "argument --window: must be even (Longformer's window spans w / 2 each side), got 33"),
    (["--relevance_level", "high"], "argument --relevance_level: invalid int value: 'high'"),
    (["--impl", "cuda"], "argument --impl: invalid choice: 'cuda' (choose from 'auto', 'reference', 'portable', "
                         "'tvm', 'flex')"),
    (["--dataset", "robust04"], "argument --dataset: invalid choice: 'robust04' (choose from 'trec-dl-2019-doc', "
                                "'msmarco-doc-dev')"),
    (["--devices", "many"], "argument --devices: must be auto, a number of devices (-1: all) or device indices such "
                            "as 0,1; got many"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty: choose a new one"),
    (["--output_dir", "{in}/notackpt.txt"], "--output_dir: {in}/notackpt.txt is a file, not a folder"),
    (["--depth"], "argument --depth: expected one argument"),
    (["--precision", "bf16"], PRECISION),
    (["--precision", "32"], "argument --precision: invalid choice: '32' (choose from '32-true', 'bf16-mixed', "
                            "'16-mixed')"),
    (["--matmul_precision", "medium"], MATMUL_PRECISION),
    (["--num_workers", "-1"], NUM_WORKERS),
]
QDS_TASK_CASES = [
    ([], "give --task TASK, or --topics, --run and --collection (and --qrels to compute metrics)"),
    (["--topics", "{in}/topics.tsv", "--run", "{in}/run.trec"],
     "give --task TASK, or --topics, --run and --collection (and --qrels to compute metrics)"),
    ([*TASK, "--topics", "{in}/missing.tsv"], "--topics: no such file: {in}/missing.tsv"),
]
CK = ["--checkpoint", "{in}/ck.ckpt", "--task", "builtin:test"]
CK_CASES = [
    (["--checkpoint", "{in}/missing.ckpt"], "argument --checkpoint: no such checkpoint file: {in}/missing.ckpt"),
    (["--task", "builtin:nope"], "--task: unknown built-in split 'nope'"),
    (["--modes", "bogus"], "argument --modes: invalid choice: 'bogus' (choose from 'rerank', 'fullrank')"),
    (["--index", "{in}/missing"], "argument --index: no such folder: {in}/missing"),
    (["--index", "{in}/not_an_index"], "argument --index: {in}/not_an_index holds no finished conformer_kernel.index "
                                       "index (no data.npy, indices.npy, indptr.npy, terms.txt, doc_ids.txt, "
                                       "meta.json)"),
    (["--modes", "rerank", "--index", "{in}/index"],
     "--index: only fullrank reads an index; add it to --modes, or leave --index out"),
    (["--test_queries", "0"], "argument --test_queries: must be a positive integer, got 0"),
    (["--depth", "-3"], "argument --depth: must be a positive integer, got -3"),
    (["--batch_size", "none"], "argument --batch_size: must be a positive integer, got none"),
    (["--orcas", "builtin:train"],
     "argument --orcas: must be irds:<ir_datasets id> (e.g. irds:msmarco-document/orcas), got builtin:train"),
    (["--orcas", "irds:no/such-id"], "argument --orcas: unknown ir_datasets id 'no/such-id'"),
    (["--dataset", "trec-dl-2019-doc"], "argument --dataset: invalid choice: 'trec-dl-2019-doc' (choose from "
                                        "'trec-dl-2020-doc')"),
    (["--devices", "0"], "argument --devices: must be auto, a number of devices"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty: choose a new one"),
    (["--task", "", "--topics", "{in}/topics.tsv"], "give --task TASK, or --topics, --run and --collection (and --qrels to compute metrics)"),
    (["--precision", "bf16"], PRECISION),
    (["--num_workers", "-1"], NUM_WORKERS),
]
INDEX = ["--checkpoint", "{in}/ck.ckpt", "--collection", "builtin:test", "--query_tasks", "builtin:test", "--output_dir", "idx"]
INDEX_CASES = [
    (["--checkpoint", "{in}/notackpt.txt"], "argument --checkpoint: {in}/notackpt.txt is not a checkpoint"),
    (["--query_tasks"], "argument --query_tasks: expected at least one argument"),
    (["--collection", "files.tsv"], "--collection: cannot read the task 'files.tsv'"),
    (["--query_tasks", "builtin:test", "irds:no/such-id"], "--query_tasks: unknown ir_datasets id 'no/such-id'"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty; choose a new folder"),
    (["--output_dir", "{in}/unfinished"],
     "--output_dir: {in}/unfinished holds an unfinished index: pass --resume to finish it, or a new folder"),
    (["--output_dir", "{in}/notackpt.txt"], "--output_dir: {in}/notackpt.txt is a file, not a folder"),
    (["--shard_size", "0"], "argument --shard_size: must be a positive integer, got 0"),
    (["--term_chunk", "-1"], "argument --term_chunk: must be a positive integer, got -1"),
    (["--orcas", "orcas.tsv"], "argument --orcas: must be irds:<ir_datasets id>"),
    (["--devices", "gpu"], "argument --devices: must be auto, a number of devices"),
    (["--precision", "bf16"], PRECISION),
    (["--matmul_precision", "medium"], MATMUL_PRECISION),
    (["--num_workers", "-1"], NUM_WORKERS),
]
#: Refused once the checkpoint is read (torch imported) or the task opened (Lightning too): seconds each.
READ_CASES = [
    ("qds.evaluate", [*QDS, "--checkpoint", "{in}/ck.ckpt"],
     "--checkpoint: {in}/ck.ckpt is not a qds.train checkpoint or the official QDS-Transformer release"),
    ("qds.evaluate", [*QDS, "--checkpoint", "{in}/dict.ckpt"], "--checkpoint: {in}/dict.ckpt is not a qds.train"),
    ("qds.evaluate", [*QDS, "--checkpoint", "{in}/notes.zip"],
     "--checkpoint: {in}/notes.zip is not a checkpoint torch can read (RuntimeError)"),
    ("qds.evaluate", ["--checkpoint", "{in}/qds.ckpt", *TASK, "--topics", "{in}/bad_topics.tsv"],
     "{in}/bad_topics.tsv:2: expected 'qid<TAB>text', got 'q2 dogs'"),
    ("qds.evaluate", ["--checkpoint", "{in}/qds.ckpt", *TASK, "--run", "{in}/bad_run.trec"],
     "{in}/bad_run.trec:2: rank 'first' is not an integer"),
    ("conformer_kernel.evaluate", [*CK, "--checkpoint", "{in}/qds.ckpt"],
     "--checkpoint: {in}/qds.ckpt is not a conformer_kernel.train checkpoint (one with its vocabulary)"),
    ("conformer_kernel.evaluate", ["--checkpoint", "{in}/ck.ckpt", *TASK, "--topics", "{in}/bad_topics.tsv"],
     "{in}/bad_topics.tsv:2: expected 'qid<TAB>text', got 'q2 dogs'"),
    ("conformer_kernel.evaluate", ["--checkpoint", "{in}/ck.ckpt", *TASK, "--run", "{in}/bad_run.trec"],
     "{in}/bad_run.trec:2: rank 'first' is not an integer"),
    ("conformer_kernel.index", [*INDEX, "--checkpoint", "{in}/dict.ckpt"],
     "--checkpoint: {in}/dict.ckpt is not a conformer_kernel.train checkpoint"),
    ("qds.evaluate", [*QDS, "--precision", "16-mixed", "--accelerator", "cpu"], NO_CUDA),
    ("conformer_kernel.evaluate", [*CK, "--precision", "16-mixed", "--accelerator", "cpu"], NO_CUDA),
    ("conformer_kernel.index", [*INDEX, "--precision", "16-mixed", "--accelerator", "cpu"], NO_CUDA),
]
#: Each command, and the paper its help names at the top.
NDRM = "Improving Transformer-Kernel Ranking Model Using Conformer and Query Term Independence"
PAPERS = {"qds.evaluate": "Long Document Ranking with Query-Directed Sparse Transformer",
          "conformer_kernel.evaluate": NDRM, "conformer_kernel.index": NDRM}
#: What ``--help`` and an option's error must answer without: seconds to import.
HEAVY = {"torch", "lightning", "transformers"}


@pytest.fixture
def inputs(tmp_path):
    folder = write_inputs(tmp_path / "inputs", FILES)
    for name, contents in CHECKPOINTS.items():
        torch.save(contents, folder / name)
    with zipfile.ZipFile(folder / "notes.zip", "w") as archive:  # a zip, as torch.save writes, but not torch's
        archive.writestr("notes.txt", "mine\n")
    return folder


def _check(module: str, base: list[str], args: list[str], expect: str, tmp_path, inputs) -> None:
    """`module` on `base` then `args` (a later flag overrides an earlier one) refuses with `expect`."""
    refused(module, [*base, *args], tmp_path, expect, inputs=inputs)


@pytest.mark.parametrize("args, expect", QDS_CASES)
def test_qds_evaluate_refuses(tmp_path, inputs, args, expect):
    _check("qds.evaluate", QDS, args, expect, tmp_path, inputs)


@pytest.mark.parametrize("args, expect", QDS_TASK_CASES)
def test_qds_evaluate_refuses_an_incomplete_task(tmp_path, inputs, args, expect):
    _check("qds.evaluate", ["--checkpoint", "{in}/qds.ckpt"], args, expect, tmp_path, inputs)


@pytest.mark.parametrize("args, expect", CK_CASES)
def test_conformer_kernel_evaluate_refuses(tmp_path, inputs, args, expect):
    _check("conformer_kernel.evaluate", CK, args, expect, tmp_path, inputs)


@pytest.mark.parametrize("args, expect", INDEX_CASES)
def test_conformer_kernel_index_refuses(tmp_path, inputs, args, expect):
    _check("conformer_kernel.index", INDEX, args, expect, tmp_path, inputs)


def test_conformer_kernel_index_needs_something_to_index(tmp_path, inputs):
    refused("conformer_kernel.index", ["--checkpoint", str(inputs / "ck.ckpt"), "--collection", "builtin:test",
                                       "--output_dir", "idx"], tmp_path,
            "nothing to index: give --query_tasks TASK [TASK ...] and/or --vocabulary", inputs=inputs)


@pytest.mark.parametrize("module, args, expect", READ_CASES)
def test_a_foreign_checkpoint_or_a_malformed_task_file_is_refused_before_anything_is_written(tmp_path, inputs,
                                                                                            module, args, expect):
    _check(module, [], args, expect, tmp_path, inputs)


@pytest.mark.parametrize("module", PAPERS)
def test_help_names_the_command_and_its_paper_at_the_top(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} ")
    top = " ".join(done.stdout.split("\noptions:")[0].split())
    assert PAPERS[module] in top


@pytest.mark.parametrize("module", PAPERS)
@pytest.mark.parametrize("args", [["--help"], ["--checkpoint"]])
def test_help_and_option_errors_import_neither_torch_nor_lightning(module, args):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *args], capture_output=True, text=True,
                          timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert done.returncode in (0, 2) and "typing" in imported, done.stderr[-2000:]
    assert not imported & HEAVY


# --- earl.index and earl.evaluate -------------------------------------------------------------------------------

#: An earl.train checkpoint's hyper-parameters, as far as the commands read them before building the model.
EARL_HPARAMS = {"num_blocks": 2, "pool": "cls", "copy_cross": True}
EARL_CHECKPOINTS = {
    "earl.ckpt": {"state_dict": {}, "hyper_parameters": {"architecture": "earl", **EARL_HPARAMS},
                  "datamodule_hyper_parameters": {"tokenizer": "builtin"}},
    "earl_bert_ranker.ckpt": {"state_dict": {}, "hyper_parameters": {"architecture": "bert_ranker", **EARL_HPARAMS}},
    "earl_bert_siamese.ckpt": {"state_dict": {}, "hyper_parameters": {"architecture": "bert_siamese", **EARL_HPARAMS}},
}
EARL_FILES = {
    "unfinished_store/plan.json": "{}\n",
    "finished_store/manifest.json": "{}\n",
    # a store of another checkpoint: refused on its identity, before its shards are read
    "other_store/manifest.json": '{"format": 2, "dtype": "float32", "identity": {"checkpoint": "' + "0" * 64 + '", "strategy": "s1"}}\n',
}
EARL_INDEX = ["--checkpoint", "{in}/earl.ckpt", "--strategy", "s1", "--collection", "builtin:test", "--output_dir", "store"]
EARL_INDEX_CASES = [
    (["--checkpoint", "{in}/missing.ckpt"], "argument --checkpoint: no such checkpoint file: {in}/missing.ckpt"),
    (["--checkpoint", "{in}/notackpt.txt"], "argument --checkpoint: {in}/notackpt.txt is not a checkpoint"),
    (["--strategy", "s3"], "argument --strategy: invalid choice: 's3' (choose from 's1', 's2')"),
    (["--dtype", "bf16"], "argument --dtype: invalid choice: 'bf16' (choose from 'fp32', 'fp16', 'int8')"),
    (["--collection", "builtin:nope"], "--collection: unknown built-in split 'nope' in 'builtin:nope'"),
    (["--collection", "irds:no/such-id"], "--collection: unknown ir_datasets id 'no/such-id'"),
    (["--collection", "{in}/missing.tsv"], "--collection: {in}/missing.tsv is neither builtin:<split>, "
                                           "irds:<ir_datasets id> nor a collection file: no such file"),
    (["--collection", "{in}/used"], "--collection: {in}/used is a folder, not a collection file"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty; choose a new folder"),
    (["--output_dir", "{in}/notackpt.txt"], "--output_dir: {in}/notackpt.txt is a file, not a folder"),
    (["--output_dir", "{in}/unfinished_store"], "--output_dir: {in}/unfinished_store holds an unfinished store; resume it, "
                                            "or choose a new folder (pass --resume to finish it)"),
    (["--output_dir", "{in}/finished_store", "--resume"],
     "--output_dir: {in}/finished_store already holds a finished store; open it, or choose a new folder"),
    (["--verify"], "--verify: checks the shards that --resume keeps; give --resume (python -m common.stores.verify "
                   "checks a finished store)"),
    (["--shard_size", "0"], "argument --shard_size: must be a positive integer, got 0"),
    (["--num_nodes", "none"], "argument --num_nodes: must be a positive integer, got none"),
    (["--devices", "gpu"], "argument --devices: must be auto, a number of devices"),
    (["--precision", "bf16"], PRECISION),
    (["--num_workers", "-1"], NUM_WORKERS),
]
EARL_EVALUATE = ["--checkpoint", "{in}/earl.ckpt", "--task", "builtin:test"]
EARL_EVALUATE_CASES = [
    (["--task", "builtin:nope"], "--task: unknown built-in split 'nope'"),
    (["--task", "", "--topics", "{in}/topics.tsv"], "give --task TASK, or --topics, --run and --collection (and --qrels to compute metrics)"),
    (["--store", "{in}/missing"], "argument --store: no such folder: {in}/missing"),
    (["--store", "{in}/not_an_index"],
     "argument --store: {in}/not_an_index holds no finished earl.index store (no manifest.json)"),
    (["--store", "{in}/unfinished_store"], "argument --store: {in}/unfinished_store holds no finished earl.index "
                                           "store (no manifest.json) (an unfinished one: finish it with earl.index "
                                           "--resume)"),
    (["--compare_end_to_end"], "--compare_end_to_end: compares a store's scores with end-to-end ones; give --store"),
    (["--depth", "0"], "argument --depth: must be a positive integer, got 0"),
    (["--batch_size", "none"], "argument --batch_size: must be a positive integer, got none"),
    (["--dataset", "clueweb09b"], "argument --dataset: invalid choice: 'clueweb09b' (choose from "
                                  "'msmarco-passage-dev', 'trec-dl-2019-passage')"),
    (["--accelerator", "tpu"], "--accelerator: earl.evaluate computes on auto, cpu, gpu, cuda; got tpu"),
    (["--devices", "2"], "--devices: earl.evaluate computes in one process (one query at a time, the paper's online setting): give one device (auto, 1, or an index such as 0,); got 2"),
    (["--accelerator", "cpu", "--devices", "0,"],
     "--devices: an index names a GPU; --accelerator cpu takes auto or 1, got 0,"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty: choose a new one"),
    (["--precision", "bf16"], PRECISION),
    (["--matmul_precision", "medium"], MATMUL_PRECISION),
]
#: Refused once the checkpoint is read or the store opened (torch imported, not Lightning): seconds each.
EARL_READ_CASES = [
    ("earl.index", [*EARL_INDEX, "--checkpoint", "{in}/qds.ckpt"],
     "--checkpoint: {in}/qds.ckpt is not an earl.train checkpoint"),
    ("earl.index", [*EARL_INDEX, "--checkpoint", "{in}/earl_bert_ranker.ckpt"],
     "--checkpoint: {in}/earl_bert_ranker.ckpt is an earl.train checkpoint of bert_ranker, not of EARL"),
    ("earl.evaluate", [*EARL_EVALUATE, "--checkpoint", "{in}/earl_bert_siamese.ckpt"],
     "--checkpoint: {in}/earl_bert_siamese.ckpt is an earl.train checkpoint of bert_siamese, not of EARL"),
    ("earl.evaluate", [*EARL_EVALUATE, "--store", "{in}/other_store"],
     "--store: {in}/other_store was built from checkpoint 000000000000…; this needs checkpoint "),
    ("earl.index", [*EARL_INDEX, "--precision", "16-mixed", "--accelerator", "cpu"], NO_CUDA),
    ("earl.evaluate", [*EARL_EVALUATE, "--precision", "16-mixed", "--accelerator", "cpu"], NO_CUDA),
]
EARL_PAPER = "EARL: Speedup Transformer-based Rankers with Pre-computed Representation"


@pytest.fixture
def earl_inputs(inputs):
    write_inputs(inputs, EARL_FILES)
    for name, contents in EARL_CHECKPOINTS.items():
        torch.save(contents, inputs / name)
    return inputs


@pytest.mark.parametrize("args, expect", EARL_INDEX_CASES)
def test_earl_index_refuses(tmp_path, earl_inputs, args, expect):
    _check("earl.index", EARL_INDEX, args, expect, tmp_path, earl_inputs)


def test_earl_index_needs_a_strategy(tmp_path, earl_inputs):
    refused("earl.index", ["--checkpoint", str(earl_inputs / "earl.ckpt"), "--collection", "builtin:test",
                           "--output_dir", "store"], tmp_path,
            "the following arguments are required: --strategy", inputs=earl_inputs)


@pytest.mark.parametrize("args, expect", EARL_EVALUATE_CASES)
def test_earl_evaluate_refuses(tmp_path, earl_inputs, args, expect):
    _check("earl.evaluate", EARL_EVALUATE, args, expect, tmp_path, earl_inputs)


@pytest.mark.parametrize("module, args, expect", EARL_READ_CASES)
def test_earl_refuses_a_foreign_checkpoint_or_another_checkpoints_store(tmp_path, earl_inputs, module, args,
                                                                         expect):
    _check(module, [], args, expect, tmp_path, earl_inputs)


@pytest.mark.parametrize("module", ["earl.index", "earl.evaluate"])
def test_earl_help_names_the_command_and_its_paper_at_the_top(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} ")
    assert EARL_PAPER in " ".join(done.stdout.split("\noptions:")[0].split())


@pytest.mark.parametrize("module", ["earl.index", "earl.evaluate"])
@pytest.mark.parametrize("args", [["--help"], ["--checkpoint"]])
def test_earl_help_and_option_errors_import_neither_torch_nor_lightning(module, args):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, *args], capture_output=True, text=True,
                          timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert done.returncode in (0, 2) and "typing" in imported, done.stderr[-2000:]
    assert not imported & HEAVY


# --- mva.index and mva.evaluate ---------------------------------------------------------------------------------

#: An mva.train checkpoint's hyper-parameters, as far as the commands read them before building the model.
MVA_HPARAMS = {"projection": 8, "heads": 1, "query_pooling": "all", "doc_pooling": "all"}
MVA_CHECKPOINTS = {
    "mva.ckpt": {"state_dict": {}, "hyper_parameters": {"architecture": "mva", **MVA_HPARAMS},
                 "datamodule_hyper_parameters": {"tokenizer": "builtin"}},
    "mva_ca.ckpt": {"state_dict": {}, "hyper_parameters": {"architecture": "ca", **MVA_HPARAMS}},
    "mva_de.ckpt": {"state_dict": {}, "hyper_parameters": {"architecture": "de", **MVA_HPARAMS}},
}
MVA_FILES = {
    "unfinished_store/plan.json": "{}\n",
    "other_store/manifest.json": '{"format": 2, "dtype": "float32", "identity": {"checkpoint": "' + "0" * 64 + '", "strategy": "mva"}}\n',
}
MVA_INDEX = ["--checkpoint", "{in}/mva.ckpt", "--collection", "builtin:test", "--output_dir", "store"]
MVA_INDEX_CASES = [
    (["--checkpoint", "{in}/missing.ckpt"], "argument --checkpoint: no such checkpoint file: {in}/missing.ckpt"),
    (["--dtype", "bf16"], "argument --dtype: invalid choice: 'bf16' (choose from 'fp32', 'fp16', 'int8')"),
    (["--collection", "builtin:nope"], "--collection: unknown built-in split 'nope' in 'builtin:nope'"),
    (["--collection", "{in}/missing.tsv"], "--collection: {in}/missing.tsv is neither builtin:<split>, "
                                           "irds:<ir_datasets id> nor a collection file: no such file"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty; choose a new folder"),
    (["--output_dir", "{in}/unfinished_store"], "--output_dir: {in}/unfinished_store holds an unfinished store; resume it, "
                                            "or choose a new folder (pass --resume to finish it)"),
    (["--shard_size", "0"], "argument --shard_size: must be a positive integer, got 0"),
]
MVA_EVALUATE = ["--checkpoint", "{in}/mva.ckpt", "--task", "builtin:test"]
MVA_EVALUATE_CASES = [
    (["--task", "builtin:nope"], "--task: unknown built-in split 'nope'"),
    (["--store", "{in}/missing"], "argument --store: no such folder: {in}/missing"),
    (["--store", "{in}/unfinished_store"], "argument --store: {in}/unfinished_store holds no finished mva.index "
                                           "store (no manifest.json) (an unfinished one: finish it with mva.index "
                                           "--resume)"),
    (["--compare_end_to_end"], "--compare_end_to_end: compares a store's scores with end-to-end ones; give --store"),
    (["--rescore", "{in}/missing.ckpt"], "argument --rescore: no such checkpoint file: {in}/missing.ckpt"),
    (["--rescore", "{in}/mva_ca.ckpt", "--rescore_top", "0"],
     "argument --rescore_top: must be a positive integer, got 0"),
    (["--rescore", "{in}/mva_ca.ckpt", "--rescore_top", "10", "10"], "--rescore_top: each K once, got 10 10"),
    (["--dataset", "trec-dl-2019-passage"], "argument --dataset: invalid choice: 'trec-dl-2019-passage' (choose "
                                            "from 'msmarco-passage-dev')"),
    (["--accelerator", "tpu"], "--accelerator: mva.evaluate computes on auto, cpu, gpu, cuda; got tpu"),
    (["--num_nodes", "2"], "--num_nodes: mva.evaluate computes in one process (one query at a time, the paper's "
                           "online setting); give 1"),
    (["--output_dir", "{in}/used"], "--output_dir: {in}/used is not empty: choose a new one"),
    (["--precision", "bf16"], PRECISION),
    (["--matmul_precision", "medium"], MATMUL_PRECISION),
]
#: Refused once the checkpoint is read or the store opened (torch imported, not Lightning): seconds each.
MVA_READ_CASES = [
    ("mva.index", [*MVA_INDEX, "--checkpoint", "{in}/qds.ckpt"],
     "--checkpoint: {in}/qds.ckpt is not an mva.train checkpoint"),
    ("mva.index", [*MVA_INDEX, "--checkpoint", "{in}/mva_ca.ckpt"],
     "--checkpoint: {in}/mva_ca.ckpt is an mva.train checkpoint of ca, not of mva or de: CA reads the query and "
     "the document together, so it has no document representation to store"),
    ("mva.evaluate", [*MVA_EVALUATE, "--rescore", "{in}/mva_de.ckpt"],
     "--rescore: {in}/mva_de.ckpt is an mva.train checkpoint of de, not of ca"),
    ("mva.evaluate", [*MVA_EVALUATE, "--checkpoint", "{in}/mva_ca.ckpt", "--store", "{in}/other_store"],
     "--store: {in}/mva_ca.ckpt is CA's, which stores nothing: it reads query and document together"),
    ("mva.evaluate", [*MVA_EVALUATE, "--store", "{in}/other_store"],
     "--store: {in}/other_store was built from checkpoint 000000000000…; this needs checkpoint "),
]
MVA_PAPER = "Multi-Vector Attention Models for Deep Re-ranking"


@pytest.fixture
def mva_inputs(inputs):
    write_inputs(inputs, MVA_FILES)
    for name, contents in MVA_CHECKPOINTS.items():
        torch.save(contents, inputs / name)
    return inputs


@pytest.mark.parametrize("args, expect", MVA_INDEX_CASES)
def test_mva_index_refuses(tmp_path, mva_inputs, args, expect):
    _check("mva.index", MVA_INDEX, args, expect, tmp_path, mva_inputs)


@pytest.mark.parametrize("args, expect", MVA_EVALUATE_CASES)
def test_mva_evaluate_refuses(tmp_path, mva_inputs, args, expect):
    _check("mva.evaluate", MVA_EVALUATE, args, expect, tmp_path, mva_inputs)


@pytest.mark.parametrize("module, args, expect", MVA_READ_CASES)
def test_mva_refuses_a_foreign_checkpoint_or_another_checkpoints_store(tmp_path, mva_inputs, module, args, expect):
    _check(module, [], args, expect, tmp_path, mva_inputs)


@pytest.mark.parametrize("module", ["mva.index", "mva.evaluate"])
def test_mva_help_names_the_command_and_its_paper_at_the_top(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} ")
    assert MVA_PAPER in " ".join(done.stdout.split("\noptions:")[0].split())


@pytest.mark.parametrize("module", ["mva.index", "mva.evaluate"])
def test_mva_help_and_option_errors_import_neither_torch_nor_lightning(module):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--checkpoint"], capture_output=True,
                          text=True, timeout=60)
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines()
                if line.startswith("import time:")}
    assert done.returncode == 2 and "typing" in imported, done.stderr[-2000:]
    assert not imported & HEAVY
