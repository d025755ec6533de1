"""The name server's KV table: bounded per namespace and overall, counted as the answers carry
it, and written off the event loop, one write for every change made before it began."""

from __future__ import annotations

import asyncio
import json

import pytest

from cluster.namesrv.errors import KVConfigLimitError
from cluster.namesrv.kv_config import (
    MAX_NAMESPACE_BYTES,
    MAX_NAMESPACE_KEYS,
    MAX_TABLE_BYTES,
    MAX_TABLE_KEYS,
    ORDER_TOPIC_CONFIG,
    KVConfigManager,
    entry_size,
)
from cluster.namesrv.processor import NamesrvProcessor
from cluster.namesrv.route_info import RouteInfoManager
from cluster.remoting.codec import request
from cluster.remoting.codes import RequestCode, ResponseCode
from common.platform import files


class Peer:
    remote_address = "127.0.0.1:40000"
    peer = ("127.0.0.1", 40000)


def _fill(kv: KVConfigManager, namespace: str, value_size: int, char: str = "v") -> int:
    """Put values of ``value_size`` characters until refused; returns how many were taken."""
    return _until_refused(kv, [namespace], MAX_NAMESPACE_KEYS + 1, char * value_size)[1]


def _until_refused(kv: KVConfigManager, namespaces: list[str], keys: int,
                   value: str) -> tuple[str, int, KVConfigLimitError]:
    """Put ``keys`` keys in each namespace until refused: the namespace, the key's index and the
    refusal (bounded: a missing bound fails the test rather than hang it)."""
    for namespace in namespaces:
        for index in range(keys):
            try:
                kv.put(namespace, f"k{index}", value)
            except KVConfigLimitError as exc:
                return namespace, index, exc
    pytest.fail("every put was taken")


def test_a_namespace_past_its_bytes_is_refused_and_its_answer_stays_small():
    kv = KVConfigManager(None)
    _fill(kv, ORDER_TOPIC_CONFIG, 60_000)
    body = kv.namespace_body(ORDER_TOPIC_CONFIG)
    assert body is not None
    assert MAX_NAMESPACE_BYTES - 60_100 < len(body) <= MAX_NAMESPACE_BYTES + len('{"table":{}}')
    assert json.loads(body)["table"]["k0"] == "v" * 60_000


def test_sizes_count_the_escaped_bytes_the_answers_carry():
    kv = KVConfigManager(None)
    # A control character is one character and six bytes on the wire.
    taken = _fill(kv, "NS", 10_000, "\x01")
    body = kv.namespace_body("NS")
    assert body is not None
    assert len(body) <= MAX_NAMESPACE_BYTES + 16
    assert taken * 60_000 <= MAX_NAMESPACE_BYTES
    assert entry_size("k", "\x01") == len('"k":"\\u0001",')


def test_a_namespace_past_its_keys_is_refused():
    kv = KVConfigManager(None)
    assert _fill(kv, "NS", 1) == MAX_NAMESPACE_KEYS


def test_the_whole_table_is_bounded_in_keys_and_bytes():
    many = [f"NS{i}" for i in range(MAX_TABLE_KEYS // MAX_NAMESPACE_KEYS + 1)]
    namespace, index, refusal = _until_refused(KVConfigManager(None), many, MAX_NAMESPACE_KEYS,
                                               "v")
    assert (namespace, index) == (many[-1], 0)
    assert f"the KV config would hold {MAX_TABLE_KEYS + 1} keys" in str(refusal)

    many = [f"NS{i}" for i in range(MAX_TABLE_BYTES // MAX_NAMESPACE_BYTES + 1)]
    namespace, _, refusal = _until_refused(KVConfigManager(None), many,
                                           MAX_NAMESPACE_BYTES // 65_600, "v" * 65_536)
    assert namespace == many[-1]
    assert "the KV config would hold" in str(refusal)
    assert f"bytes; the limit is {MAX_TABLE_BYTES}" in str(refusal)


def test_at_the_bound_a_value_may_still_shrink_and_entries_be_deleted():
    kv = KVConfigManager(None)
    taken = _fill(kv, "NS", 60_000)
    kv.put("NS", "k0", "short")  # takes nothing more
    kv.put("NS", f"k{taken}", "v" * 50_000)  # fits in what k0 gave back
    kv.delete("NS", "k1")
    kv.put("NS", "k1", "v" * 60_000)
    assert kv.get("NS", "k1") == "v" * 60_000


def test_puts_share_writes_and_are_answered_once_on_disk(tmp_path, monkeypatch):
    path = tmp_path / "namesrv" / "kvConfig.json"
    kv = KVConfigManager(str(path))
    syncs = []
    real_sync = files.sync_all
    monkeypatch.setattr(files, "sync_all", lambda fd: (syncs.append(fd), real_sync(fd)))
    processor = NamesrvProcessor(RouteInfoManager(), kv)

    async def main():
        return await asyncio.gather(*(processor.put_kv_config(Peer(), request(
            RequestCode.PUT_KV_CONFIG, {"namespace": "NS", "key": f"k{i}", "value": str(i)}))
            for i in range(50)))

    answers = asyncio.run(main())
    assert {a.code for a in answers} == {ResponseCode.SUCCESS}
    assert len(syncs) <= 3  # one write carries every put made before it began, not one each
    stored = json.loads(path.read_text())["configTable"]["NS"]
    assert stored == {f"k{i}": str(i) for i in range(50)}
    reloaded = KVConfigManager(str(path))
    reloaded.load()
    assert reloaded.get("NS", "k49") == "49"


def test_a_put_past_the_bound_is_answered_message_illegal_with_a_sentence(tmp_path):
    kv = KVConfigManager(str(tmp_path / "kv.json"))
    _fill(kv, ORDER_TOPIC_CONFIG, 60_000)
    processor = NamesrvProcessor(RouteInfoManager(), kv)
    answer = asyncio.run(processor.put_kv_config(Peer(), request(RequestCode.PUT_KV_CONFIG, {
        "namespace": ORDER_TOPIC_CONFIG, "key": "more", "value": "v" * 60_000})))
    assert answer.code == ResponseCode.MESSAGE_ILLEGAL
    assert "namespace ORDER_TOPIC_CONFIG would hold" in answer.remark
    assert "the limit is" in answer.remark
