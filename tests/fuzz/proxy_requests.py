"""Hostile requests to the gRPC proxy (RocketMQ 5.x's MessagingService): the generator and the
judge shared by scripts/fuzz_proxy.py (a long campaign against a running cluster) and
tests/fuzz/test_hostile_proxy.py (a short one in the suite).

Each request is one of the service's calls with its fields filled at random from values a
hostile or broken client might send: names that are empty, huge, not RocketMQ's alphabet,
system topics; numbers at their limits and past them; durations and times out of range;
bodies from empty to past the size limit; unknown enum values; nested and repeated fields;
Telemetry streams of a few such commands. A call may be refused, in a status of its own.
A problem is a call the proxy failed with UNKNOWN or INTERNAL, or answered with the status
its guard gives a failure (cluster/proxy/guard.py: an exception the service did not turn
into a status of its own), or that did not answer in time.
"""

from __future__ import annotations

import collections
import random
import time
import zlib

import grpc
from google.protobuf.descriptor import FieldDescriptor

from cluster.proxy.guard import FAILED
from cluster.proxy.schema import SERVICE_NAME, Code, pb
from cluster.remoting.client import RemotingClient
from cluster.remoting.codec import request as remoting_request
from cluster.remoting.codes import RequestCode
from storage.message import COMPRESSED_FLAG, properties_to_string
from storage.record import encode_batch_parts

TOPIC = "FuzzProxyTopic"
GROUP = "CID-fuzz-proxy"
# Calls and their request types; server-streaming ones are read to the end.
UNARY = {
    "QueryRoute": pb.QueryRouteRequest, "Heartbeat": pb.HeartbeatRequest,
    "SendMessage": pb.SendMessageRequest, "QueryAssignment": pb.QueryAssignmentRequest,
    "AckMessage": pb.AckMessageRequest,
    "ForwardMessageToDeadLetterQueue": pb.ForwardMessageToDeadLetterQueueRequest,
    "EndTransaction": pb.EndTransactionRequest,
    "NotifyClientTermination": pb.NotifyClientTerminationRequest,
    "ChangeInvisibleDuration": pb.ChangeInvisibleDurationRequest,
    "UpdateOffset": pb.UpdateOffsetRequest, "GetOffset": pb.GetOffsetRequest,
    "QueryOffset": pb.QueryOffsetRequest,
}
STREAMING = {"ReceiveMessage": pb.ReceiveMessageRequest, "PullMessage": pb.PullMessageRequest}
RESPONSES = {name: getattr(pb, name + "Response") for name in [*UNARY, *STREAMING]}
RESPONSES["Telemetry"] = pb.TelemetryCommand  # (a stream both ways: a few commands, then closed)
PROBLEMS = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.DEADLINE_EXCEEDED)

NAMES = [TOPIC, GROUP, "", "x" * 128, "x" * 100_000, "a b", "a|b", "%RETRY%" + GROUP,
         "%DLQ%" + GROUP, "TBW102", "SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC",
         "rmq_sys_wheel_timer", "\u00e9t\u00e9", "\u0000", "..", "../x",
         "CON", "a\nb", "%", "NoSuchTopic", "DefaultCluster", "broker-a"]
TEXTS = [*NAMES, "not a handle", "01AB", "0" * 32, "A" * 5000, "1_2_3_4", "x_broker-a_1_2", "*",
         "TagA || TagB", "(a > 1", "a" * 70000, "true", "false", "-1"]
INTS = [0, 1, -1, 2, 16, 1024, 2**31 - 1, -2**31, 2**32 - 1, 2**63 - 1, -2**63, 65536]
BYTES = [b"", b"x", b"\x00" * 16, bytes(range(256)), b"y" * 65536, b"z" * (4 * 1024 * 1024 + 1)]
SECONDS = [0, 1, -1, 30, 43200, 10**9, -10**9, 315_576_000_000, -315_576_000_000, 2**62]
NANOS = [0, 1, -1, 999_999_999, -999_999_999, 10**9, 2**31 - 1]


def fill(message, rng: random.Random, depth: int = 0) -> None:
    """Set a random share of ``message``'s fields to hostile values (recursively)."""
    descriptor = message.DESCRIPTOR
    if descriptor.full_name in ("google.protobuf.Duration", "google.protobuf.Timestamp"):
        message.seconds = rng.choice(SECONDS)
        message.nanos = rng.choice(NANOS)
        return
    for field in descriptor.fields:
        if rng.random() < 0.3:
            continue
        if field.is_repeated:
            if field.message_type is not None and field.message_type.GetOptions().map_entry:
                target = getattr(message, field.name)
                for _ in range(rng.choice([0, 1, 3, 50])):
                    target[rng.choice(TEXTS)[:200]] = rng.choice(TEXTS)[:200]
                continue
            count = rng.choice([0, 1, 2, 3, 40]) if depth < 2 else rng.choice([0, 1])
            for _ in range(count):
                add(message, field, rng, depth)
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if depth < 4:
                fill(getattr(message, field.name), rng, depth + 1)
                if rng.random() < 0.1:
                    message.ClearField(field.name)
            continue
        setattr(message, field.name, scalar(field, rng))


def add(message, field, rng: random.Random, depth: int) -> None:
    target = getattr(message, field.name)
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        if depth < 4:
            fill(target.add(), rng, depth + 1)
    else:
        target.append(scalar(field, rng))


def scalar(field, rng: random.Random):
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return rng.choice(TEXTS)
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.choice(BYTES)
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return rng.choice([*values, max(values) + 1, 9999, -1])
    if kind in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice([0.0, -1.0, 1e300, float("inf"), float("nan")])
    values = INTS
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        values = [v for v in INTS if -2**31 <= v < 2**31]
    elif kind in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
        values = [v for v in INTS if 0 <= v < 2**32]
    elif kind in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
        values = [v for v in INTS if v >= 0]
    return rng.choice(values)


def call(channel, method: str, request, metadata, streaming: bool, timeout: float):
    """The call's gRPC status code (OK or its error) and what went wrong, if anything: the
    error's details, or an answer whose status says the proxy failed on a bug."""
    path = f"/{SERVICE_NAME}/{method}"
    telemetry = method == "Telemetry"
    kind = (channel.stream_stream if telemetry else channel.unary_stream if streaming
            else channel.unary_unary)
    invoke = kind(path, request_serializer=lambda m: m.SerializeToString(),
                  response_deserializer=RESPONSES[method].FromString)
    try:
        if telemetry:  # the proxy must end the stream once the client has said all it will
            answers = list(invoke(iter(request), metadata=metadata, timeout=timeout))
        elif streaming:
            answers = list(invoke(request, metadata=metadata, timeout=timeout))
        else:
            answers = [invoke(request, metadata=metadata, timeout=timeout)]
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""
    for answer in answers:
        if answer.status.message.startswith(FAILED):
            return grpc.StatusCode.INTERNAL, answer.status.message
    return grpc.StatusCode.OK, ""


LEGIT_GROUP = "CID-fuzz-proxy-legit"  # in no hostile pool: nothing hostile touches its position


def _receive(stub, metadata, poll_seconds: int) -> list:
    request = pb.ReceiveMessageRequest(
        group=pb.Resource(name=LEGIT_GROUP), message_queue=pb.MessageQueue(
            topic=pb.Resource(name=TOPIC)),
        filter_expression=pb.FilterExpression(type=pb.TAG, expression="*"), batch_size=32)
    request.invisible_duration.FromSeconds(30)
    request.long_polling_timeout.FromSeconds(poll_seconds)
    answers = list(stub.ReceiveMessage(request, metadata=metadata, timeout=poll_seconds + 10))
    for answer in answers:
        if answer.WhichOneof("content") == "status" and answer.status.message.startswith(FAILED):
            raise AssertionError(f"a legitimate receive failed: {answer.status.message}")
    return [answer.message for answer in answers if answer.WhichOneof("content") == "message"]


def legitimate_round_trip(stub, metadata, wait: float = 30.0) -> str | None:
    """A message sent on ``TOPIC`` and received by a group of its own, body intact; None
    when that worked, else what failed."""
    _receive(stub, metadata, 1)  # the group's first receive: where it starts reading
    body = f"legit-{time.time_ns()}".encode()
    message = pb.Message(topic=pb.Resource(name=TOPIC), body=body,
                         system_properties=pb.SystemProperties(message_id=f"{time.time_ns():032X}"))
    sent = stub.SendMessage(pb.SendMessageRequest(messages=[message]), metadata=metadata,
                            timeout=10)
    if sent.status.code != Code.OK:
        return f"the legitimate send was refused: {sent.status}"
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if any(got.body == body for got in _receive(stub, metadata, 2)):
            return None
    return f"the legitimate message was not received within {wait:.0f} s"


def campaign(channel, rng: random.Random, requests: int, timeout: float,
             progress=None) -> tuple[collections.Counter, dict[str, list]]:
    """``requests`` hostile calls: how many of each call ended with each gRPC status code, and
    the problems (call and code: the request numbers and details)."""
    seen: collections.Counter = collections.Counter()
    problems: dict[str, list] = collections.defaultdict(list)
    for number in range(requests):
        method = rng.choice([*UNARY, *STREAMING, "Telemetry"])
        if method == "Telemetry":
            request = [pb.TelemetryCommand() for _ in range(rng.choice([0, 1, 2, 5]))]
            for command in request:
                fill(command, rng)
        else:
            request = (UNARY.get(method) or STREAMING[method])()
            fill(request, rng)
        # (metadata a gRPC client can send at all: printable ASCII)
        client_id = "".join(c for c in rng.choice(TEXTS)[:300] if " " <= c <= "~") or "fuzz"
        metadata = [] if rng.random() < 0.1 else [("x-mq-client-id", client_id)]
        code, detail = call(channel, method, request, metadata, method in STREAMING,
                            timeout + (60 if method in STREAMING else 0))
        seen[(method, code.name)] += 1
        if code in PROBLEMS:
            problems[f"{method} {code.name}"].append((number, str(detail)[:300]))
        if progress is not None and number % 500 == 0:
            progress(number, problems)
    return seen, problems


# What a 4.x producer may store that a 5.x message cannot hold as it is: the proxy must still
# hand such messages out (receives and lite pulls of ``TOPIC`` meet them during a campaign).
ODD_FIELDS = [{"g": 2**63 - 1}, {"g": -2**63}, {"j": 2**31 - 1}, {"j": -2**31},
              {"f": COMPRESSED_FLAG}, {"f": COMPRESSED_FLAG, "body": zlib.compress(b"z" * 100)}]
ODD_PROPERTIES = [{"KEYS": " " * 50}, {"TAGS": "x" * 5000}, {"__SHARDINGKEY": ""},
                  {"RETRY_TOPIC": "x" * 300}, {"REAL_TOPIC": ""}]
# A batch's inner messages: the broker reads no timer property there (a single send's odd one
# is refused), so these are stored as they are.
ODD_TIMERS = ["\u00b2", "9" * 40, str(2**63), "-5"]


async def plant_odd_messages(broker: str, rng: random.Random, count: int,
                             topic: str = TOPIC) -> int:
    """``count`` 4.x sends to ``topic``'s queue 0 (SEND_MESSAGE_V2 straight to ``broker``) with
    values from ``ODD_FIELDS``, ``ODD_PROPERTIES`` and ``ODD_TIMERS``, each with the key "odd"
    (unless its odd properties give it another); how many the broker stored."""
    client = RemotingClient()
    stored = 0
    try:
        for number in range(count):
            props = {"UNIQ_KEY": f"0D{number:030X}", "KEYS": "odd", **rng.choice(ODD_PROPERTIES)}
            fields = {"a": "PG-fuzz-odd", "b": topic, "c": "TBW102", "d": 4, "e": 0, "f": 0,
                      "g": int(time.time() * 1000), "h": 0, "j": 0, "k": False, "m": False,
                      "i": properties_to_string(props), **rng.choice(ODD_FIELDS)}
            body = fields.pop("body", b"odd %d" % number)
            code = RequestCode.SEND_MESSAGE_V2
            if rng.random() < 0.3:  # a batch of one whose message carries an odd timer
                code, fields["m"] = RequestCode.SEND_BATCH_MESSAGE, True
                body = encode_batch_parts([(0, body, properties_to_string(
                    {"UNIQ_KEY": f"0E{number:030X}", "KEYS": "odd",
                     "TIMER_DELIVER_MS": rng.choice(ODD_TIMERS)}))])
            answer = await client.invoke(broker, remoting_request(code, fields, body), 5)
            stored += answer.code == 0
    finally:
        await client.close()
    return stored


def read_everything(channel, metadata, timeout: float = 15.0) -> tuple[int, dict[str, list]]:
    """Every message of ``TOPIC`` read through the proxy, by lite pulls from each queue's start
    and by receives of a group of its own, each call judged as the campaign judges it: how
    many messages came, and the problems (odd stored messages included)."""
    problems: dict[str, list] = collections.defaultdict(list)
    route = channel.unary_unary(f"/{SERVICE_NAME}/QueryRoute",
                                request_serializer=lambda m: m.SerializeToString(),
                                response_deserializer=pb.QueryRouteResponse.FromString)(
        pb.QueryRouteRequest(topic=pb.Resource(name=TOPIC)), metadata=metadata, timeout=timeout)
    read = 0
    everything = pb.FilterExpression(type=pb.TAG, expression="*")
    for queue in {(q.broker.name, q.id): q for q in route.message_queues}.values():
        offset = 0
        for _ in range(1000):
            pull = pb.PullMessageRequest(group=pb.Resource(name="CID-fuzz-read"),
                                         message_queue=queue, offset=offset, batch_size=32,
                                         filter_expression=everything)
            code, detail, answers = _judged(channel, "PullMessage", pull, metadata, timeout)
            if code != grpc.StatusCode.OK:
                problems[f"PullMessage {code.name}"].append((offset, detail))
                break
            got = [a.message for a in answers if a.WhichOneof("content") == "message"]
            if not got:
                break
            read += len(got)
            offset = max(m.system_properties.queue_offset for m in got) + 1
    for _ in range(1000):
        receive = pb.ReceiveMessageRequest(
            group=pb.Resource(name="CID-fuzz-read"), message_queue=pb.MessageQueue(
                topic=pb.Resource(name=TOPIC)), filter_expression=everything, batch_size=32)
        receive.invisible_duration.FromSeconds(60)
        receive.long_polling_timeout.FromSeconds(1)
        code, detail, answers = _judged(channel, "ReceiveMessage", receive, metadata,
                                        timeout + 5)
        if code != grpc.StatusCode.OK:
            problems[f"ReceiveMessage {code.name}"].append((read, detail))
            break
        got = [a.message for a in answers if a.WhichOneof("content") == "message"]
        if not got:
            break
        read += len(got)
    return read, problems


def _judged(channel, method: str, request, metadata, timeout: float):
    """``call``'s verdict, and the answers themselves (a streaming call's)."""
    invoke = channel.unary_stream(f"/{SERVICE_NAME}/{method}",
                                  request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=RESPONSES[method].FromString)
    try:
        answers = list(invoke(request, metadata=metadata, timeout=timeout))
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or "", []
    for answer in answers:
        if answer.WhichOneof("content") == "status" and answer.status.message.startswith(FAILED):
            return grpc.StatusCode.INTERNAL, answer.status.message, answers
    return grpc.StatusCode.OK, "", answers
