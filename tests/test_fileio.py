"""Atomic writes: the umask decides the mode (mkstemp's 0600 did before), a failure leaves nothing behind."""
import os
import stat

import pytest

from zhner.errors import ZhnerError
from zhner.fileio import atomic_open, atomic_write_text, check_output_dir


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_honours_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        with atomic_open(tmp_path / "b.bin", "wb") as fh:
            fh.write(b"x")
    finally:
        os.umask(old)
    for name in ("a.txt", "b.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode


def test_atomic_open_failure_and_directories(tmp_path):
    with pytest.raises(RuntimeError), atomic_open(tmp_path / "c.txt") as fh:
        fh.write("half")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "d").mkdir()
    with pytest.raises(ZhnerError, match="is a directory"):
        atomic_write_text(tmp_path / "d", "x")
    (tmp_path / "f").write_text("x")
    with pytest.raises(ZhnerError, match="is not a directory"):
        check_output_dir(tmp_path / "f" / "run")
    check_output_dir(tmp_path / "new" / "run")  # not there yet: fine
    with pytest.raises(ZhnerError, match="a parent of this path is a file"):
        atomic_write_text(tmp_path / "f" / "x.txt", "x")
    with pytest.raises(ZhnerError, match="cannot write"):  # /proc takes no new files
        atomic_write_text("/proc/zhner-test.txt", "x")


def test_output_to_dev_stdout_redirected_to_a_file_writes_there(tmp_path):
    """`-o /dev/stdout > out.txt`: the output goes into the file the shell opened (at its offset), not into a new file
    renamed over it, which would have replaced the user's file (issue 46)."""
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    saved = os.dup(1)
    try:
        with open(out, "a") as redirect:
            os.dup2(redirect.fileno(), 1)
        inode = out.stat().st_ino
        for name in ("/dev/stdout", "/proc/self/fd/1", out):
            with atomic_open(name) as fh:
                fh.write(f"via {name}\n")
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    assert out.stat().st_ino == inode
    assert out.read_text() == f"before\nvia /dev/stdout\nvia /proc/self/fd/1\nvia {out}\n"
