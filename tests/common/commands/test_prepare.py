"""``python -m <package>.prepare`` (`common.commands.prepare`): train's command line, its ``--help`` and refusals, and
every cache a tiny run of files needs, printed as built, then as found built.

That ``python -m <package>.train`` then builds nothing, on 2 processes: tests/distributed/test_prepare_then_train.py;
the corpora of bad command lines: tests/bad_input/test_prepare_commands.py.
"""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input.refusal import refused_in_process

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
#: A tiny QDS from scratch on a task of files, with a tokenizer learnt on it.
TINY_QDS = ["--data.dev", "null", "--data.test", "null", "--data.tokenizer", "train", "--model.num_layers", "1",
            "--model.hidden_size", "32", "--model.num_heads", "1", "--model.intermediate_size", "64",
            "--model.window", "8", "--model.impl", "portable", "--data.max_length", "64"]


def run(command: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", command, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.mark.parametrize("package", PACKAGES)
def test_help_is_prepares_description_then_trains_options(package, tmp_path):
    answer = run(f"{package}.prepare", "--help", cwd=tmp_path)
    assert answer.returncode == 0, answer.stderr
    assert answer.stdout.startswith(f"usage: python -m {package}.prepare [-h] ")
    text = " ".join(answer.stdout.split())
    assert f"python -m {package}.prepare: build every cache python -m {package}.train reads" in text
    assert all(option in text for option in ("--model CONFIG", "--data CONFIG", "--trainer.max_steps"))
    assert list(tmp_path.iterdir()) == []


def test_a_bad_option_is_refused_in_one_line_as_train_refuses_it(tmp_path):
    answers = [run(f"qds.{command}", "--data.batch_size", "0", cwd=tmp_path) for command in ("prepare", "train")]
    for answer in answers:
        assert answer.returncode == 2 and answer.stdout == "", answer.stderr
    assert answers[0].stderr == answers[1].stderr == (
        "error: --data.batch_size: not of type PositiveInt: 0 does not conform to restriction v>0\n")
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def task(tmp_path, monkeypatch):
    """A task of files (5 queries, 30 documents) and an empty project cache; the options naming the task."""
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    files = tmp_path / "task"
    files.mkdir()
    (files / "topics.tsv").write_text("".join(f"q{q}\tquery about topic {q}\n" for q in range(5)))
    (files / "qrels.txt").write_text("".join(f"q{q} 0 d{q * 6} 1\n" for q in range(5)))
    (files / "run.txt").write_text("".join(f"q{q} Q0 d{q * 6 + r} {r + 1} {10 - r}.0 bm25\n"
                                           for q in range(5) for r in range(6)))
    (files / "docs.tsv").write_text("".join(f"d{i}\ttitle {i}\tdocument {i} is about topic {i // 6}. It is short.\n"
                                            for i in range(30)))
    return [f"--data.train.{key}_path={files / name}" for key, name in (("topics", "topics.tsv"),
            ("qrels", "qrels.txt"), ("candidates", "run.txt"), ("collection", "docs.tsv"))]


def test_prepare_builds_each_cache_once_and_then_finds_it_built(task, tmp_path, capsys, monkeypatch):
    from qds.prepare import main

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # where train would make its outputs/ folder
    capsys.readouterr()
    first = main([*task, *TINY_QDS])
    said = capsys.readouterr().out
    cache = tmp_path / "cache"
    built = {use.path for use in first if use.built}
    kinds = sorted({path.relative_to(cache).parts[0] for path in built})
    assert kinds == ["digests", "docstore", "tokenizers", "training"]
    # topics (the tokenizer's key), qrels, run and collection hashed
    assert len([path for path in built if path.parent.name == "digests"]) == 4
    for path in built:
        assert path.exists() and "  built " in next(line for line in said.splitlines() if line.endswith(str(path)))
    assert said.splitlines()[-1] == f"{len(built)} built, 0 found built"
    assert list(work.iterdir()) == []  # no output folder

    stamps = {path: path.stat().st_mtime_ns for path in cache.rglob("*")}
    second = main([*task, *TINY_QDS])
    said = capsys.readouterr().out
    assert not any(use.built for use in second) and {use.path for use in second} == built
    assert said.splitlines()[-1] == f"0 built, {len(built)} found built"
    assert {path: path.stat().st_mtime_ns for path in cache.rglob("*")} == stamps


def test_help_with_a_config_is_the_real_parsers_under_prepares_name(tmp_path, capsys):
    from earl.prepare import main

    with pytest.raises(SystemExit) as done:
        main(["--config", str(ROOT / "earl" / "configs" / "builtin.yaml"), "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: python -m earl.prepare [-h] ") and "python -m earl.prepare: build every" in out


def test_what_train_refuses_is_refused_alike(task, tmp_path, capsys):
    from qds.prepare import main

    missing = tmp_path / "absent.tsv"
    refused_in_process(main, [*task, *TINY_QDS, f"--data.train.collection_path={missing}"], capsys,
                       f"data.train.collection_path: no such file: {missing}")
    used = tmp_path / "used"
    used.mkdir()
    (used / "config.yaml").write_text("")
    refused_in_process(main, [*task, *TINY_QDS, "--output_dir", str(used)], capsys,
                       f"{used} is not empty: choose a new --output_dir, or pass --ckpt_path last to resume the run "
                       "in it")
    assert not (tmp_path / "cache").exists()  # refused before anything was built


def test_an_ir_datasets_task_has_its_store_table_and_ids_built(tmp_path, monkeypatch, capsys):
    """The Conformer-Kernel on an ir_datasets task: ir_datasets' document store (beside its collection here, under
    IR_DATASETS_HOME for a downloaded one), the training table, the collection's ids its sampler draws from and the
    vocabulary with its embeddings."""
    import ir_datasets

    from conformer_kernel.prepare import main
    from tests.common.data.test_irds import tiny_dataset

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    dataset_id = "efficient-rankers-test/prepare"
    ir_datasets.registry.register(dataset_id, tiny_dataset(tmp_path))
    try:
        uses = main([f"--data.train=irds:{dataset_id}", "--data.dev", "null", "--data.test", "null",
                     "--data.group_size", "2", "--data.embedding_dim", "8", "--data.min_count", "1",
                     "--data.embedding_epochs", "1", "--model.model", "ndrm1", "--model.num_heads", "2",
                     "--model.num_layers", "1"])
    finally:
        ir_datasets.registry._registered.pop(dataset_id, None)  # the Registry has no public unregister
    built = {use.path for use in uses if use.built}
    store = tmp_path / "docs.tsv.pklz4"
    assert store in built and store.is_dir()
    assert sorted(path.relative_to(tmp_path / "cache").parts[0] for path in built - {store}) == [
        "collections", "conformer_kernel", "training"]
    assert capsys.readouterr().out.splitlines()[-1] == "4 built, 0 found built"
