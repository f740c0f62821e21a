"""`common.commands.provenance`: the command line shell-quoted, the version, and the commit and changes of the checkout
the code runs from, none outside one; written once."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from common.commands import provenance
from tests.project import project_field

REPO = Path(__file__).resolve().parents[3]
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path, monkeypatch) -> Path:
    """A git checkout of one committed file, taken as the code's own."""
    folder = tmp_path / "checkout"
    folder.mkdir()
    (folder / "code.py").write_text("x = 1\n")
    for args in (["init", "-q"], ["add", "code.py"],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one"]):
        _git(folder, *args)
    monkeypatch.setattr(provenance, "CODE_ROOT", folder.resolve())
    return folder


def test_the_command_line_is_shell_quoted_and_the_version_is_pyprojects(monkeypatch):
    monkeypatch.setattr(provenance, "checkout_state", lambda: (None, None))
    record = provenance.provenance("qds.train", ["--output_dir", "a run", "--model.window", "8", "--x=it's"])
    version = project_field("version")
    assert record == {"command": "python -m qds.train --output_dir 'a run' --model.window 8 '--x=it'\"'\"'s'",
                      "version": version, "commit": None, "dirty": None}


@needs_git
def test_a_checkouts_commit_and_whether_its_tracked_files_changed(checkout):
    head = _git(checkout, "rev-parse", "HEAD")
    assert len(head) == 40 and provenance.checkout_state() == (head, False)
    (checkout / "notes.txt").write_text("untracked\n")  # as outputs/ or a cache: no change to the code
    assert provenance.checkout_state() == (head, False)
    (checkout / "code.py").write_text("x = 2\n")
    assert provenance.checkout_state() == (head, True)


@needs_git
def test_code_inside_a_checkout_but_not_its_top_is_no_checkouts(checkout, monkeypatch):
    """A wheel installed into a virtual environment that lies in some checkout: no commit."""
    site = checkout / ".venv" / "lib" / "site-packages"
    site.mkdir(parents=True)
    monkeypatch.setattr(provenance, "CODE_ROOT", site.resolve())
    assert provenance.checkout_state() == (None, None)


def test_outside_a_checkout_or_without_git_there_is_no_commit(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "CODE_ROOT", tmp_path.resolve())
    assert provenance.checkout_state() == (None, None)
    monkeypatch.setattr(provenance, "CODE_ROOT", REPO)
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    assert provenance.checkout_state() == (None, None)


def test_written_once_the_first_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "checkout_state", lambda: ("a" * 40, True))
    path = provenance.write_provenance(tmp_path, "qds.train", ["--output_dir", str(tmp_path)])
    first = json.loads(path.read_text())
    assert path == tmp_path / "provenance.json" and first["command"] == f"python -m qds.train --output_dir {tmp_path}"
    assert (first["commit"], first["dirty"]) == ("a" * 40, True)
    provenance.write_provenance(tmp_path, "qds.train", ["--output_dir", str(tmp_path), "--ckpt_path", "last"])
    assert json.loads(path.read_text()) == first  # a resumed run keeps the first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["provenance.json"]  # no temporary file left
