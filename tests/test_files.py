"""demo.core.files.write_atomic: readers see the old file or the new one, never a mix."""

import threading

import pytest

from demo.core.files import write_atomic


def test_it_writes_text_and_bytes_and_makes_the_folder(tmp_path):
    assert write_atomic(tmp_path / "a" / "b.json", "{}\n").read_text() == "{}\n"
    assert write_atomic(tmp_path / "c.bin", b"\x00\x01").read_bytes() == b"\x00\x01"


def test_writers_in_threads_each_leave_a_whole_file_and_no_temporary(tmp_path):
    path = tmp_path / "shared.txt"
    bodies = [str(i) * 100_000 for i in range(8)]
    threads = [threading.Thread(target=write_atomic, args=(path, body)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_text() in bodies
    assert [p.name for p in tmp_path.iterdir()] == ["shared.txt"]


def test_a_failed_write_keeps_the_old_file_and_removes_its_temporary(tmp_path):
    path = write_atomic(tmp_path / "x.txt", "old")
    with pytest.raises(TypeError):
        write_atomic(path, 42)  # neither text nor bytes
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["x.txt"]


def test_a_killed_writers_temporary_is_cleaned_at_the_next_write_and_a_live_ones_kept(tmp_path):
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()  # a pid that has just exited
    litter = tmp_path / f"s[1].json.{dead}.140.tmp"  # a name with glob characters too
    live = tmp_path / f"s[1].json.{os.getpid()}.99.tmp"  # this process: a write in another thread
    other = tmp_path / f"t.json.{dead}.140.tmp"  # another file's: not this write's business
    for p in (litter, live, other):
        p.write_text("half")
    write_atomic(tmp_path / "s[1].json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["s[1].json", live.name, other.name])
