"""The wheel (``pip install .``, not editable) carries every file a run reads, and ``python -m qds.train`` runs from it
to its last step, the comparison with the paper, where the repository is not importable.

The wheel is built from a copy of the repository's files (no ``build/`` left by an earlier build can add to it),
installed with ``pip install --no-deps --target`` into a folder put first on ``sys.path`` (its dependencies are this
environment's), and run from an empty folder: no checkout, and no editable install of one, is what Python imports.
The run is `tests.qds.test_train`'s tiny one (seconds), not the default's few minutes.
"""

import ast
import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from common.report import reported_dir
from tests.project import project_field
from tests.qds.test_train import TINY

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
#: What the build reads from a checkout: the rest (tests, results but the papers' numbers, caches) is no input.
_NOT_BUILT = shutil.ignore_patterns(".git", "build", "dist", "outputs", ".cache", ".venv", "*.egg-info", "__pycache__",
                                    "tests", "runs")


def files_a_run_reads() -> set[str]:
    """Every file under the packages that a command opens, as named in the wheel: each training command's configs,
    Conformer-Kernel's stopwords, and the papers' reported CSVs (`common.report`)."""
    names = {f"common/reported/{csv.name}" for csv in reported_dir().glob("*.csv")}
    for package in PACKAGES:
        names |= {str(path.relative_to(REPO)) for path in (REPO / package / "configs").rglob("*.yaml")}
    from conformer_kernel import text

    names.add(str(Path(text.__file__).with_name("stopwords.txt").relative_to(REPO)))
    return names


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The folder the wheel is installed in."""
    root = tmp_path_factory.mktemp("wheel")
    shutil.copytree(REPO, root / "source", symlinks=True, ignore=_NOT_BUILT)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            str(root / "source"), "-w", str(root / "wheel")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "wheel").glob("efficient_rankers-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        missing = files_a_run_reads() - set(archive.namelist())
        licenses = [name for name in archive.namelist() if ".dist-info/" in name and name.endswith("/LICENSE")]
    assert not missing, f"not in the wheel: {sorted(missing)}"
    assert licenses, "no LICENSE in the wheel's metadata"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                           str(root / "site"), str(wheel)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return root / "site"


def _from(site: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed wheel first, the repository nowhere
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_commands_are_imported_from_the_wheel(installed, tmp_path):
    imported = _from(installed, ["-c", "import common, qds, conformer_kernel, earl, mva; "
                                       "print(*(m.__file__ for m in (common, qds, conformer_kernel, earl, mva)))"],
                     tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert all(Path(f).is_relative_to(installed) for f in imported.stdout.split())


@pytest.fixture(scope="module")
def trained(installed, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess]:
    """A folder holding the run ``my-run`` of the installed ``python -m qds.train`` (the README's name for it), and
    the finished command."""
    folder = tmp_path_factory.mktemp("user")
    done = _from(installed, ["-m", "qds.train", *TINY, "--output_dir", "my-run"], folder)
    assert done.returncode == 0, done.stderr
    return folder, done


def test_qds_train_runs_to_its_comparison_with_the_paper(trained):
    tmp_path, done = trained
    assert (tmp_path / "my-run" / "metrics.json").is_file()
    # Run from no checkout: the wheel's version, no commit (`common.commands.provenance`).
    record = json.loads((tmp_path / "my-run" / "provenance.json").read_text())
    version = project_field("version")
    assert (record["version"], record["commit"], record["dirty"]) == (version, None, None)
    # The paper's Table 2 QDS-Transformer row, read from the repository's CSV, printed by the installed command.
    with open(REPO / "results" / "reported" / "qds.csv", newline="") as f:
        row = {r["metric"]: float(r["value"]) for r in csv.DictReader(f)
               if (r["table"], r["method"]) == ("2", "QDS-Transformer")}
    assert "Reported in the paper" in done.stdout
    (printed,) = [line for line in done.stdout.splitlines()
                  if [cell.strip() for cell in line.split("|")[1:3]] == ["2", "QDS-Transformer"]]
    assert [float(cell) for cell in printed.strip("| ").split("|")[2:]] == [row["map"], row["mrr@10"],
                                                                            row["ndcg_cut_10"]]  # 0.278, 0.36, 0.667


def readme_examples() -> tuple[str, str, str, str]:
    """The three Python blocks of the README's "Use a trained ranker" (load, re-rank and export; load the export;
    PyTerrier) and the first one's statement that makes ``frame``."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("## Use a trained ranker\n") : text.index("\n## ", text.index("## Use a trained ranker\n") + 1)]
    blocks = [block.split("```", 1)[0] for block in section.split("```python\n")[1:]]
    assert len(blocks) == 3, "the README's section shows three Python blocks"
    tree = ast.parse(blocks[0])
    (made,) = [node for node in tree.body if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "frame"]
    return (*blocks, ast.get_source_segment(blocks[0], made))


def test_the_readmes_example_loads_reranks_exports_and_loads_again_without_lightning(installed, trained):
    """The README's example as a user runs it, from the installed wheel: the checkpoint of the run re-ranks a frame of
    new queries and documents and is exported; a new process loads the export without importing Lightning and gets
    the same scores; a PyTerrier pipeline over the export gives them too."""
    folder, _ = trained
    first, second, pyterrier, frame = readme_examples()
    scores = "\nimport json, sys\njson.dump({'scores': ranked.score.tolist(), 'docnos': ranked.docno.tolist()}, sys.stderr)\n"
    done = _from(installed, ["-c", first + "ranked = ranker.rerank(frame)" + scores], folder)
    assert done.returncode == 0, done.stderr
    expected = json.loads(done.stderr.strip().splitlines()[-1])
    assert sorted(expected["docnos"]) == ["d1", "d2", "d3", "d4"] and len(set(expected["scores"])) == 4
    assert {p.name for p in (folder / "my-ranker").iterdir()} >= {"config.json", "model.safetensors", "README.md"}

    prelude = "import pandas as pd\n" + frame + "\n"
    check = ("\nranked = load('my-ranker').rerank(frame)\nassert not {'lightning', 'lightning_fabric', 'torchmetrics'} & "
             "set(sys.modules), 'Lightning imported'" + scores)
    done = _from(installed, ["-c", prelude + second + "import sys" + check], folder)
    assert done.returncode == 0, done.stderr
    again = json.loads(done.stderr.strip().splitlines()[-1])
    assert again["docnos"] == expected["docnos"]
    assert again["scores"] == pytest.approx(expected["scores"], rel=1e-6, abs=1e-6)

    pipeline = "\nranked = pipeline.transform(frame[['qid', 'query']].drop_duplicates())" + scores
    done = _from(installed, ["-c", prelude + "from common.api import load\n" + pyterrier + pipeline], folder)
    assert done.returncode == 0, done.stderr
    piped = json.loads(done.stderr.strip().splitlines()[-1])
    assert piped["docnos"] == expected["docnos"]
    assert piped["scores"] == pytest.approx(expected["scores"], rel=1e-6, abs=1e-6)
