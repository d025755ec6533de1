"""What dispatch builds from each CommitLog record: its ConsumeQueue unit and its index keys
(RocketMQ's ``CommitLogDispatcherBuildConsumeQueue`` and ``CommitLogDispatcherBuildIndex``).

``ReputMessageService`` (dispatch.py) hands every record to these, as a DispatchRequest; a
plain record the put path has just appended goes through both in one call
(``dispatch_plain``), and a run of them (a batch's records, a burst of sends) in one call for
all (``dispatch_plain_run``). Both skip what they already hold, so a record dispatched again
after a failure or a restart is not doubled.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from common import speedups
from storage.dispatch import TIMED_TOPICS, DispatchRequest
from storage.dispatch_runs import consume_queue_units_into, index_keys_into
from storage.message import (
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    dispatch_properties,
    java_hash,
)

if TYPE_CHECKING:
    from storage.message_store import DefaultMessageStore

_dispatch_plain_one = (None if speedups.store_core is None
                       else speedups.store_core.dispatch_plain_one)
_dispatch_units_each = (None if speedups.store_core is None
                        else speedups.store_core.dispatch_units_each)


class Dispatchers:
    """The store's two dispatchers, over its ConsumeQueues and its index."""

    def __init__(self, store: DefaultMessageStore) -> None:
        self.store = store

    def build_consume_queue(self, request: DispatchRequest) -> None:
        if request.sys_flag & 0xC not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            return  # prepared and rolled-back records take no queue slot
        queue = self.store.find_consume_queue(request.topic, request.queue_id)
        if queue is not None:  # always, with create=True
            queue.put_message_position_info(request.commit_log_offset, request.msg_size,
                                            request.tags_code, request.consume_queue_offset)

    def build_index(self, request: DispatchRequest) -> None:
        if request.sys_flag & 0xC == TRANSACTION_ROLLBACK_TYPE:
            return
        if request.uniq_key or request.keys:
            self.store.index_service.build_index(request.topic, request.keys, request.uniq_key,
                                                 request.commit_log_offset,
                                                 request.store_timestamp)

    def dispatch_plain(self, entry: tuple) -> bool:
        """Both dispatchers for an entry the put path appended (see ``CommitLog.appended``),
        in one call and without a DispatchRequest, when it is a plain record: not a
        transaction's prepare, commit or rollback, not parked in the delay or timer topic
        (their tags code is a time). False, having done nothing, for the others.

        Compiled (common/_dispatch_one.c) for the common case, the next unit and keys of the
        last files; it leaves anything else to :meth:`dispatch_plain_pure`."""
        if _dispatch_plain_one is not None:
            store = self.store
            done = _dispatch_plain_one(
                entry, store.consume_queue_table,
                store.index_service if store.config.message_index_enable else None, TIMED_TOPICS)
            if done is not None:
                return done
        return self.dispatch_plain_pure(entry)

    def dispatch_plain_pure(self, entry: tuple) -> bool:
        """:meth:`dispatch_plain` in Python, every case."""
        offset, size, store_ts, queue_offset, topic, queue_id, sys_flag, _, props = entry
        if sys_flag & 0xC or topic in TIMED_TOPICS:
            return False
        store = self.store
        tags, keys, uniq_key, _ = dispatch_properties(props)
        queues = store.consume_queue_table.get(topic)
        queue = queues.get(queue_id) if queues is not None else None
        if queue is None:
            queue = store.find_consume_queue(topic, queue_id)
            assert queue is not None  # create=True: made when missing
        queue.put_message_position_info(offset, size, java_hash(tags) if tags else 0,
                                        queue_offset)
        if (uniq_key or keys) and store.config.message_index_enable:
            store.index_service.build_index(topic, keys, uniq_key, offset, store_ts)
        return True

    def dispatch_plain_run(self, run: list, count: int, one_queue: bool) -> bool:
        """Both dispatchers for ``run[:count]``, plain records of one topic in log order
        (``plain_run`` of storage/dispatch_runs.py; ``one_queue`` when all are of the first
        one's queue, as a batch's are): each queue's units in one write and all the keys in one
        call where they fit, the rest one by one as :meth:`dispatch_plain` would. False, having
        done nothing, for a topic whose tags code is a time."""
        topic = run[0][4]
        if topic in TIMED_TOPICS:
            return False
        if one_queue:
            self._put_units(topic, run[0][5], run, count)
        elif _dispatch_units_each is not None:
            # A burst of sends to several queues (32 senders to a topic of many queues: as
            # many queues as records): each unit into its queue in one call for all, and
            # those it leaves the Python way, in log order.
            for index in _dispatch_units_each(run, count, self.store.consume_queue_table):
                self._put_unit(run[index])
        else:  # each queue's records, in log order
            groups: dict[int, list] = {}
            for entry in run[:count]:
                group = groups.get(entry[5])
                if group is None:
                    groups[entry[5]] = [entry]
                else:
                    group.append(entry)
            for queue_id, entries in groups.items():
                self._put_units(topic, queue_id, entries, len(entries))
        store = self.store
        if store.config.message_index_enable:
            index = store.index_service
            done = index.build_index_run(topic, run, count, index_keys_into)
            for offset, _, store_ts, *_, props in run[done:count]:
                _, keys, uniq_key, _ = dispatch_properties(props)
                if uniq_key or keys:
                    index.build_index(topic, keys, uniq_key, offset, store_ts)
        return True

    def _put_units(self, topic: str, queue_id: int, entries: list, count: int) -> None:
        store = self.store
        queues = store.consume_queue_table.get(topic)
        queue = queues.get(queue_id) if queues is not None else None
        if queue is None:
            queue = store.find_consume_queue(topic, queue_id)
            assert queue is not None  # create=True: made when missing
        if not queue.put_run(entries, count, consume_queue_units_into):
            for entry in entries[:count]:
                self._put_unit(entry, queue)

    def _put_unit(self, entry: tuple, queue=None) -> None:
        """One entry's unit, the Python way, into ``queue`` (found, or made, when not given)."""
        offset, size, _, queue_offset, topic, queue_id, *_, props = entry
        if queue is None:
            queue = self.store.find_consume_queue(topic, queue_id)
            assert queue is not None  # create=True: made when missing
        tags = dispatch_properties(props)[0]
        queue.put_message_position_info(offset, size, java_hash(tags) if tags else 0,
                                        queue_offset)

    def already_dispatched(self, topic: str, queue_id: int, offset: int, size: int) -> bool:
        """Whether every view already holds the record (recovery skips it undecoded)."""
        store = self.store
        queue = store.consume_queue_table.get(topic, {}).get(queue_id)
        if queue is None or offset + size > queue.max_physic_offset:
            return False
        return (not store.config.message_index_enable
                or offset <= store.index_service.last_indexed_offset)
