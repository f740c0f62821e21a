"""The tables of results/*/README.md agree with the files beside them (`common.report_tables`), and the check sees a
number that does not."""

import json
import shutil
from pathlib import Path

import pytest

from common.report_tables import TABLES, check, main, update
from common.report_tables.cells import TableError

RESULTS = Path(__file__).resolve().parents[2] / "results"


@pytest.fixture
def results(tmp_path) -> Path:
    """A copy of results/ to change."""
    return Path(shutil.copytree(RESULTS, tmp_path / "results"))


def rows(readme: Path, first_cell: str) -> list[list[str]]:
    """The cells of the README's table rows whose first cell is `first_cell`."""
    return [[c.strip() for c in line.strip("|").split("|")] for line in readme.read_text().splitlines()
            if line.startswith(f"| {first_cell} |")]


def test_every_readme_table_agrees_with_its_files():
    assert check(RESULTS) == []


def test_every_metrics_file_has_its_command_beside_it():
    runs = sorted(RESULTS.glob("*/runs/*/metrics.json"))
    assert runs, "no run under results/*/runs"
    assert [str(p.relative_to(RESULTS)) for p in runs if not (p.parent / "command.txt").is_file()] == []


def test_a_table_shows_its_metrics_file_to_four_places():
    metrics = json.loads((RESULTS / "earl" / "runs" / "default" / "metrics.json").read_text())
    [row] = rows(RESULTS / "earl" / "README.md", "EARL ClsPool tied (small, from scratch)")
    measures = metrics["earl_cls_tied"]
    assert row[1:] == [f"{measures[m]:.4f}" for m in ("ndcg_cut_10", "map", "recip_rank", "mrr@10")]


def test_a_benchmark_table_shows_the_ratio_of_its_csv_rows():
    import csv

    with open(RESULTS / "kernels" / "bench_cpu.csv", newline="") as f:
        ms = {(r["impl"], r["n"], r["pass"]): float(r["ms"]) for r in csv.DictReader(f)}
    [row] = rows(RESULTS / "kernels" / "README.md", "4096")[:1]
    assert row[-2] == f"{ms['sdpa_dense', '4096', 'fwd'] / ms['tvm', '4096', 'fwd']:.2f}x" == "6.08x"


def test_a_changed_number_in_a_metrics_file_fails_the_check_naming_the_table(results, capsys):
    path = results / "earl" / "runs" / "default" / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["earl_cls_tied"]["ndcg_cut_10"] = 0.3
    path.write_text(json.dumps(metrics))
    problems = check(results)
    assert len(problems) == 1
    assert problems[0].startswith("results/earl/README.md: table earl/default differs from its files")
    assert "0.3000" in problems[0]
    assert main(["--check", "--results", str(results)]) == 1
    assert "table earl/default" in capsys.readouterr().err


def test_writing_the_tables_puts_a_changed_csv_number_in_the_readme(results):
    import csv

    path = results / "mva" / "speed.csv"
    with open(path, newline="") as f:
        [ms] = [r["ms"] for r in csv.DictReader(f) if (r["size"], r["impl"]) == ("base", "mva1")]
    assert float(ms) != 238.444954
    path.write_text(path.read_text().replace(ms, "238.444954", 1))  # its first cell: the row's ms
    assert update(results) == ["results/mva/README.md: mva/speed"]
    assert rows(results / "mva" / "README.md", "MVA¹ (q 7, d 70, p 128)")[0][1] == "238.4"
    assert check(results) == []


def test_a_run_still_to_do_leaves_its_cells_empty_and_names_its_file(results):
    (results / "mva" / "runs" / "mva2-query-cls8" / "metrics.json").unlink()
    update(results)
    text = (results / "mva" / "README.md").read_text()
    assert "| MVA² | 8 [CLS] | distinct | | | | | `runs/mva2-query-cls8` |" in text
    assert "`runs/mva2-query-cls8/metrics.json`" in text


def test_a_run_folder_without_its_command_is_refused(results):
    (results / "mva" / "runs" / "mva2-query-cls8" / "command.txt").unlink()
    with pytest.raises(TableError, match="runs/mva2-query-cls8: no command.txt"):
        check(results)


def test_an_unknown_or_missing_table_is_refused(results):
    readme = results / "scale" / "README.md"
    text = readme.read_text()
    readme.write_text(text.replace("<!-- table: scale/stores -->", "<!-- table: scale/nothing -->"))
    with pytest.raises(TableError, match="scale/nothing is not in the registry"):
        check(results)
    readme.write_text(text.replace("<!-- table: scale/stores -->", "<!-- table -->"))
    with pytest.raises(TableError):
        check(results)


def test_every_registered_table_is_marked_once():
    marked = [line.split()[2] for p in RESULTS.glob("*/README.md") for line in p.read_text().splitlines()
              if line.startswith("<!-- table: ")]
    assert sorted(marked) == sorted(TABLES)
