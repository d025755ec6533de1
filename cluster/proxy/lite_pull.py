"""Lite pull for 5.x clients (offsets in the client's hands): PullMessage, UpdateOffset,
GetOffset and QueryOffset, each one remoting request to the queue's broker."""

from __future__ import annotations

import logging

from cluster.proxy.convert import (
    duration_ms,
    name_refusal,
    status,
    status_of_response,
    timestamp_ms,
    to_message,
)
from cluster.proxy.schema import Code, pb
from cluster.proxy.sending import REQUEST_TIMEOUT
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from storage.record import iter_records

log = logging.getLogger(__name__)


class LitePullMixin:
    """The MessagingService's lite-pull calls (see service.py for the rest)."""

    def _queue_of(self, request_) -> tuple[str, str, int] | tuple:
        """(topic, broker name, queue id) of a request's message_queue, or a refusal status."""
        queue = request_.message_queue
        topic = queue.topic.name
        refusal = name_refusal(topic=topic)
        if refusal is not None:
            return (refusal.code, refusal.message)
        if not queue.broker.name or queue.id < 0:
            return (Code.BAD_REQUEST, "a message queue needs its broker and a queue id")
        return topic, queue.broker.name, queue.id

    async def _offset_call(self, broker_name: str, topic: str, code: int, fields: dict):
        await self.routes.get(topic)
        return await self._invoke(broker_name, request(code, fields))

    async def PullMessage(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        group = request_.group.name
        if len(where) == 2:
            yield pb.PullMessageResponse(status=status(*where))
            return
        refusal = name_refusal(group)
        if refusal is not None:
            yield pb.PullMessageResponse(status=refusal)
            return
        topic, broker_name, queue_id = where
        if request_.offset < 0:
            yield pb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET, "a negative offset"))
            return
        poll_ms = duration_ms(request_.long_polling_timeout)
        if poll_ms is None:
            yield pb.PullMessageResponse(status=status(
                Code.ILLEGAL_POLLING_TIME, "the long-polling timeout is not a valid duration"))
            return
        poll_ms = min(max(poll_ms, 0), 60_000)
        expression = request_.filter_expression
        fields = {"consumerGroup": group, "topic": topic, "queueId": queue_id,
                  "queueOffset": request_.offset, "maxMsgNums": max(1, min(request_.batch_size or 32, 32)),
                  "sysFlag": 0x4 | (0x2 if poll_ms else 0), "commitOffset": 0,
                  "suspendTimeoutMillis": poll_ms, "subscription": expression.expression or "*",
                  "subVersion": 0, "expressionType": "SQL92" if expression.type == pb.SQL else "TAG"}
        try:
            await self.routes.get(topic)
            response = await self._invoke(broker_name, request(RequestCode.PULL_MESSAGE, fields),
                                          timeout=poll_ms / 1000 + REQUEST_TIMEOUT)
        except RemotingError as exc:
            yield pb.PullMessageResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
            return
        next_offset = int(response.ext_fields.get("nextBeginOffset", request_.offset) or 0)
        if response.code == ResponseCode.SUCCESS:
            yield pb.PullMessageResponse(status=status())
            for record in iter_records(response.body):
                yield pb.PullMessageResponse(message=to_message(record))
        elif response.code == ResponseCode.PULL_OFFSET_MOVED:
            yield pb.PullMessageResponse(status=status(Code.ILLEGAL_OFFSET,
                                                       "the offset is outside the queue"))
        elif response.code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            yield pb.PullMessageResponse(status=status(Code.MESSAGE_NOT_FOUND, "no new message"))
        else:
            yield pb.PullMessageResponse(status=status_of_response(response.code, response.remark))
            return
        yield pb.PullMessageResponse(next_offset=next_offset)

    async def UpdateOffset(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        if len(where) == 2:
            return pb.UpdateOffsetResponse(status=status(*where))
        topic, broker_name, queue_id = where
        refusal = name_refusal(request_.group.name)
        if refusal is not None:
            return pb.UpdateOffsetResponse(status=refusal)
        if request_.offset < 0:
            return pb.UpdateOffsetResponse(status=status(Code.ILLEGAL_OFFSET, "a negative offset"))
        try:
            response = await self._offset_call(broker_name, topic, RequestCode.UPDATE_CONSUMER_OFFSET, {
                "consumerGroup": request_.group.name, "topic": topic, "queueId": queue_id,
                "commitOffset": request_.offset})
        except RemotingError as exc:
            return pb.UpdateOffsetResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        return pb.UpdateOffsetResponse(status=status_of_response(response.code, response.remark))

    async def GetOffset(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        if len(where) == 2:
            return pb.GetOffsetResponse(status=status(*where))
        topic, broker_name, queue_id = where
        refusal = name_refusal(request_.group.name)
        if refusal is not None:
            return pb.GetOffsetResponse(status=refusal)
        try:
            response = await self._offset_call(broker_name, topic, RequestCode.QUERY_CONSUMER_OFFSET, {
                "consumerGroup": request_.group.name, "topic": topic, "queueId": queue_id})
        except RemotingError as exc:
            return pb.GetOffsetResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if response.code == ResponseCode.QUERY_NOT_FOUND:
            return pb.GetOffsetResponse(status=status(Code.OFFSET_NOT_FOUND,
                                                      "the group has no offset in this queue"))
        if response.code != ResponseCode.SUCCESS:
            return pb.GetOffsetResponse(status=status_of_response(response.code, response.remark))
        return pb.GetOffsetResponse(status=status(),
                                    offset=int(response.ext_fields.get("offset", "0") or 0))

    async def QueryOffset(self, request_, context):
        self._client(context)
        where = self._queue_of(request_)
        if len(where) == 2:
            return pb.QueryOffsetResponse(status=status(*where))
        topic, broker_name, queue_id = where
        policy = request_.query_offset_policy
        fields: dict = {"topic": topic, "queueId": queue_id}
        if policy == pb.BEGINNING:
            code = RequestCode.GET_MIN_OFFSET
        elif policy == pb.END:
            code = RequestCode.GET_MAX_OFFSET
        else:
            if not request_.HasField("timestamp"):
                return pb.QueryOffsetResponse(status=status(Code.BAD_REQUEST,
                                                            "a TIMESTAMP query needs a timestamp"))
            code = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
            at = timestamp_ms(request_.timestamp)
            if at is None:
                return pb.QueryOffsetResponse(status=status(Code.BAD_REQUEST,
                                                            "the timestamp is not a valid time"))
            fields["timestamp"] = at
        try:
            response = await self._offset_call(broker_name, topic, code, fields)
        except RemotingError as exc:
            return pb.QueryOffsetResponse(status=status(Code.INTERNAL_SERVER_ERROR, str(exc)))
        if response.code != ResponseCode.SUCCESS:
            return pb.QueryOffsetResponse(status=status_of_response(response.code, response.remark))
        return pb.QueryOffsetResponse(status=status(),
                                      offset=int(response.ext_fields.get("offset", "0") or 0))
