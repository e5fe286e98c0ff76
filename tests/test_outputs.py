"""Outputs that are not a plain path to a regular file (issue 37, section 2): a symbolic
link is written through to its target, a FIFO, a character device or a unix socket is
written in place, anything else is refused with exit 2 before the analysis runs.

We run as root in CI, the case where renaming over ``/dev/null`` would succeed: the
device tests check it is still the same device afterwards."""

from __future__ import annotations

import datetime as dt
import os
import socket
import stat
import tempfile
import threading
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from analyzer import outputs
from analyzer.analysis import history
from analyzer.cli import main
from analyzer.errors import EnvironmentProblem, InputProblem
from tracebuilder import deployment, request, round_row, step, write_traces

TEXT = "# report\n\nspeedup 1.25×\n" + "x" * 200_000 + "\n"   # bigger than a pipe's buffer
DATA = TEXT.encode("utf-8")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture
def tiny(tmp_path):
    """An unpartitioned trace: one deployment, one request, two rounds."""
    return write_traces(tmp_path / "tiny", deployments=[deployment("a")], requests=[request("a", "r1")],
                        steps=[step("a", 1), step("a", 2)],
                        rounds=[round_row("a", "r1", 0, 3, 2, step_id=1), round_row("a", "r1", 1, 3, 1, step_id=2)])


def day_rows() -> pl.DataFrame:
    """One history row for 2026-11-28."""
    row = dict.fromkeys(history.HISTORY_SCHEMA)
    row.update(date=dt.date(2026, 11, 28), deployment_id="a", method="eagle", num_rounds=2, speedup=1.25)
    return pl.DataFrame([row], schema=history.HISTORY_SCHEMA)


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Reader(threading.Thread):
    """Reads a FIFO to its end, as ``cat fifo`` would."""

    def __init__(self, fifo: Path):
        super().__init__(daemon=True)
        self.fifo = fifo
        self.received = b""

    def run(self) -> None:
        with open(self.fifo, "rb") as f:
            self.received = f.read()

    def finish(self) -> bytes:
        self.join(timeout=60)
        if self.is_alive():     # nothing was written: let the reader's open return
            os.close(os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK))
            self.join(timeout=10)
        return self.received


class Listener(threading.Thread):
    """Accepts one connection on a unix socket and reads it to its end."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        self.server.listen(1)
        self.server.settimeout(60)
        self.received = b""

    def run(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            while chunk := conn.recv(65536):
                self.received += chunk

    def finish(self) -> bytes:
        self.join(timeout=60)
        self.server.close()
        return self.received


@pytest.fixture
def short_dir():
    """A folder with a short path: a unix socket's path must fit in 108 bytes."""
    with tempfile.TemporaryDirectory(dir="/tmp", prefix="so") as name:
        yield Path(name)


# ----------------------------------------------------------------- symbolic links


@pytest.mark.parametrize("chain", [1, 3])
def test_a_symlink_is_written_through_to_its_target_and_stays_a_link(tmp_path, chain):
    real = tmp_path / "real" / "report.md"
    real.parent.mkdir()
    real.write_text("the old report\n")
    links = [tmp_path / f"link{i}.md" for i in range(chain)]
    links[-1].symlink_to(real)
    for link, to in zip(links, links[1:]):
        link.symlink_to(to.name)            # relative: taken from the link's folder
    outputs.check_output(links[0])
    outputs.write_output(links[0], TEXT)
    assert real.read_bytes() == DATA
    assert all(link.is_symlink() for link in links)
    assert os.readlink(links[-1]) == str(real)
    assert outputs.output_target(links[0]) == real
    # the temporary file was made (and renamed) in the target's folder, none is left
    assert sorted(p.name for p in real.parent.iterdir()) == ["report.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["real", *(link.name for link in links)])


def test_a_dangling_symlink_creates_its_target_when_its_folder_exists(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to("data/out.json")
    (tmp_path / "data").mkdir()
    outputs.check_output(link)
    outputs.write_output(link, TEXT)
    assert link.is_symlink() and (tmp_path / "data" / "out.json").read_bytes() == DATA
    assert stat.S_IMODE((tmp_path / "data" / "out.json").stat().st_mode) == 0o666 & ~umask()


def test_a_dangling_symlink_into_a_missing_folder_is_refused_even_where_folders_are_created(tmp_path):
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "gone" / "out.json")
    # specan creates the folders of the path it was given, never those a link points into
    with pytest.raises(EnvironmentProblem) as err:
        outputs.check_output(link, folders_created=True)
    assert str(err.value) == f"cannot write {link}: the folder {tmp_path / 'gone'} does not exist"
    assert err.value.exit_code == 3


def test_a_symlink_loop_is_refused_with_exit_2(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(InputProblem) as err:
        outputs.check_output(tmp_path / "a")
    assert err.value.exit_code == 2
    assert str(err.value) == (f"cannot write {tmp_path / 'a'}: its symbolic links form a loop "
                              f"(or a chain of more than {outputs.MAX_LINKS})")


# ----------------------------------------------------------------- written in place


def test_a_fifo_is_written_in_place_and_its_reader_gets_the_whole_text(tmp_path):
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    outputs.check_output(fifo)
    reader = Reader(fifo)
    reader.start()
    outputs.write_output(fifo, TEXT)
    assert reader.finish() == DATA
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.fifo"]   # nothing written aside


def test_a_fifo_reached_through_a_symlink_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "report.md"
    link.symlink_to("pipe")
    reader = Reader(fifo)
    reader.start()
    outputs.write_output(link, TEXT)
    assert reader.finish() == DATA
    assert link.is_symlink() and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_dev_null_is_written_and_stays_the_null_device():
    before = os.lstat("/dev/null")
    assert stat.S_ISCHR(before.st_mode)
    outputs.check_output("/dev/null")
    outputs.write_output("/dev/null", TEXT)
    after = os.lstat("/dev/null")
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev, after.st_mode) == (before.st_ino, before.st_rdev, before.st_mode)
    assert not [p for p in os.listdir("/dev") if p.startswith(".null.")]


def test_dev_full_is_a_one_line_environment_error():
    outputs.check_output("/dev/full")
    with pytest.raises(EnvironmentProblem) as err:
        outputs.write_output("/dev/full", TEXT)
    assert str(err.value) == "cannot write /dev/full: No space left on device"
    assert err.value.exit_code == 3
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_a_unix_socket_is_connected_to_and_sent_the_text(short_dir):
    path = short_dir / "r.sock"
    listener = Listener(path)
    listener.start()
    outputs.check_output(path)
    outputs.write_output(path, TEXT)
    assert listener.finish() == DATA
    assert stat.S_ISSOCK(path.lstat().st_mode)


def test_a_unix_socket_nobody_listens_on_is_a_one_line_error(short_dir):
    path = short_dir / "r.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.close()          # the socket file stays, nothing accepts on it
    with pytest.raises(EnvironmentProblem) as err:
        outputs.write_output(path, TEXT)
    assert str(err.value) == f"cannot write {path}: Connection refused"


# ----------------------------------------------------------------- refused: exit 2


def test_a_folder_is_refused_with_exit_2_directly_and_through_a_link(tmp_path):
    folder = tmp_path / "out.json"
    folder.mkdir()
    link = tmp_path / "link.json"
    link.symlink_to(folder)
    for path, said in ((folder, "it is a folder"), (link, f"it links to {folder}, which is a folder")):
        for write in (outputs.check_output, lambda p: outputs.write_output(p, TEXT)):
            with pytest.raises(InputProblem) as err:
                write(path)
            assert err.value.exit_code == 2
            assert str(err.value) == f"cannot write {path}: {said}"
    assert link.is_symlink() and list(folder.iterdir()) == []


@pytest.fixture
def block_device(tmp_path):
    """A block device node of our own (mknod as root), never one of the machine's disks:
    were the refusal broken, nothing real would be overwritten. The device number is a
    loop device's that no loop device uses."""
    node = tmp_path / "disk"
    try:
        os.mknod(node, stat.S_IFBLK | 0o600, os.makedev(7, 254))
    except OSError as exc:
        pytest.skip(f"cannot create a block device node here ({exc.strerror}): only the folder case is tested")
    return node


def test_a_block_device_is_refused_with_exit_2_and_left_as_it_is(block_device, tmp_path):
    before = block_device.lstat()
    for write in (outputs.check_output, lambda p: outputs.write_output(p, TEXT)):
        with pytest.raises(InputProblem) as err:
            write(block_device)
        assert err.value.exit_code == 2
        assert str(err.value) == f"cannot write {block_device}: it is a block device"
    after = block_device.lstat()
    assert stat.S_ISBLK(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["disk"]


def test_written_aside_refuses_what_is_not_a_regular_file(tmp_path):
    fifo = tmp_path / "history.parquet"
    os.mkfifo(fifo)
    with pytest.raises(InputProblem) as err, outputs.written_aside(fifo):
        pass
    assert str(err.value) == f"cannot write {fifo}: it is a FIFO"
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and sorted(p.name for p in tmp_path.iterdir()) == ["history.parquet"]


# ----------------------------------------------------------------- the history


def test_a_symlinked_history_is_upserted_through_its_link_and_locked_beside_its_target(tmp_path):
    shared = tmp_path / "shared" / "history.parquet"
    shared.parent.mkdir()
    link = tmp_path / "out" / "history.parquet"
    link.parent.mkdir()
    link.symlink_to(shared)
    merged = history.upsert(link, day_rows())
    assert link.is_symlink()
    assert pl.read_parquet(shared).equals(merged) and merged.height == 1
    assert history.lock_path(link) == shared.with_name("history.parquet.lock")
    assert (shared.parent / "history.parquet.lock").exists()
    assert sorted(p.name for p in link.parent.iterdir()) == ["history.parquet"]


def test_the_nightly_refuses_a_history_that_is_a_fifo_before_the_analysis(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / "history.parquet")
    # the traces do not exist: had the analysis run first, this would be their error
    result = run("nightly", tmp_path / "no-traces", "--date", "2026-11-28", "--out", out)
    assert result.exit_code == 2
    assert one_line(result) == (f"Error: cannot write {out / 'history.parquet'}: it is a FIFO, and the history "
                                f"is read back by the next run, so it must be a regular file")
    assert sorted(p.name for p in out.iterdir()) == ["history.parquet"]


# ----------------------------------------------------------------- end to end: report -o, load --db


def test_report_into_a_fifo_gives_its_reader_the_report_a_file_gets(tiny, tmp_path):
    regular = tmp_path / "report.json"
    assert run("report", tiny, "-o", regular).exit_code == 0
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    reader = Reader(fifo)
    reader.start()
    result = run("report", tiny, "--format", "json", "-o", fifo)
    received = reader.finish()
    assert result.exit_code == 0, result.output
    assert received == regular.read_bytes() and len(received) > 1000
    assert stat.S_ISFIFO(fifo.lstat().st_mode)


def test_report_into_dev_full_exits_3_with_one_line(tiny):
    result = run("report", tiny, "-o", "/dev/full")
    assert result.exit_code == 3
    assert one_line(result) == "Error: cannot write /dev/full: No space left on device"


def test_report_into_a_block_device_exits_2_before_the_analysis(block_device, tmp_path):
    result = run("report", tmp_path / "no-traces", "-o", block_device)
    assert result.exit_code == 2
    assert one_line(result) == f"Error: cannot write {block_device}: it is a block device"


def test_load_db_into_a_fifo_or_dev_null_exits_2_before_the_analysis(tmp_path):
    fifo = tmp_path / "x.duckdb"
    os.mkfifo(fifo)
    link = tmp_path / "null.duckdb"
    link.symlink_to("/dev/null")
    for db, said in ((fifo, "it is a FIFO"), (link, "it links to /dev/null, which is a character device")):
        # the traces do not exist: had the analysis run first, this would be exit 2 for them
        result = run("load", tmp_path / "no-traces", "--db", db)
        assert result.exit_code == 2
        assert one_line(result) == f"Error: cannot write {db}: {said}, and a DuckDB database must be a regular file"
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_load_db_through_a_symlink_writes_the_target_database(tiny, tmp_path):
    target = tmp_path / "dbs" / "traces.duckdb"
    target.parent.mkdir()
    target.write_text("an old file, replaced")
    link = tmp_path / "traces.duckdb"
    link.symlink_to("dbs/traces.duckdb")
    result = run("load", tiny, "--db", link)
    assert result.exit_code == 0, result.output
    assert link.is_symlink()
    with duckdb.connect(str(target), read_only=True) as con:
        assert con.execute("select count(*) from rounds").fetchone() == (2,)
    assert sorted(p.name for p in target.parent.iterdir()) == ["traces.duckdb"]
