"""The store's filter interface over a SQL92 expression: every ConsumeQueue unit may match (a
tag hash says nothing about properties); the record's properties decide."""

from __future__ import annotations

from cluster.filter.sql92 import SqlFilter
from storage.errors import RecordError
from storage.message import string_to_properties
from storage.record import MessageRecord, decode_record


class SqlMessageFilter:
    def __init__(self, expression: str) -> None:
        self.sql = SqlFilter(expression)  # FilterSyntaxError for a malformed expression

    def is_matched_by_consume_queue(self, tags_code: int) -> bool:
        return True

    def is_matched_by_commit_log(self, record: bytes) -> bool:
        try:
            decoded = decode_record(record, check_crc=False, read_body=False)
        except RecordError:
            return False
        if not isinstance(decoded, MessageRecord):
            return False
        return self.sql.matches(string_to_properties(decoded.properties_string))
