"""`common.portable`: the checkpoint entry and the exported folder, written once and refused in one line."""

import json
import os

import pytest

from common.portable import (CONFIG, FORMAT, WEIGHTS, Portable, PortableError, check_package, from_entry,
                             materialized, portable_entry, read_folder, write_folder)


def _portable(files=None):
    return from_entry(portable_entry("qds", {"layers": 2}, files or {"vocab.txt": b"a\nb\n"}), "ckpt")


def _write(folder, portable):
    def weights(path):  # private, as safetensors writes its file
        path.write_bytes(b"weights")
        os.chmod(path, 0o600)

    write_folder(folder, portable, weights, "# card\n")


def test_a_folder_round_trips_its_config_and_files(tmp_path):
    portable = _portable()
    _write(tmp_path / "out", portable)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["README.md", CONFIG, WEIGHTS, "vocab.txt"]
    again = read_folder(tmp_path / "out")
    assert (again.package, again.config, again.files) == ("qds", {"layers": 2}, {"vocab.txt": b"a\nb\n"})
    assert json.loads((tmp_path / "out" / CONFIG).read_text())["format"] == FORMAT
    mask = os.umask(0o022)
    os.umask(mask)
    assert {oct(p.stat().st_mode & 0o777) for p in (tmp_path / "out").iterdir()} == {oct(0o666 & ~mask)}
    assert oct((tmp_path / "out").stat().st_mode & 0o777) == oct(0o777 & ~mask)


def test_an_existing_folder_is_refused_and_a_failed_write_leaves_nothing(tmp_path):
    (tmp_path / "out").mkdir()
    with pytest.raises(FileExistsError):
        _write(tmp_path / "out", _portable())

    def fail(path):
        raise OSError("disk full")

    with pytest.raises(OSError):
        write_folder(tmp_path / "new", _portable(), fail, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folder left behind


@pytest.mark.parametrize("edit, says", [
    (lambda config: {**config, "format": FORMAT + 1}, f"in format {FORMAT + 1}; this is"),
    (lambda config: {"something": "else"}, "is not an exported ranker"),
])
def test_a_folder_of_another_format_or_none_is_refused_in_one_line(tmp_path, edit, says):
    _write(tmp_path / "out", _portable())
    path = tmp_path / "out" / CONFIG
    path.write_text(json.dumps(edit(json.loads(path.read_text()))))
    with pytest.raises(PortableError) as error:
        read_folder(tmp_path / "out")
    assert says in str(error.value) and "\n" not in str(error.value) and str(tmp_path / "out") in str(error.value)


def test_another_package_is_refused_naming_both():
    with pytest.raises(PortableError, match="folder holds a qds ranker, not a mva one"):
        check_package(_portable(), "mva", "folder")


def test_files_are_materialized_once_by_their_contents(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path))
    first = materialized({"vocab.txt": b"a\n"})
    assert first == materialized({"vocab.txt": b"a\n"}) and (first / "vocab.txt").read_bytes() == b"a\n"
    assert materialized({"vocab.txt": b"b\n"}) != first


def test_a_config_json_cannot_hold_is_refused_when_the_checkpoint_is_saved():
    with pytest.raises(TypeError):
        portable_entry("qds", {"f": object()}, {})
    assert isinstance(_portable(), Portable)
