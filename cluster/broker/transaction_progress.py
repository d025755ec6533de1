"""How far the transaction check-back has come through the half queue (no I/O here).

RocketMQ keeps this as two consumer offsets of the system group ``CID_RMQ_SYS_TRANS``: one on
the half queue (every half message below it is settled) and one on the op queue (every op
message below it concerns a settled half message). A half message is settled when an op
message ends it (commit or rollback), when the check-back puts it back as a newer copy with
``TRANSACTION_CHECK_TIMES`` one higher, or when it is given up after its last check. Both
offsets live in consumerOffset.json, so the check-back resumes where it stopped after a restart
and never reads the whole history again; the check count travels in the copies, so it survives
a restart too.

A transaction may be held by several half messages over its life (the original and its
copies); each copy names the original's offset in ``TRAN_PREPARED_QUEUE_OFFSET``, its
*origin*. An END_TRANSACTION for any of them ends the transaction once: the producer's own late
answer for the original and the answer to a check of a copy cannot both commit it.

A transaction checked ``transactionCheckMax`` times is *given up*: settled for the check-back,
which never asks about it again, but not ended. As in RocketMQ, a producer's END_TRANSACTION
that comes later still commits or rolls it back, once. A given-up op message (its own tag)
records it, and the op queue's progress stays at the oldest given-up transaction not ended
since, so that a restart reads that op again and still knows. For a day (GIVEN_UP_KEEP_MS):
kept longer, one forgotten transaction would make every restart read all the op messages
written since, up to the retention time.
"""

from __future__ import annotations

GIVEN_UP_KEEP_MS = 24 * 3600 * 1000  # a given-up transaction can still be ended this long


class TransactionProgress:
    def __init__(self, half_offset: int, op_offset: int) -> None:
        self.half_offset = half_offset  # every half message below is settled
        self.op_read = op_offset  # op messages below were read (or written here)
        # Half offset (>= half_offset) -> the op message that ended it, or None when it was
        # put back, rolled back without an op being read yet, or is a hole in the queue.
        self.settled: dict[int, int | None] = {}
        self.live: dict[int, set[int]] = {}  # origin -> its unsettled half offsets
        self.origin_of: dict[int, int] = {}
        # Given-up half offset -> (its origin, the op message that gave it up, when: ms).
        self.given_up: dict[int, tuple[int, int, int]] = {}

    def is_settled(self, offset: int) -> bool:
        return offset < self.half_offset or offset in self.settled

    def on_op(self, op_offset: int, half_offset: int) -> None:
        """An op message (read at load, or just written) ends ``half_offset``."""
        self.op_read = max(self.op_read, op_offset + 1)
        self.given_up.pop(half_offset, None)
        if half_offset >= self.half_offset:
            self._settle(half_offset, op_offset)

    def on_given_up(self, op_offset: int, half_offset: int, origin: int, at_ms: int = 0) -> None:
        """A given-up op message (read at load, or just written, at ``at_ms``): ``half_offset``,
        holding the transaction first stored at ``origin``, is checked no more but may still be
        ended (until ``forget_given_up`` passes it)."""
        self.op_read = max(self.op_read, op_offset + 1)
        self.given_up[half_offset] = (origin, op_offset, at_ms)
        if half_offset >= self.half_offset:
            self._settle(half_offset, None)

    def register(self, offset: int, origin: int) -> None:
        """A half message seen in the queue, holding the transaction first stored at ``origin``.

        Copies are only ever appended after the message they replace, so a later half message
        of the same transaction supersedes the earlier ones: after a restart from a half offset
        that had not yet moved past a put-back original, the original is not checked again."""
        for older in [o for o in self.live.get(origin, ()) if o < offset]:
            self._settle(older, None)
        if self.is_settled(offset):
            return
        self.live.setdefault(origin, set()).add(offset)
        self.origin_of[offset] = origin

    def skip(self, offset: int) -> None:
        """Nothing to check there (a hole, an unreadable record)."""
        if offset >= self.half_offset:
            self._settle(offset, None)

    def put_back(self, offset: int, origin: int, copy: int) -> None:
        """The check-back stored ``copy`` in place of ``offset`` (one more check counted)."""
        self._settle(offset, None)
        self.register(copy, origin)

    def to_end(self, offset: int, origin: int) -> list[int]:
        """The half offsets an END_TRANSACTION for ``offset`` ends (an op message for each);
        empty when its transaction has ended already. A given-up transaction has not."""
        offsets = set(self.live.get(origin, ()))
        offsets.update(o for o, (their_origin, _, _) in self.given_up.items()
                       if their_origin == origin)
        if not self.is_settled(offset):
            # Open, registered or not: a half message the check-back has not reached yet (it
            # stopped early, or the message arrived since) can only be an original, since
            # copies are registered when they are made.
            offsets.add(offset)
        return sorted(offsets)

    def advance(self) -> int:
        """Move the half offset over what is settled; returns it."""
        while self.half_offset in self.settled:
            del self.settled[self.half_offset]
            self.half_offset += 1
        return self.half_offset

    def jump_to(self, offset: int) -> None:
        """The queue's files below ``offset`` expired: nothing there can be checked, nor ended
        by a late answer, any more."""
        for gone in [o for o in self.given_up if o < offset]:
            del self.given_up[gone]
        if offset <= self.half_offset:
            return
        for gone in [o for o in self.origin_of if o < offset]:
            self._settle(gone, None)
        for gone in [o for o in self.settled if o < offset]:
            del self.settled[gone]
        self.half_offset = offset

    def forget_given_up(self, before_ms: int) -> None:
        """Given-up transactions given up before ``before_ms`` can be ended no more: they hold
        the op queue's progress back no longer."""
        for gone in [o for o, (_, _, at_ms) in self.given_up.items() if at_ms < before_ms]:
            del self.given_up[gone]

    def op_offset(self) -> int:
        """The op queue's progress: below it, every op message concerns a settled half offset
        and none gave up a transaction that may still end."""
        pending = [op for op in self.settled.values() if op is not None]
        pending.extend(op for _, op, _ in self.given_up.values())
        return min(pending, default=self.op_read)

    def _settle(self, offset: int, op_offset: int | None) -> None:
        if self.settled.get(offset) is None:
            self.settled[offset] = op_offset
        origin = self.origin_of.pop(offset, None)
        if origin is not None:
            copies = self.live.get(origin)
            if copies is not None:
                copies.discard(offset)
                if not copies:
                    del self.live[origin]
