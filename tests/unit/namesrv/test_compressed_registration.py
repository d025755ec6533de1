"""REGISTER_BROKER with compressed=true, as a Java broker with compressedRegister=true sends it
(RegisterBrokerBody's compressed form: one zlib stream of length-prefixed fields, each topic in
TopicConfig's text form); a body that inflates past the cap is refused, never inflated whole."""

from __future__ import annotations

import json
import struct
import zlib

from cluster.namesrv.compressed_registration import MAX_INFLATED_BYTES
from cluster.namesrv.kv_config import KVConfigManager
from cluster.namesrv.processor import NamesrvProcessor
from cluster.namesrv.route_info import RouteInfoManager
from cluster.remoting.codec import request
from cluster.remoting.codes import V4_9_4, V5_0_0, RequestCode, ResponseCode


class Peer:
    remote_address = "127.0.0.1:40000"
    peer = ("127.0.0.1", 40000)


def _field(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def _inflated(topics: list[str], filter_servers: str = "[]", mappings: list[str] | None = None,
              counter: int = 3) -> bytes:
    """The fields in the order a Java broker writes them (5.x adds the mapping count)."""
    out = _field(json.dumps({"counter": counter, "stateVersion": 0,
                             "timestamp": 1_700_000_000_000}).encode())
    out += struct.pack(">i", len(topics)) + b"".join(_field(t.encode()) for t in topics)
    out += _field(filter_servers.encode())
    if mappings is not None:
        out += struct.pack(">i", len(mappings)) + b"".join(_field(m.encode()) for m in mappings)
    return out


def _register(body: bytes, version: int = V4_9_4, crc: bool = True):
    fields = {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911", "clusterName": "C",
              "haServerAddr": "127.0.0.1:10912", "brokerId": "0", "compressed": "true"}
    if crc:
        fields["bodyCrc32"] = str(zlib.crc32(body) & 0x7FFFFFFF)
    return request(RequestCode.REGISTER_BROKER, fields, body, version=version)


def _processor() -> NamesrvProcessor:
    return NamesrvProcessor(RouteInfoManager(), KVConfigManager(None))


def test_a_compressed_registration_of_a_4x_broker_registers_its_topics():
    processor = _processor()
    body = zlib.compress(_inflated(["TopicA 8 4 6 SINGLE_TAG", "TopicB 2 2 4 SINGLE_TAG"],
                                   '["127.0.0.1:3000"]'), 9)
    answer = processor.register_broker(Peer(), _register(body))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    [queues] = processor.routes.pickup_topic_route_data("TopicA")["queueDatas"]
    assert (queues.read_queue_nums, queues.write_queue_nums, queues.perm) == (8, 4, 6)
    assert processor.routes.pickup_topic_route_data("TopicB")["queueDatas"][0].perm == 4
    assert processor.routes.filter_server_table == {"127.0.0.1:10911": ["127.0.0.1:3000"]}
    assert processor.routes.broker_live_table["127.0.0.1:10911"].data_version == {
        "counter": 3, "timestamp": 1_700_000_000_000}


def test_a_5x_body_with_attributes_and_static_topic_mappings_registers():
    processor = _processor()
    body = zlib.compress(_inflated(['TopicA 8 8 6 SINGLE_TAG {"+message.type":"FIFO"}'],
                                   mappings=['{"topic":"TopicA","bname":"broker-a"}']))
    answer = processor.register_broker(Peer(), _register(body, version=V5_0_0))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert processor.routes.get_all_topic_list() == ["TopicA"]


def test_a_topic_that_does_not_decode_is_left_out_and_the_rest_registers():
    processor = _processor()
    body = zlib.compress(_inflated(["Good 4 4 6 SINGLE_TAG", "Bad 4 x", "Odd 4 four 6 MULTI_TAG"]))
    answer = processor.register_broker(Peer(), _register(body))
    assert answer.code == ResponseCode.SUCCESS, answer.remark
    assert processor.routes.get_all_topic_list() == ["Good"]


def test_a_zip_bomb_is_refused_with_a_sentence_naming_the_limit():
    bomb = zlib.compress(_inflated(["T 1 1 6 SINGLE_TAG"]) + bytes(MAX_INFLATED_BYTES), 9)
    assert len(bomb) < 64 * 1024
    answer = _processor().register_broker(Peer(), _register(bomb))
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert f"inflates past {MAX_INFLATED_BYTES} bytes" in answer.remark


def test_bodies_that_are_not_the_format_are_refused_with_a_sentence():
    cases = {
        b"not zlib at all": "does not inflate",
        zlib.compress(_inflated(["T 1 1 6 SINGLE_TAG"])[:-1]): "ends inside the filter server list",
        zlib.compress(struct.pack(">i", -5)): "gives the length of the data version as -5",
        zlib.compress(_field(b'{"counter":1}') + struct.pack(">i", 2_000_000)): "the limit is",
        zlib.compress(_field(b"[1]")): "not a JSON object",
    }
    for body, said in cases.items():
        answer = _processor().register_broker(Peer(), _register(body))
        assert answer.code == ResponseCode.SYSTEM_ERROR, body
        assert said in answer.remark, (body, answer.remark)


def test_the_crc_is_of_the_compressed_bytes():
    body = zlib.compress(_inflated(["T 1 1 6 SINGLE_TAG"]))
    command = _register(body)
    command.ext_fields["bodyCrc32"] = str(zlib.crc32(_inflated(["T 1 1 6 SINGLE_TAG"]))
                                          & 0x7FFFFFFF)
    assert _processor().register_broker(Peer(), command).remark == "crc32 not match"
