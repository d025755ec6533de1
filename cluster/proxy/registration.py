"""5.x clients as the brokers see them: the proxy heartbeats each consumer client to the masters
(consumeType CONSUME_POP, its language and version), so that consoles list it in its group, and
answers what a broker relays to it (GET_CONSUMER_RUNNING_INFO, with a thread stack asked of the
client over Telemetry; CONSUME_MESSAGE_DIRECTLY, as a VerifyMessageCommand).
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

from cluster.proxy.clients import Client
from cluster.proxy.convert import to_message
from cluster.proxy.schema import pb
from cluster.remoting.codec import RemotingCommand, request
from cluster.remoting.codes import V5_0_0, RequestCode, ResponseCode
from cluster.remoting.errors import RemotingError
from storage.record import iter_records

log = logging.getLogger(__name__)

CONSUMER_TYPES = {pb.PUSH_CONSUMER: "PUSH_CONSUMER", pb.SIMPLE_CONSUMER: "SIMPLE_CONSUMER",
                  pb.PULL_CONSUMER: "PULL_CONSUMER"}
# 5.x language names (x-mq-language) to remoting's LanguageCode names.
LANGUAGES = {"JAVA": "JAVA", "CPP": "CPP", "DOT_NET": "DOTNET", "GOLANG": "GO", "RUST": "RUST",
             "PYTHON": "PYTHON", "PHP": "PHP", "NODE_JS": "NODE_JS", "RUBY": "RUBY"}
ANSWER_TIMEOUT = 2.5  # under the 3 s a broker waits for a relayed answer
# Waits for the route of a topic just created (the 10 s heartbeat round comes after them).
RETRY_DELAYS = (0.1, 0.2, 0.4, 0.8, 1.6, 3.2)


def heartbeat_body(client: Client) -> bytes:
    subscriptions = [{"topic": topic, "subString": expression or "*",
                      "expressionType": "SQL92" if kind == pb.SQL else "TAG", "subVersion": 0,
                      "tagsSet": [], "codeSet": [], "classFilterMode": False}
                     for topic, (kind, expression) in client.subscriptions.items()]
    return json.dumps({"clientID": client.client_id, "producerDataSet": [], "consumerDataSet": [{
        "groupName": client.group, "consumeType": "CONSUME_POP", "messageModel": "CLUSTERING",
        "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET", "subscriptionDataSet": subscriptions,
        "unitMode": False}]}).encode()


class ClientRegistration:
    def __init__(self, service) -> None:
        self.service = service
        self._answers: dict[str, asyncio.Future] = {}  # nonce -> the client's answer

    def _masters(self) -> list[str]:
        return [addrs[0] for addrs in self.service.instance.broker_addrs.values() if 0 in addrs]

    async def routed(self, client: Client) -> bool:
        """Look up the routes of the client's topics (which teaches the instance their
        masters); False while one of them has no route at the name servers yet."""
        routed = True
        for topic in list(client.subscriptions):
            try:
                routed = await self.service.routes.get(topic) is not None and routed
            except RemotingError:
                routed = False
        return routed

    async def register(self, client: Client, retry: bool = False) -> None:
        """Heartbeat the client to every master known, its topics' routes looked up first.
        With ``retry``, wait a few seconds for a topic that has no route yet: a broker
        registers a new topic with the name servers a moment after creating it, and a client
        that subscribes in between would stay unknown to the brokers (absent from its group,
        out of the console's reach) until the next round of heartbeats."""
        if client.client_type not in CONSUMER_TYPES or not client.group:
            return
        routed = await self.routed(client)
        for delay in RETRY_DELAYS if retry else ():
            if routed or self.service.clients.clients.get(client.client_id) is not client:
                break
            await asyncio.sleep(delay)
            routed = await self.routed(client)
        language = LANGUAGES.get(client.language.upper(), "OTHER")
        for address in self._masters():
            command = request(RequestCode.HEART_BEAT, body=heartbeat_body(client),
                              language=language, version=V5_0_0)
            try:
                await self.service.instance.remoting.invoke(address, command, 3)
            except RemotingError as exc:
                log.debug("heartbeat of %s to %s failed: %s", client.client_id, address, exc)

    async def unregister(self, client: Client) -> None:
        if not client.group:
            return
        for address in self._masters():
            command = request(RequestCode.UNREGISTER_CLIENT, {
                "clientID": client.client_id, "consumerGroup": client.group})
            try:
                await self.service.instance.remoting.invoke(address, command, 3)
            except RemotingError:
                pass

    async def heartbeat_all(self) -> None:
        for client in list(self.service.clients.clients.values()):
            await self.register(client)

    # -- what brokers relay to a 5.x client ---------------------------------------------------------
    async def on_broker_request(self, connection, command: RemotingCommand) -> RemotingCommand | None:
        if command.code not in (RequestCode.GET_CONSUMER_RUNNING_INFO,
                                RequestCode.CONSUME_MESSAGE_DIRECTLY):
            return None
        client = self.service.clients.clients.get(command.field("clientId") or "")
        if client is None:
            return None
        if command.code == RequestCode.GET_CONSUMER_RUNNING_INFO:
            return await self._running_info(command, client)
        return await self._verify(command, client)

    async def _ask(self, client: Client, telemetry) -> object | None:
        """Send a command down the client's Telemetry stream; its answer, or None."""
        nonce = telemetry.nonce
        future = asyncio.get_running_loop().create_future()
        self._answers[nonce] = future
        try:
            if not self.service.clients.offer(client, telemetry.command):
                return None
            return await asyncio.wait_for(future, ANSWER_TIMEOUT)
        except TimeoutError:
            return None
        finally:
            self._answers.pop(nonce, None)

    def answered(self, nonce: str, answer) -> None:
        future = self._answers.get(nonce)
        if future is not None and not future.done():
            future.set_result(answer)

    async def _running_info(self, command: RemotingCommand, client: Client) -> RemotingCommand:
        properties = {"clientType": CONSUMER_TYPES.get(client.client_type, "PRODUCER"),
                      "language": client.language, "clientVersion": client.version,
                      "consumeType": "CONSUME_POP", "PROP_CLIENT_VERSION": client.version}
        info = {"properties": properties, "subscriptionSet": [
            {"topic": t, "subString": e or "*", "expressionType": "SQL92" if k == pb.SQL else "TAG"}
            for t, (k, e) in client.subscriptions.items()], "mqTable": {}, "statusTable": {}}
        if command.field("jstackEnable") == "true":
            nonce = uuid.uuid4().hex
            answer = await self._ask(client, _Telemetry(nonce, pb.TelemetryCommand(
                print_thread_stack_trace_command=pb.PrintThreadStackTraceCommand(nonce=nonce))))
            if answer is not None:
                info["jstack"] = answer.thread_stack_trace
        return command.make_response(ResponseCode.SUCCESS, body=json.dumps(info).encode())

    async def _verify(self, command: RemotingCommand, client: Client) -> RemotingCommand:
        record = next(iter_records(command.body or b""), None)
        if record is None:
            return command.make_response(ResponseCode.SYSTEM_ERROR, "no message to verify")
        nonce = uuid.uuid4().hex
        answer = await self._ask(client, _Telemetry(nonce, pb.TelemetryCommand(
            verify_message_command=pb.VerifyMessageCommand(nonce=nonce,
                                                           message=to_message(record)))))
        result = {"order": False, "autoCommit": True, "spentTimeMills": 0,
                  "consumeResult": "CR_SUCCESS" if answer is not None else "CR_THROW_EXCEPTION",
                  "remark": "" if answer is not None else "the 5.x client did not answer"}
        if answer is not None and answer.HasField("status") and answer.status.code != pb.OK:
            result["consumeResult"] = "CR_LATER"
            result["remark"] = answer.status.message
        return command.make_response(ResponseCode.SUCCESS, body=json.dumps(result).encode())


class _Telemetry:
    def __init__(self, nonce: str, command) -> None:
        self.nonce = nonce
        self.command = command
