"""Atomic writes, caches built once, and tolerant decoding (common.io)."""

import logging
import multiprocessing
import os
import signal
import stat
import time

import pytest

from common.io import atomic_write, built_once, check_encoding, read_lines


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


# --- built_once ------------------------------------------------------------------------------------------------


def _slow_build(log, seconds):
    """A build that writes the cache in two steps `seconds` apart and records itself in `log`."""

    def build(tmp):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        tmp.write_text(f"half of {os.getpid()}\n")
        time.sleep(seconds)
        with open(tmp, "a") as f:
            f.write("whole\n")

    return build


def _race(path, log, barrier, results):
    barrier.wait()  # both ask at the same moment
    results.put((os.getpid(), built_once(path, _slow_build(log, 0.5)).read_text()))


def test_two_processes_asking_at_once_build_once_and_the_other_opens_the_result(tmp_path):
    path, log = tmp_path / "cache.txt", tmp_path / "builds.log"
    context = multiprocessing.get_context("fork")
    barrier, results = context.Barrier(2), context.Queue()
    racers = [context.Process(target=_race, args=(path, log, barrier, results)) for _ in range(2)]
    for racer in racers:
        racer.start()
    answers = dict(results.get(timeout=60) for _ in racers)
    for racer in racers:
        racer.join(timeout=60)
        assert racer.exitcode == 0
    (builder,) = map(int, log.read_text().split())  # one build
    assert set(answers) == {racer.pid for racer in racers}
    assert set(answers.values()) == {f"half of {builder}\nwhole\n"}  # both read the builder's whole file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["builds.log", "cache.txt", "cache.txt.lock"]


def test_a_ready_cache_is_returned_without_building(tmp_path):
    path = tmp_path / "cache"
    path.write_text("old")
    assert built_once(path, lambda tmp: pytest.fail("rebuilt a ready cache")).read_text() == "old"


def test_a_failed_build_leaves_no_cache_and_the_next_call_builds(tmp_path):
    path = tmp_path / "folder"

    def failing(tmp):
        tmp.mkdir()
        (tmp / "part").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        built_once(path, failing)
    assert [p.name for p in tmp_path.iterdir()] == ["folder.lock"]  # no cache, no temporary folder
    built_once(path, lambda tmp: (tmp.mkdir(), (tmp / "part").write_text("whole")))
    assert (path / "part").read_text() == "whole"


def _killed_build(path, log):
    built_once(path, _slow_build(log, 600))


def test_a_killed_build_publishes_nothing_and_frees_the_lock(tmp_path):
    path, log = tmp_path / "cache.txt", tmp_path / "builds.log"
    builder = multiprocessing.get_context("fork").Process(target=_killed_build, args=(path, log))
    builder.start()
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text()):  # the build has started (and holds the lock)
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(builder.pid, signal.SIGKILL)
    builder.join(timeout=60)
    assert not path.exists()
    assert built_once(path, _slow_build(log, 0)).read_text() == f"half of {os.getpid()}\nwhole\n"
    assert len(log.read_text().split()) == 2  # the killed build, then this one


def test_a_stale_file_is_replaced_and_a_stale_folder_refused(tmp_path):
    old = tmp_path / "store"
    old.write_text("version 0")
    built_once(old, lambda tmp: tmp.write_text("version 1"), ready=lambda p: p.read_text() == "version 1")
    assert old.read_text() == "version 1"
    folder = tmp_path / "folder"
    folder.mkdir()
    with pytest.raises(FileExistsError, match=f"{folder} exists but holds no complete build; remove it"):
        built_once(folder, lambda tmp: tmp.mkdir(), ready=lambda p: (p / "done").exists())


def test_a_waiting_process_says_whom_it_waits_for(tmp_path, caplog):
    path, log = tmp_path / "cache.txt", tmp_path / "builds.log"
    builder = multiprocessing.get_context("fork").Process(target=built_once, args=(path, _slow_build(log, 1)))
    builder.start()
    while not (log.exists() and log.read_text()):
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING, logger="common.io"):
        built_once(path, lambda tmp: pytest.fail("built while another process was building"))
    builder.join(timeout=60)
    assert caplog.messages == [f"waiting for {path}: another process is building it"]


def test_a_folder_another_node_renamed_into_place_meanwhile_counts_as_built(tmp_path):
    """Two nodes whose file locks do not reach each other both build; the second one's rename onto the first's
    folder fails (a folder is not replaced), and the first's folder is the cache."""
    path = tmp_path / "table"

    def build_while_another_node_publishes(tmp):
        tmp.mkdir()
        (tmp / "done").write_text("this node")
        other = tmp_path / ".table.other-node.tmp"
        other.mkdir()
        (other / "done").write_text("the other node")
        os.rename(other, path)  # published between this node's check and its rename

    assert built_once(path, build_while_another_node_publishes, ready=lambda p: (p / "done").exists()) == path
    assert (path / "done").read_text() == "the other node"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table", "table.lock"]  # this node's build removed


def test_a_folder_of_another_node_that_is_not_ready_is_still_refused(tmp_path):
    path = tmp_path / "table"

    def build_while_another_node_leaves_a_folder(tmp):
        tmp.mkdir()
        (tmp / "done").write_text("this node")
        path.mkdir()
        (path / "unrelated").write_text("x")

    with pytest.raises(OSError):
        built_once(path, build_while_another_node_leaves_a_folder, ready=lambda p: (p / "done").exists())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table", "table.lock"]
    assert [p.name for p in path.iterdir()] == ["unrelated"]


def test_recorded_caches_say_which_were_built_and_which_found(tmp_path):
    from common.io import recorded_caches

    other_node = tmp_path / "d"

    def lose_the_race(tmp):
        tmp.mkdir()
        other_node.mkdir()
        (other_node / "done").write_text("")

    with recorded_caches() as outer:
        built_once(tmp_path / "a", lambda tmp: tmp.write_text("a"))
        with recorded_caches() as inner:
            built_once(tmp_path / "a", lambda tmp: pytest.fail("rebuilt"))
            built_once(tmp_path / "b", lambda tmp: tmp.write_text("b"))
        built_once(other_node, lose_the_race, ready=lambda p: (p / "done").exists())
    built_once(tmp_path / "c", lambda tmp: tmp.write_text("c"))  # outside both blocks
    assert [(use.path.name, use.built) for use in outer] == [("a", True), ("a", False), ("b", True), ("d", False)]
    assert [(use.path.name, use.built) for use in inner] == [("a", False), ("b", True)]
    assert all(use.seconds >= 0 for use in outer)


def test_a_file_digest_is_the_sha256_of_its_bytes_and_hashed_once_per_path_size_and_time(tmp_path, monkeypatch):
    from common.io import file_digest

    monkeypatch.setenv("EFFICIENT_RANKERS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "docs.tsv"
    path.write_bytes(b"abc")
    abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # FIPS 180-2's sha256("abc")
    assert file_digest(path) == abc
    # The same size and time at the same path and inode: the remembered digest, without reading the bytes again.
    stat = path.stat()
    with open(path, "r+b") as f:
        f.write(b"xyz")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_digest(path) == abc
    # A copy elsewhere, at a new time, is hashed: its own bytes.
    copy = tmp_path / "staged" / "docs.tsv"
    copy.parent.mkdir()
    copy.write_bytes(b"abc")
    assert file_digest(copy) == abc
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert file_digest(path) == "3608bca1e44ea6c4d268eb6db02260269892c0b42b86bbf1e77a6fa16c3c9282"  # sha256("xyz")
    assert len(list((tmp_path / "cache" / "digests").glob("docs.tsv-*.sha256"))) == 3
