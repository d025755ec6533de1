"""MessageLookup: finding single messages in the CommitLog, by physical offset, by offset
message id and by key (``lookMessageByOffset``, ``selectOneMessageByOffset``,
``viewMessageById``, ``queryMessage``), as a part of DefaultMessageStore.

Offsets come from clients (VIEW_MESSAGE_BY_ID, END_TRANSACTION, send-back), so each is checked
to start a whole message before its bytes are read or handed out.
"""

from __future__ import annotations

import time

from storage.commitlog import CommitLog
from storage.config import MessageStoreConfig
from storage.errors import OffsetOutOfRangeError
from storage.index_file import IndexService
from storage.message_id import decode_message_id
from storage.record import MessageRecord, decode_record, message_size_from_head
from storage.results import QueryMessageResult


class MessageLookup:
    """The store's single-message reads (mixed into DefaultMessageStore, which sets these)."""

    commit_log: CommitLog
    config: MessageStoreConfig
    index_service: IndexService

    def _record_size_at(self, commit_log_offset: int) -> int:
        """The size of the message record at ``commit_log_offset``. Offsets come from clients
        (VIEW_MESSAGE_BY_ID, END_TRANSACTION, send-back): one inside a record must not make us
        read its bytes as a length, hundreds of MiB of the log into a response."""
        if commit_log_offset < 0:
            raise OffsetOutOfRangeError(f"offset {commit_log_offset} is negative")
        head = self.commit_log.get_message(commit_log_offset, 8)
        return message_size_from_head(head, commit_log_offset, self.config.max_message_size)

    def look_message_by_offset(self, commit_log_offset: int, size: int | None = None) -> MessageRecord:
        """Decode the record at a physical offset (raises OffsetOutOfRangeError / RecordError)."""
        if size is None:
            size = self._record_size_at(commit_log_offset)
        data = self.commit_log.get_message(commit_log_offset, size)
        record = decode_record(data, 0, base_offset=commit_log_offset)
        if not isinstance(record, MessageRecord):
            raise OffsetOutOfRangeError(f"no message starts at offset {commit_log_offset}")
        return record

    def select_one_message_by_offset(self, commit_log_offset: int) -> bytes:
        """The raw record at a physical offset (VIEW_MESSAGE_BY_ID's body), checked to be one
        whole message with its CRC."""
        size = self._record_size_at(commit_log_offset)
        data = self.commit_log.get_message(commit_log_offset, size)
        if not isinstance(decode_record(data, 0, base_offset=commit_log_offset), MessageRecord):
            raise OffsetOutOfRangeError(f"no message starts at offset {commit_log_offset}")
        return data

    def view_message_by_id(self, msg_id: str) -> MessageRecord:
        """Look a message up by its offset msgId."""
        return self.look_message_by_offset(decode_message_id(msg_id).offset)

    def query_message(
        self, topic: str, key: str, max_num: int, begin: int = 0, end: int | None = None
    ) -> QueryMessageResult:
        """Messages whose KEYS or UNIQ_KEY is ``key``, stored in [begin, end] (ms)."""
        end = int(time.time() * 1000) + 1000 if end is None else end
        offsets, last_ts, last_phy = self.index_service.query_offset(topic, key, max_num, begin, end)
        found = []
        max_phy = self.commit_log.get_max_offset()
        for phy in dict.fromkeys(offsets):  # a key indexed twice (a retried dispatch) counts once
            if phy >= max_phy:
                continue
            try:
                record = self.look_message_by_offset(phy)
            except Exception:  # removed or cut since indexing: not a match any more
                continue
            keys = (record.keys or "").split(" ")
            if record.topic == topic and (key in keys or record.uniq_key == key):
                found.append(self.commit_log.get_message(phy, record.total_size))
        return QueryMessageResult(found, last_ts, last_phy)
