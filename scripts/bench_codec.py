"""What one frame costs the remoting codec, pure Python against the compiled core.

    python scripts/bench_codec.py [--iterations N]

Times decode_frame and encode of a typical SEND_MESSAGE_V2 request (the header a Java producer
sends: group, topic, queue, born time, properties with their \\u0001/\\u0002 separators) and of
its response, in both serialize types, then java_hash_unsigned of a topic#key. Each figure is
the best of five runs of N calls, in microseconds per call. The compiled rows need the
extension built (`pip install -e .`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cluster.remoting import codec
from cluster.remoting.codec import RESPONSE_FLAG, RemotingCommand, SerializeType, decode_frame, encode
from cluster.remoting.codes import RequestCode
from common import speedups
from storage import message

PROPERTIES = ("KEYS\x01order-20240518-000042\x02TAGS\x01TagA\x02WAIT\x01true\x02"
              "UNIQ_KEY\x017F0000010B4C18B4AAC27A1B9E3D0000\x02")


def send_request(serialize_type: SerializeType) -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.SEND_MESSAGE_V2, opaque=123456, language="JAVA", version=401,
        serialize_type=serialize_type, body=b"x" * 256,
        ext_fields={"a": "please_rename_unique_group_name", "b": "TopicTest", "c": "TBW102",
                    "d": "4", "e": "3", "f": "0", "g": "1716000000123", "h": "0",
                    "i": PROPERTIES, "j": "0", "k": "false", "l": "16", "m": "false",
                    "n": "broker-a"},
    )


def send_response(serialize_type: SerializeType) -> RemotingCommand:
    return RemotingCommand(
        code=0, opaque=123456, flag=RESPONSE_FLAG, serialize_type=serialize_type,
        ext_fields={"msgId": "7F00000100002A9F0000000000AB12CD", "queueId": "3",
                    "queueOffset": "184467", "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"},
    )


def per_call(function: Callable[[], object], iterations: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            function()
        best = min(best, time.perf_counter() - start)
    return best / iterations * 1e6


def use(implementation: codec.HeaderCodec) -> None:
    for name, function in implementation._asdict().items():
        setattr(codec, f"_{name}", function)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20_000)
    args = parser.parse_args()
    n = args.iterations
    print(f"{speedups.describe()}; µs per call, best of 5 x {n:,}")
    print(f"{'':58}{'pure':>9}{'compiled':>10}{'speed-up':>10}")
    rows = []
    for serialize_type in (SerializeType.JSON, SerializeType.ROCKETMQ):
        for label, command in (("SEND_MESSAGE_V2 request", send_request(serialize_type)),
                               ("SEND_MESSAGE_V2 response", send_response(serialize_type))):
            frame = encode(command)[4:]  # decode_frame takes the frame without its length
            assert decode_frame(frame) == command
            kind = serialize_type.name
            rows.append((f"decode_frame {label} ({kind}, {len(frame)} B)",
                         lambda frame=frame: decode_frame(frame)))
            rows.append((f"encode {label} ({kind})", lambda command=command: encode(command)))
    results = []
    for label, function in rows:
        use(codec.PURE)
        pure = per_call(function, n)
        compiled = None
        if codec.COMPILED is not None:
            use(codec.COMPILED)
            compiled = per_call(function, n)
        results.append((label, pure, compiled))
    use(codec.COMPILED or codec.PURE)
    key = "TopicTest#order-20240518-000042"
    compiled_hash = speedups.core.java_hash_unsigned if speedups.core is not None else None
    results.append((f"java_hash_unsigned ({len(key)} chars)",
                    per_call(lambda: message.java_hash_unsigned_pure(key), n),
                    per_call(lambda: compiled_hash(key), n) if compiled_hash else None))
    for label, pure, compiled in results:
        if compiled is None:
            print(f"{label:58}{pure:9.2f}{'-':>10}{'-':>10}")
        else:
            print(f"{label:58}{pure:9.2f}{compiled:10.2f}{pure / compiled:9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
