"""One writer per checkpoint, whatever name it is given: the lock is taken on the file a path resolves to, and
stays in place (removing it while held let a later process lock a fresh file beside a still-running one)."""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from attnroute.read.ground.checkpoint import CheckpointMismatch, exclusive


def _hold(path: str, ready, release) -> None:
    with exclusive(Path(path)):
        ready.set()
        release.wait(30)


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of tmp_path / 'ck.npz' until released."""
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(tmp_path / "ck.npz"), ready, release))
    proc.start()
    assert ready.wait(30)
    yield tmp_path / "ck.npz"
    release.set()
    proc.join(30)


def test_a_second_writer_by_the_same_name_is_refused_in_one_line(holder):
    with pytest.raises(CheckpointMismatch) as e, exclusive(holder):
        pass
    assert "in use by another attnroute process" in str(e.value) and "\n" not in str(e.value)


def test_a_second_writer_by_another_name_of_the_same_file_is_refused(holder, tmp_path):
    holder.write_bytes(b"")
    alias = tmp_path / "alias.npz"
    os.symlink(holder, alias)
    relative = os.path.relpath(holder, os.getcwd())
    for name in (alias, Path(relative)):
        with pytest.raises(CheckpointMismatch), exclusive(name):
            pass


def test_a_lock_removed_as_it_was_locked_is_taken_again_not_shared(tmp_path, monkeypatch):
    """The holder removes the lock file as it leaves; a process that opened the old file just before must not
    count that as the lock (a third process would lock the new file beside it): it retries on the new one."""
    import attnroute.read.ground.checkpoint as ck_module

    ck, lock = tmp_path / "ck.npz", tmp_path / ".ck.npz.lock"
    real_flock, swapped = ck_module.fcntl.flock, []

    def flock(fd, op):  # the first lock taken: its file is removed and replaced right then (another holder left)
        real_flock(fd, op)
        if not swapped and op & ck_module.fcntl.LOCK_EX:
            swapped.append(os.fstat(fd).st_ino)
            lock.unlink()
            lock.write_bytes(b"")

    monkeypatch.setattr(ck_module.fcntl, "flock", flock)
    with exclusive(ck):
        assert swapped and lock.stat().st_ino != swapped[0]  # the lock file was replaced as it was locked
        other = os.open(lock, os.O_RDWR)  # a third process on the file the path names now: refused, not let in
        try:
            with pytest.raises(BlockingIOError):
                real_flock(other, ck_module.fcntl.LOCK_EX | ck_module.fcntl.LOCK_NB)
        finally:
            os.close(other)
    assert not lock.exists()  # and removed when the run ends


def test_a_checkpoint_in_a_folder_that_does_not_exist_is_refused_naming_it(tmp_path):
    with pytest.raises(CheckpointMismatch) as e, exclusive(tmp_path / "missing" / "ck.npz"):
        pass
    assert "lock" in str(e.value) and e.value.field == "checkpoint"
