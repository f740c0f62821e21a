"""``python -m qds.benchmark``, ``conformer_kernel.benchmark``, ``common.kernels.benchmark``, ``earl.benchmark``,
``mva.benchmark`` and ``common.commands.loader_benchmark`` refuse bad options in one line, before anything is measured
or written.

Each case writes into ``out`` (in the empty working folder `refused` checks), never into the repository's
``results/``, should a refusal ever fail to happen; the cases about the output folder itself point into `inputs`.
"""

import subprocess
import sys

import pytest
import torch

from tests.bad_input.refusal import refused

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")

QDS = [
    (["--lengths", "0"], "argument --lengths: must be a positive integer, got 0"),
    (["--lengths", "-5"], "argument --lengths: must be a positive integer, got -5"),
    (["--lengths", "512,1024"], "argument --lengths: must be a positive integer, got 512,1024"),
    (["--lengths"], "argument --lengths: expected at least one argument"),
    (["--lengths", "12"], "argument --lengths: each must be at least --query_tokens + 5 = 13 (<s> query </s> [SOS] "
                          "token </s>), got 12"),
    (["--lengths", "512", "1024", "512"], "argument --lengths: 512 is given twice"),
    (["--systems", "bert"], "argument --systems: invalid choice: 'bert' (choose from 'dense', 'sparse', "
                            "'longformer_qa', 'qds_s', 'qds_q', 'qds')"),
    (["--impls", "cuda"], "argument --impls: invalid choice: 'cuda' (choose from 'reference', 'portable', 'tvm', "
                          "'flex')"),
    (["--impls", "tvm", "tvm"], "argument --impls: tvm is given twice"),
    (["--passes", "backward"], "argument --passes: invalid choice: 'backward' (choose from 'train', 'infer')"),
    (["--batch_size", "0"], "argument --batch_size: must be a positive integer, got 0"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--warmup", "0"], "argument --warmup: must be a positive integer, got 0"),
    (["--window", "0"], "argument --window: must be a positive integer, got 0"),
    (["--window", "33"], "argument --window: must be even (Longformer's window spans w / 2 each side), got 33"),
    (["--device", "cpu", "--num_heads", "3"], "argument --num_heads: must divide the hidden size 256, got 3"),
    (["--hidden_size", "64.5"], "argument --hidden_size: must be a positive integer, got 64.5"),
    (["--vocab_size", "5"], "argument --vocab_size: must be above 5 (ids 0-4 are special), got 5"),
    (["--dropout", "1.5"], "argument --dropout: must be a number >= 0 and <= 1, got 1.5"),
    (["--query_tokens", "0"], "argument --query_tokens: must be a positive integer, got 0"),
    (["--threads", "0"], "argument --threads: must be a positive integer, got 0"),
    (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
    (["--timeout", "0"], "argument --timeout: must be a positive number, got 0"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu' (choose from 'cpu', 'cuda')"),
    pytest.param(["--device", "cuda"], "argument --device: cuda is not available here", marks=CUDA),
    (["2048"], "unrecognized arguments: 2048"),
]

CK = [
    (["--lengths", "0"], "argument --lengths: must be a positive integer, got 0"),
    (["--lengths", "1.5"], "argument --lengths: must be a positive integer, got 1.5"),
    (["--lengths", "500", "500"], "argument --lengths: 500 is given twice"),
    (["--impls", "tkl"], "argument --impls: invalid choice: 'tkl' (choose from 'tk', 'ck')"),
    (["--queries", "0"], "argument --queries: must be a positive integer, got 0"),
    (["--docs", "-1"], "argument --docs: must be a positive integer, got -1"),
    (["--query_terms", "0"], "argument --query_terms: must be a positive integer, got 0"),
    (["--vocab_size", "1"], "argument --vocab_size: must be at least 2 (id 0 is padding), got 1"),
    (["--num_heads", "3"], "argument --num_heads: must divide --hidden_size (256), got 3"),
    (["--num_layers", "0"], "argument --num_layers: must be a positive integer, got 0"),
    (["--conv_window", "30"], "argument --conv_window: must be odd (the convolution keeps the document's length), "
                              "got 30"),
    (["--kernels", "0"], "argument --kernels: must be a positive integer, got 0"),
    (["--pool_stride", "0"], "argument --pool_stride: must be a positive integer, got 0"),
    (["--dropout", "-0.1"], "argument --dropout: must be a number >= 0 and <= 1, got -0.1"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--memory_fraction", "0"], "argument --memory_fraction: must be a number > 0 and <= 1, got 0"),
    (["--memory_fraction", "1.5"], "argument --memory_fraction: must be a number > 0 and <= 1, got 1.5"),
    (["--mmap_threshold", "-1"], "argument --mmap_threshold: must be a non-negative integer, got -1"),
    (["--mmap_threshold", "67108864"], "argument --mmap_threshold: must be at most 33554432 (glibc ignores a larger "
                                       "one), got 67108864"),
    (["--threads", "two"], "argument --threads: must be a positive integer, got two"),
    (["--timeout", "inf"], "argument --timeout: must be a positive number, got inf"),
    (["--device", "gpu"], "argument --device: invalid choice: 'gpu' (choose from 'cpu', 'cuda')"),
    pytest.param(["--device", "cuda"], "argument --device: cuda is not available here", marks=CUDA),
    (["--lengths", "500", "1000", "tk"], "argument --lengths: must be a positive integer, got tk"),
    (["ck"], "unrecognized arguments: ck"),
]

KERNELS = [
    (["--lengths", "0"], "argument --lengths: must be a positive integer, got 0"),
    (["--lengths", "512,1024"], "argument --lengths: must be a positive integer, got 512,1024"),
    (["--lengths", "512", "512"], "argument --lengths: 512 is given twice"),
    (["--impls", "cuda"], "argument --impls: invalid choice: 'cuda' (choose from 'reference', 'portable', 'tvm', "
                          "'flex', 'sdpa_masked', 'sdpa_dense', 'hf_longformer')"),
    (["--passes", "bwd"], "argument --passes: invalid choice: 'bwd' (choose from 'fwd', 'fwdbwd')"),
    (["--passes", "fwd", "fwd"], "argument --passes: fwd is given twice"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--max_quadratic_n", "0"], "argument --max_quadratic_n: must be a positive integer, got 0"),
    (["--timeout", "-1"], "argument --timeout: must be a positive number, got -1"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu' (choose from 'cpu', 'cuda')"),
    pytest.param(["--device", "cuda"], "argument --device: cuda is not available here", marks=CUDA),
    (["--lengths", "200", "--impls", "hf_longformer"], "nothing to measure at --lengths 200: hf_longformer: "
                                                       "LongformerSelfAttention needs n to be a multiple of the "
                                                       "window (128)"),
    (["--lengths", "8192", "--impls", "reference"], "nothing to measure at --lengths 8192: reference: (n, n) scores, "
                                                    "above --max_quadratic_n 4096"),
    (["8192"], "unrecognized arguments: 8192"),
]

EARL = [
    (["--candidates", "0"], "argument --candidates: must be a positive integer, got 0"),
    (["--lengths", "-3"], "argument --lengths: must be a positive integer, got -3"),
    (["--lengths", "1"], "argument --lengths: each must be at least 2 ([CLS] and a word), got 1"),
    (["--lengths", "128", "128"], "argument --lengths: 128 is given twice"),
    (["--size", "huge"], "argument --size: invalid choice: 'huge' (choose from 'base', 'small')"),
    (["--size", "base", "base"], "argument --size: base is given twice"),
    (["--ranker_candidates", "0"], "argument --ranker_candidates: must be a positive integer, got 0"),
    (["--earl_batch_size", "0"], "argument --earl_batch_size: must be a positive integer, got 0"),
    (["--dtype", "bf16"], "argument --dtype: invalid choice: 'bf16' (choose from 'fp32', 'fp16', 'int8')"),
    (["--documents", "real"], "argument --documents: invalid choice: 'real' (choose from 'encoded', 'random')"),
    (["--impls", "earl_s3"], "argument --impls: invalid choice: 'earl_s3' (choose from 'bert_ranker', 'earl_s1', "
                             "'earl_s2')"),
    (["--store_documents", "0"], "argument --store_documents: must be a positive integer, got 0"),
    (["--store_documents", "999"], "argument --store_documents: a query draws --candidates 1000 distinct documents; "
                                   "got 999"),
    (["--store_gb", "0"], "argument --store_gb: must be a positive number, got 0"),
    (["--store_gb", "3"], "argument --store_gb: 3 GB holds fewer than the --candidates 1000 documents a query draws "
                          "of size base, S2, d = 512 (3,145,728 bytes each)"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--threads", "0"], "argument --threads: must be a positive integer, got 0"),
    (["512"], "unrecognized arguments: 512"),
]

MVA = [
    (["--candidates", "0"], "argument --candidates: must be a positive integer, got 0"),
    (["--ca_candidates", "none"], "argument --ca_candidates: must be a positive integer, got none"),
    (["--size", "huge"], "argument --size: invalid choice: 'huge' (choose from 'base', 'small')"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--device", "tpu"], "argument --device: invalid choice: 'tpu'"),
    (["--store_documents", "0"], "argument --store_documents: must be a positive integer, got 0"),
    (["--candidates", "20", "--store_documents", "19"], "argument --store_documents: a query draws --candidates 20 "
                                                        "distinct documents; got 19"),
]

LOADERS = [
    (["--loaders", "qds.index"], "argument --loaders: invalid choice: 'qds.index' (choose from 'qds.train', "
                                 "'conformer_kernel.train', 'earl.train', 'mva.train', 'conformer_kernel.index', "
                                 "'earl.index', 'mva.index')"),
    (["--loaders", "earl.train", "earl.train"], "argument --loaders: earl.train is given twice"),
    (["--workers", "-1"], "argument --workers: must be a non-negative integer, got -1"),
    (["--batches", "0"], "argument --batches: must be a positive integer, got 0"),
    (["--shard_size", "none"], "argument --shard_size: must be a positive integer, got none"),
    (["--repeats", "0"], "argument --repeats: must be a positive integer, got 0"),
    (["--device", "cpu"], "unrecognized arguments: --device cpu"),
]

#: Each command and the name of a file it would write on CPU into its ``--output_dir`` (one name for them all).
COMMANDS = {"qds.benchmark": "efficiency_cpu.csv", "conformer_kernel.benchmark": "memory.csv",
            "common.kernels.benchmark": "bench_cpu.csv", "earl.benchmark": "speed.csv", "mva.benchmark": "speed.csv",
            "common.commands.loader_benchmark": "loaders.csv"}
#: The commands that run on the CPU only, without ``--device``.
CPU_ONLY = ("earl.benchmark", "common.commands.loader_benchmark")


def cases():
    """Every command's cases, a CUDA-only one kept with its mark."""
    for module, corpus in {"qds.benchmark": QDS, "conformer_kernel.benchmark": CK, "common.kernels.benchmark": KERNELS,
                           "earl.benchmark": EARL, "mva.benchmark": MVA,
                           "common.commands.loader_benchmark": LOADERS}.items():
        for case in corpus:
            values, marks = (case.values, case.marks) if hasattr(case, "marks") else (case, ())
            yield pytest.param(module, *values, marks=marks, id=f"{module}:{' '.join(values[0])}")


@pytest.mark.parametrize("module, args, expect", cases())
def test_a_bad_option_is_refused(tmp_path, module, args, expect):
    refused(module, [*args, "--output_dir", "out"], tmp_path, expect)


@pytest.mark.parametrize("module", COMMANDS)
@pytest.mark.parametrize("where", ["{file}", "{file}/sub"])
def test_an_output_folder_that_is_a_file_is_refused(tmp_path, module, where):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "results").write_text("a file\n")
    refused(module, ["--output_dir", where.format(file=inputs / "results")], tmp_path,
            f"argument --output_dir: {inputs / 'results'} is a file, not a folder", inputs=inputs)


@pytest.mark.parametrize("module", COMMANDS)
def test_existing_results_are_refused_without_overwrite(tmp_path, module):
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    name = COMMANDS[module]
    (inputs / name).write_text("earlier results\n")
    device = [] if module in CPU_ONLY else ["--device", "cpu"]
    refused(module, [*device, "--output_dir", str(inputs)], tmp_path,
            f"refusing to overwrite {inputs / name} (pass --overwrite)", inputs=inputs)


@pytest.mark.parametrize("module", COMMANDS)
def test_help_names_the_command(module):
    done = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.startswith(f"usage: python -m {module} ")


@pytest.mark.parametrize("module", ["qds.benchmark", "conformer_kernel.benchmark", "earl.benchmark", "mva.benchmark",
                                    "common.commands.loader_benchmark"])
@pytest.mark.parametrize("args", [["--help"], ["--repeats", "0"]])
def test_help_and_argument_errors_do_not_wait_for_torch(module, args):
    """(common.kernels.benchmark cannot: its package, common.kernels, imports torch.)"""
    code = (f"import sys\nfrom {module} import main\ntry:\n    main({args!r})\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stderr.splitlines()[-1] == "False", done.stderr

