"""The hostile generator itself: seeded, framed right, and never aimed at the legitimate traffic."""

from __future__ import annotations

import random
import struct

from cluster.remoting.codec import decode_frame
from tests.fuzz import catalogue as cat
from tests.fuzz.hostile import HostileGenerator
from tests.fuzz.legit import PROTECTED_NAMES


def frames(seed: int, count: int, target: str = cat.BROKER_TARGET) -> list[bytes]:
    generator = HostileGenerator(random.Random(seed), big_bodies=False, clock=lambda: 1_700_000_000.0)
    return [generator.request(target).frame for _ in range(count)]


def test_a_seed_replays_the_same_bytes():
    assert frames(11, 200) == frames(11, 200)
    assert frames(11, 50) != frames(12, 50)


def test_every_frame_is_a_whole_frame_within_the_limits():
    for target in (cat.BROKER_TARGET, cat.NAMESRV_TARGET):
        for frame in frames(3, 400, target):
            total, mark = struct.unpack_from(">ii", frame)
            assert total == len(frame) - 4 <= 16 * 1024 * 1024
            assert (mark >> 24) in (0, 1)
            assert (mark & 0xFFFFFF) <= total - 4


def test_requests_without_hostility_decode_as_the_code_they_claim():
    generator = HostileGenerator(random.Random(5), big_bodies=False)
    seen = 0
    for _ in range(400):
        request = generator.request(cat.BROKER_TARGET)
        if request.kinds[0] == "valid":
            command = decode_frame(request.frame[4:])
            assert command.code == request.code
            assert command.opaque == request.opaque
            seen += 1
    assert seen > 10


def test_the_legitimate_names_never_appear_in_hostile_traffic():
    generator = HostileGenerator(random.Random(9), big_bodies=False)
    for i in range(800):
        frame = generator.request(cat.NAMESRV_TARGET if i % 3 == 0 else cat.BROKER_TARGET).frame
        for name in PROTECTED_NAMES:
            assert name.encode() not in frame
    for _ in range(200):
        assert not any(n.encode() in b"".join(generator.ha_payload(10_000).chunks) for n in PROTECTED_NAMES)


def test_every_served_code_and_some_unknown_ones_come_up():
    generator = HostileGenerator(random.Random(1), big_bodies=False)
    codes = {generator.request(cat.BROKER_TARGET).code for _ in range(1500)}
    assert set(cat.served_codes(cat.BROKER_TARGET)) <= codes
    assert codes & set(cat.UNKNOWN_CODES)
