"""The check-back's bookkeeping: what an END_TRANSACTION ends, and where the two progress
offsets (half queue, op queue) may move."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.broker.transaction_progress import GIVEN_UP_KEEP_MS, TransactionProgress


def test_an_answer_for_the_original_ends_its_copy_and_a_second_answer_ends_nothing():
    progress = TransactionProgress(0, 0)
    progress.register(0, 0)
    progress.put_back(0, 0, 5)  # checked once: the copy at 5 holds the transaction now
    assert progress.to_end(0, 0) == [5]  # the producer's own late answer for the original
    progress.on_op(0, 5)
    assert progress.to_end(5, 0) == []  # the answer to the check comes too late
    assert progress.to_end(0, 0) == []


def test_a_message_the_check_back_has_not_reached_can_be_ended_after_a_put_back():
    progress = TransactionProgress(0, 0)
    progress.register(0, 0)
    progress.put_back(0, 0, 2)  # the copy lands after 1, which the round never reached
    assert progress.to_end(1, 1) == [1]


def test_a_message_sent_after_the_last_scan_can_be_ended():
    progress = TransactionProgress(0, 0)
    assert progress.to_end(3, 3) == [3]
    progress.on_op(0, 3)
    assert progress.to_end(3, 3) == []


def test_an_ended_transaction_is_not_ended_again():
    progress = TransactionProgress(0, 0)
    progress.register(0, 0)
    progress.on_op(0, 0)  # the rollback after its last check
    assert progress.advance() == 1
    assert progress.to_end(0, 0) == []


def test_the_half_offset_stops_at_the_first_open_message_and_the_op_offset_before_its_ops():
    progress = TransactionProgress(0, 0)
    for offset in range(4):
        progress.register(offset, offset)
    progress.on_op(0, 0)
    progress.on_op(1, 2)  # 2 ends before 1
    assert progress.advance() == 1  # 1 is still open
    assert progress.op_offset() == 1  # op 1 (for half 2) is still needed after a restart
    progress.put_back(1, 1, 4)
    progress.on_op(2, 3)
    assert progress.advance() == 4  # 4, the copy of 1, is open
    assert progress.op_offset() == 3  # every op read concerns a settled offset


def test_expired_files_move_the_half_offset_past_what_they_held():
    progress = TransactionProgress(0, 0)
    progress.register(0, 0)
    progress.register(7, 7)
    progress.jump_to(5)
    assert progress.half_offset == 5
    assert progress.to_end(7, 7) == [7]
    assert progress.to_end(0, 0) == []


def test_a_given_up_transaction_is_checked_no_more_but_a_late_answer_ends_it_once():
    progress = TransactionProgress(0, 0)
    progress.register(0, 0)
    progress.put_back(0, 0, 3)
    progress.on_given_up(0, 3, 0)  # op 0 gives the copy at 3 up after its last check
    assert progress.is_settled(3)
    assert progress.advance() == 1
    assert progress.op_offset() == 0  # a restart reads the give-up again
    assert progress.to_end(0, 0) == [3]  # the producer's late answer, for the original
    progress.on_op(1, 3)
    assert progress.to_end(0, 0) == progress.to_end(3, 0) == []
    assert progress.op_offset() == 1  # (until the half offset passes 3, as for any op)


def test_a_given_up_transaction_whose_files_expired_holds_the_op_offset_no_more():
    progress = TransactionProgress(10, 0)
    progress.on_given_up(0, 3, 3)  # read at load: given up below the half offset
    progress.on_op(1, 5)
    assert progress.op_offset() == 0
    assert progress.to_end(3, 3) == [3]
    progress.jump_to(4)  # the half queue's first file, holding 3, expired
    assert progress.op_offset() == 2
    assert progress.to_end(3, 3) == []


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["send", "check", "give up", "end", "round"]),
                          st.integers(0, 30)),
                max_size=80))
def test_against_a_model_every_transaction_ends_at_most_once(steps):
    """Transactions are sent, checked (put back), ended by any of their half messages, in any
    order: none is ended twice, none that is still open is passed by the half offset, and a
    restart from the two persisted offsets knows every open one."""
    progress = TransactionProgress(0, 0)
    queue: list[int] = []  # half queue: offset -> origin
    ops: list[tuple[int, int | None]] = []  # op queue: (half offset, origin if a give-up)
    ended: set[int] = set()  # origins ended
    for action, n in steps:
        if action == "send" or not queue:
            queue.append(len(queue))
            continue
        offset = n % len(queue)
        origin = queue[offset]
        if action == "check" and not progress.is_settled(offset):
            progress.register(offset, origin)
            queue.append(origin)
            progress.put_back(offset, origin, len(queue) - 1)
        elif action == "give up" and not progress.is_settled(offset) \
                and offset == max(o for o in range(len(queue)) if queue[o] == origin):
            progress.register(offset, origin)  # its last check was its last holder's
            for half in progress.to_end(offset, origin):
                ops.append((half, origin))
                progress.on_given_up(len(ops) - 1, half, origin)
        elif action == "end":
            to_end = progress.to_end(offset, origin)
            # An open one ends, given up or not, and only once.
            assert bool(to_end) == (origin not in ended)
            ended.add(origin)
            for half in to_end:
                ops.append((half, None))
                progress.on_op(len(ops) - 1, half)
        elif action == "round":
            for scanned in range(progress.half_offset, len(queue)):
                progress.register(scanned, queue[scanned])
            progress.advance()
        open_offsets = [o for o in range(len(queue))
                        if queue[o] not in ended and not progress.is_settled(o)]
        assert all(o >= progress.half_offset for o in open_offsets)
        # What a restart would rebuild from the persisted offsets.
        again = TransactionProgress(progress.half_offset, progress.op_offset())
        for op_offset in range(progress.op_offset(), len(ops)):
            half, given_up = ops[op_offset]
            if given_up is None:
                again.on_op(op_offset, half)
            else:
                again.on_given_up(op_offset, half, given_up)
        for o in range(again.half_offset, len(queue)):
            again.register(o, queue[o])  # settled ones too: they tell what they superseded
        for origin in set(queue):
            holders = [o for o in range(len(queue)) if queue[o] == origin]
            if origin in ended:
                assert all(again.to_end(o, origin) == [] for o in holders)
            else:  # (given up or not: a late answer still ends it)
                assert again.to_end(holders[-1], origin) == [holders[-1]]
                assert again.to_end(holders[0], origin)


def test_a_transaction_given_up_a_day_ago_holds_the_op_offset_no_more():
    # It held the op queue's progress back until the half queue's file expired (days): every
    # restart read all op messages written since.
    progress = TransactionProgress(10, 0)
    progress.on_given_up(0, 3, 3, at_ms=1_000)
    progress.on_given_up(1, 4, 4, at_ms=1_000 + GIVEN_UP_KEEP_MS)
    progress.forget_given_up(1_000 + GIVEN_UP_KEEP_MS)
    assert progress.op_offset() == 1
    assert progress.to_end(3, 3) == []  # too late to end now
    assert progress.to_end(4, 4) == [4]
