"""Atomic writes and tolerant decoding (common.io)."""

import logging
import os
import stat

import pytest

from common.io import atomic_write, check_encoding, read_lines


def test_atomic_write_replaces_only_on_success(tmp_path):
    target = tmp_path / "run.trec"
    with atomic_write(target) as f:
        f.write("first\n")
    assert target.read_text() == "first\n"

    with pytest.raises(RuntimeError), atomic_write(target, overwrite=True) as f:
        f.write("half-written")
        raise RuntimeError("interrupted")
    assert target.read_text() == "first\n"
    assert [p.name for p in tmp_path.iterdir()] == ["run.trec"], "temporary file left behind"


def test_atomic_write_refuses_to_overwrite(tmp_path):
    target = tmp_path / "metrics.json"
    target.write_text("{}")
    with pytest.raises(FileExistsError, match="refusing to overwrite"):
        with atomic_write(target) as f:
            f.write("new")
    assert target.read_text() == "{}"


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_atomically_written_file_gets_the_mode_of_any_new_file(tmp_path, umask):
    """mkstemp's 0600 is not kept: run.trec and metrics.json get what open() would give, 0644 under umask 022."""
    before = os.umask(umask)
    try:
        with atomic_write(tmp_path / "run.trec") as f:
            f.write("x")
        (tmp_path / "plain").write_text("x")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "run.trec").stat().st_mode) == 0o666 & ~umask
    assert stat.S_IMODE((tmp_path / "run.trec").stat().st_mode) == stat.S_IMODE((tmp_path / "plain").stat().st_mode)


def test_read_lines_falls_back_per_line_and_warns_once(tmp_path, caplog):
    path = tmp_path / "topics.tsv"
    path.write_bytes(b"1\tcaf\xc3\xa9\n2\tna\xefve\n3\tse\xf1or\n")
    with caplog.at_level(logging.WARNING):
        lines = list(read_lines(path))
    assert lines == [(1, "1\tcafé"), (2, "2\tnaïve"), (3, "3\tseñor")]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and f"{path}:2:" in warnings[0] and "cp1252" in warnings[0]


def test_read_lines_strips_bom_and_crlf(tmp_path):
    path = tmp_path / "x.txt"
    path.write_bytes(b"\xef\xbb\xbfa\r\nb\n")
    assert list(read_lines(path)) == [(1, "a"), (2, "b")]


def test_unknown_fallback_encoding_is_named(tmp_path):
    with pytest.raises(ValueError, match="unknown text encoding 'klingon-8'"):
        check_encoding("klingon-8")
    (tmp_path / "x").write_text("a\n")
    with pytest.raises(ValueError, match="klingon-8"):
        list(read_lines(tmp_path / "x", fallback="klingon-8"))
