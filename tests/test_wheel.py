"""The wheel (``pip install .``, not editable) carries every file a run reads, and ``python -m qds.train`` runs from it
to its last step, the comparison with the paper, where the repository is not importable.

The wheel is built from a copy of the repository's files (no ``build/`` left by an earlier build can add to it),
installed with ``pip install --no-deps --target`` into a folder put first on ``sys.path`` (its dependencies are this
environment's), and run from an empty folder: no checkout, and no editable install of one, is what Python imports.
The run is `tests.qds.test_train`'s tiny one (seconds), not the default's few minutes.
"""

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from common.commands.help import command_files
from common.report import available_papers
from tests.project import project_field
from tests.qds.test_train import TINY

pytestmark = pytest.mark.slow  # the second tier (README, "Tests")

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("qds", "conformer_kernel", "earl", "mva")
#: What the build reads from a checkout: the rest (tests, results but the papers' numbers, caches) is no input.
_NOT_BUILT = shutil.ignore_patterns(".git", "build", "dist", "outputs", ".cache", ".venv", "*.egg-info", "__pycache__",
                                    "tests", "runs")


def files_a_run_reads() -> set[str]:
    """Every file under the packages that a command opens, as named in the wheel: each training command's stored help
    and options schema (which its evaluate command reads too) and configs, Conformer-Kernel's stopwords, and the
    papers' reported CSVs (`common.report`)."""
    names = {f"common/reported/{paper}.csv" for paper in available_papers()}
    for package in PACKAGES:
        names |= {str(path.relative_to(REPO)) for path in command_files(f"{package}.train")}
        names |= {str(path.relative_to(REPO)) for path in (REPO / package / "configs").glob("*.yaml")}
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
                           capture_output=True, text=True)  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "wheel").glob("efficient_rankers-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        missing = files_a_run_reads() - set(archive.namelist())
        licenses = [name for name in archive.namelist() if ".dist-info/" in name and name.endswith("/LICENSE")]
    assert not missing, f"not in the wheel: {sorted(missing)}"
    assert licenses, "no LICENSE in the wheel's metadata"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target",
                           str(root / "site"), str(wheel)], capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return root / "site"


def _from(site: Path, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}  # the installed wheel first, the repository nowhere
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_the_commands_are_imported_from_the_wheel(installed, tmp_path):
    imported = _from(installed, ["-c", "import common, qds, conformer_kernel, earl, mva; "
                                       "print(*(m.__file__ for m in (common, qds, conformer_kernel, earl, mva)))"],
                     tmp_path)  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert all(Path(f).is_relative_to(installed) for f in imported.stdout.split())


def test_qds_train_runs_to_its_comparison_with_the_paper(installed, tmp_path):
    done = _from(installed, ["-m", "qds.train", *TINY, "--output_dir", "run"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "run" / "metrics.json").is_file()
    # Run from no checkout: the wheel's version, no commit (`common.commands.provenance`).
    record = json.loads((tmp_path / "run" / "provenance.json").read_text())
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
