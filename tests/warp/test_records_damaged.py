"""Record files as runs leave them (warp/records.py): cut short by a killed writer, holding bytes
that are no text or lines that are no records. What can be read is read; the rest is a clear
ConfigError naming the file (`s3kv analyze` prints it as a usage error), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from s3kv.cli import main
from s3kv.errors import ConfigError
from warp.records import Record, RecordWriter, read_records, write_records

NS = 1_000_000


def _record(i: int) -> Record:
    return Record(op="PUT", thread=i % 4, client_id="c1", endpoint="http://h:9000",
                  file=f"warp/run/c1/t{i % 4:03d}/{i:08d}.obj", size=512 * 1024,
                  start_ns=1_700_000_000 * 10**9 + i * NS, end_ns=1_700_000_000 * 10**9 + i * NS
                  + 40 * NS, first_byte_ns=0, error="")


def test_a_file_cut_short_keeps_every_block_flushed_before(tmp_path: Path) -> None:
    """A run killed mid-write leaves the frame unfinished: the blocks flushed every second
    (here every 200 records) are read, and the cut one's part is not."""
    path = tmp_path / "put.csv.zst"
    w = RecordWriter(path)
    for i in range(2000):
        w.write(_record(i))
        if i % 200 == 199:
            w.flush()
    w.flush()
    # not closed: the writer was killed; and the file is cut in the middle of its last block
    whole = path.read_bytes()
    for cut in (len(whole), len(whole) - 7, int(len(whole) * 0.6)):
        path.write_bytes(whole[:cut])
        got = read_records(path)
        assert got == [_record(i) for i in range(len(got))]
        assert len(got) >= (2000 if cut == len(whole) else 1000 if cut > len(whole) * 0.9
                            else 800), (cut, len(got))


def test_a_file_that_is_no_text_is_a_clear_error(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bin.csv"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="not a Warp record file"):
        read_records(path)
    assert main(["analyze", str(path)]) == 2
    assert f"{path}: not a Warp record file" in capsys.readouterr().err


def test_a_line_that_is_no_record_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    write_records(tmp_path / "good.csv.zst", [_record(0), _record(1)])
    lines = [ln for ln in _text(tmp_path / "good.csv.zst").splitlines(keepends=True)
             if not ln.startswith("#")]
    fields = lines[2].split("\t")
    fields[1] = "x"  # thread
    path.write_text(lines[0] + lines[1] + "\t".join(fields))
    with pytest.raises(ConfigError, match=r"bad.csv: line 3 is no record"):
        read_records(path)


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is a directory: name its record files"):
        read_records(tmp_path)


def _text(path: Path) -> str:
    import zstandard

    return zstandard.ZstdDecompressor().decompressobj().decompress(path.read_bytes()).decode()
