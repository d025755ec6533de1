"""Store files that cannot be deleted yet (storage/owed_deletions.py): a reader holds one, or
(Windows) another process has it open. They leave their queue at once, are never read again
and are deleted as soon as nothing keeps them; a new file never takes a name still owed."""

from __future__ import annotations

import os

import pytest

from storage.errors import StoreError
from storage.mapped_file import offset_to_file_name
from storage.mapped_file_queue import MappedFileQueue
from storage.owed_deletions import OWED

SIZE = 4096


def _filled(tmp_path, files: int) -> MappedFileQueue:
    queue = MappedFileQueue(str(tmp_path), SIZE)
    for _ in range(files):
        queue.get_last_mapped_file_or_create(0).append(b"\x07" * SIZE)
    return queue


def _in_use_elsewhere(monkeypatch, paths: set[str]) -> None:
    """Windows' refusal to delete a file another process has open, for ``paths``."""
    real_remove = os.remove

    def remove(path):
        if str(path) in paths:
            exc = PermissionError(13, "in use", path)
            exc.winerror = 32  # (ERROR_SHARING_VIOLATION)
            raise exc
        real_remove(path)

    monkeypatch.setattr(os, "remove", remove)


def test_a_cut_file_held_by_a_reader_leaves_the_log_and_its_name_is_not_reused_until_deleted(
        tmp_path, monkeypatch):
    from storage import owed_deletions

    monkeypatch.setattr(owed_deletions, "FORCIBLY_MS", 600_000)  # however slow this machine is
    monkeypatch.setattr("storage.mapped_file_queue.FORCIBLY_MS", 600_000)
    queue = _filled(tmp_path, 3)
    held = queue.mapped_files[2]
    assert held.hold()
    queue.truncate_dirty_files(SIZE + 100)  # the reader keeps the third file, past the cut
    assert [f.file_from_offset for f in queue] == [0, SIZE]
    assert (tmp_path / offset_to_file_name(2 * SIZE)).exists()
    queue.get_last_mapped_file_or_create(0).append(b"\x01" * (SIZE - 100))  # the second is full
    with pytest.raises(StoreError, match="still held"):  # stale records under a new file: never
        queue.get_last_mapped_file_or_create(0)
    held.release()  # the reader lets go: the next round deletes it, and the log goes on
    fresh = queue.get_last_mapped_file_or_create(0)
    assert OWED.under(str(tmp_path)) == []
    assert fresh.file_from_offset == 2 * SIZE
    assert bytes(fresh.mm[:SIZE]) == bytes(SIZE)
    queue.shutdown()


def test_a_file_another_process_keeps_open_is_emptied_and_deleted_on_a_later_round(tmp_path,
                                                                                  monkeypatch):
    queue = _filled(tmp_path, 3)
    first = str(tmp_path / offset_to_file_name(0))
    _in_use_elsewhere(monkeypatch, {first})
    assert queue.delete_expired_file_by_time(0, 0, 1000, clean_immediately=True) == 2
    # Out of the log at once (readers and the minimum offset move on), emptied on disk.
    assert [f.file_from_offset for f in queue] == [2 * SIZE]
    assert queue.get_min_offset() == 2 * SIZE
    assert os.path.getsize(first) == 0
    assert OWED.under(str(tmp_path)) == [first]
    queue.delete_expired_file_by_time(0, 0, 1000, clean_immediately=True)  # refused again
    assert OWED.under(str(tmp_path)) == [first]
    monkeypatch.undo()  # the other process lets go
    queue.delete_expired_file_by_time(0, 0, 1000, clean_immediately=True)
    assert OWED.under(str(tmp_path)) == []
    assert not os.path.exists(first)
    queue.shutdown()


def test_an_emptied_file_left_from_a_refused_deletion_is_deleted_when_the_store_loads(tmp_path,
                                                                                     monkeypatch):
    queue = _filled(tmp_path, 2)
    queue.shutdown()
    (tmp_path / offset_to_file_name(2 * SIZE)).write_bytes(b"")  # what a refused deletion left
    again = MappedFileQueue(str(tmp_path), SIZE)
    again.load()
    assert [f.file_from_offset for f in again] == [0, SIZE]
    assert not (tmp_path / offset_to_file_name(2 * SIZE)).exists()
    again.shutdown()
    (tmp_path / offset_to_file_name(2 * SIZE)).write_bytes(b"")
    _in_use_elsewhere(monkeypatch, {str(tmp_path / offset_to_file_name(2 * SIZE))})
    third = MappedFileQueue(str(tmp_path), SIZE)
    third.load()  # still open elsewhere: skipped, and owed
    assert [f.file_from_offset for f in third] == [0, SIZE]
    assert OWED.under(str(tmp_path)) == [str(tmp_path / offset_to_file_name(2 * SIZE))]
    monkeypatch.undo()
    OWED.settle()
    assert OWED.under(str(tmp_path)) == []
    third.shutdown()


def test_an_empty_file_between_files_with_data_is_damage_and_refused(tmp_path):
    queue = _filled(tmp_path, 3)
    queue.shutdown()
    (tmp_path / offset_to_file_name(SIZE)).write_bytes(b"")  # a hole in the log
    with pytest.raises(StoreError, match="0 bytes"):
        MappedFileQueue(str(tmp_path), SIZE).load()
    assert (tmp_path / offset_to_file_name(SIZE)).exists()  # nothing deleted on the way


def test_a_deleted_queue_owes_the_files_a_reader_holds(tmp_path):
    queue = MappedFileQueue(str(tmp_path), SIZE)
    queue.get_last_mapped_file_or_create(0).append(b"\x07" * 100)
    held = queue.mapped_files[0]
    assert held.hold()
    queue.destroy()  # a deleted topic: its queue goes, the file a reader holds stays a moment
    assert OWED.under(str(tmp_path)) == [held.path]
    held.release()
    OWED.settle()
    assert OWED.under(str(tmp_path)) == []
    assert not os.path.exists(held.path)


def test_store_readers_outside_the_broker_pass_over_emptied_files(tmp_path):
    from export.store_reader import _segments
    from storage.inspector import segment_files

    for offset, content in ((0, b""), (SIZE, b"\x07" * SIZE), (2 * SIZE, b"\x07" * SIZE)):
        (tmp_path / offset_to_file_name(offset)).write_bytes(content)  # the first: emptied
    assert [offset for offset, _ in _segments(str(tmp_path))] == [SIZE, 2 * SIZE]
    assert [os.path.basename(p) for p in segment_files(str(tmp_path))] == [
        offset_to_file_name(SIZE), offset_to_file_name(2 * SIZE)]
