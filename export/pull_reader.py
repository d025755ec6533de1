"""Reading a queue range from a broker over PULL_MESSAGE, as a tool does: the TOOLS_CONSUMER
group, no commit-offset flag, so no consumer's offsets move.

Executors run this in Spark's Python workers, one range at a time: a plain blocking socket and
the sans-I/O codec are all it needs (no event loop to start per partition).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

from cluster.client.pull import TOOLS_GROUP
from cluster.remoting.codec import FrameDecoder, RemotingCommand, encode, request
from cluster.remoting.codes import RequestCode, ResponseCode
from export.decode import RowBuilder
from export.errors import DataLossError, ExportError
from export.options import SourceOptions
from export.planner import QueueRange


class BlockingRemoting:
    def __init__(self, address: str, timeout: float = 30.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.decoder = FrameDecoder()

    def close(self) -> None:
        self.sock.close()

    def invoke(self, command: RemotingCommand) -> RemotingCommand:
        self.sock.sendall(encode(command))
        while True:
            answer = self.decoder.next_command()
            if answer is not None:
                if answer.is_response and answer.opaque == command.opaque:
                    return answer
                continue  # a stray request from the broker: tools ignore them
            data = self.sock.recv(1 << 20)
            if not data:
                raise ExportError("the broker closed the connection")
            self.decoder.feed(data)


def read_range(rng: QueueRange, options: SourceOptions) -> Iterator:
    """Arrow batches of the messages of ``rng`` the filters keep."""
    builder = RowBuilder(rng.broker_name, options)
    remoting = BlockingRemoting(rng.address)
    try:
        offset = rng.start
        while offset < rng.end:
            answer = remoting.invoke(request(RequestCode.PULL_MESSAGE, {
                "consumerGroup": TOOLS_GROUP, "topic": rng.topic, "queueId": rng.queue_id,
                "queueOffset": offset, "maxMsgNums": min(options.pull_batch_size, rng.end - offset),
                "sysFlag": 0x4, "commitOffset": 0, "suspendTimeoutMillis": 0,
                "subscription": options.tag_expression, "subVersion": 0, "expressionType": "TAG"}))
            next_offset = int(answer.field("nextBeginOffset") or offset)
            if answer.code == ResponseCode.SUCCESS:
                body = answer.body
                pos = 0
                while pos < len(body):
                    size = builder.add_raw(body, pos, rng.end)
                    if not size:
                        break
                    pos += size
                if builder.full():
                    yield builder.take_batch()
            elif answer.code == ResponseCode.PULL_OFFSET_MOVED:
                if options.fail_on_data_loss:
                    raise DataLossError(f"{rng.topic} {rng.broker_name} queue {rng.queue_id}: offset "
                                        f"{offset} is gone (moved to {next_offset})")
            elif answer.code == ResponseCode.PULL_NOT_FOUND and next_offset <= offset:
                break  # nothing more before the end (the queue shrank?)
            elif answer.code not in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
                raise ExportError(f"{rng.broker_name} answered a pull of {rng.topic} queue "
                                  f"{rng.queue_id} with code {answer.code}: {answer.remark}")
            if next_offset <= offset:
                raise ExportError(f"{rng.broker_name} did not advance past offset {offset} of "
                                  f"{rng.topic} queue {rng.queue_id}")
            offset = next_offset
    finally:
        remoting.close()
    if len(builder):
        yield builder.take_batch()


def read_store_range(rng: QueueRange, options: SourceOptions) -> Iterator:
    """Arrow batches of ``rng`` read from the store directory ``options.path``."""
    from export.store_reader import CommitLogReader, StoreQueue

    builder = RowBuilder(rng.broker_name, options)
    log = CommitLogReader(options.path)
    try:
        for _logical, offset, size in StoreQueue(options.path, rng.topic, rng.queue_id).units(
                rng.start, rng.end):
            base, view = log.view_holding(offset)
            if builder.add_raw(view, offset - base) != size:
                raise DataLossError(f"the CommitLog holds no {size}-byte record at offset {offset}")
            if builder.full():
                yield builder.take_batch()
    finally:
        log.close()
    if len(builder):
        yield builder.take_batch()
