"""Outputs reach an event loop through its mailbox (serve/mailbox.py): one wake-up
(call_soon_threadsafe, a system call) per engine step, not one per request's output — the
largest host cost of a step at many requests — delivered in order; a closed loop refuses
posts, so the engine aborts that request."""
import pytest

from tilesafe.engine import SamplingParams
from tilesafe.serve.engine_core import EngineCore
from tilesafe.serve.mailbox import Mailbox, one_wake_up
from tilesafe.serve.request import Request


class FakeLoop:
    """Records call_soon_threadsafe's callbacks; `run()` runs them as the loop would."""

    def __init__(self):
        self.calls, self.closed = [], False

    def is_closed(self):
        return self.closed

    def call_soon_threadsafe(self, fn, *args):
        if self.closed:
            raise RuntimeError("Event loop is closed")
        self.calls.append((fn, args))

    def run(self):
        calls, self.calls = self.calls, []
        for fn, args in calls:
            fn(*args)
        return len(calls)


class Inbox(list):
    put_nowait = list.append


def test_posts_inside_one_wake_up_wake_the_loop_once_and_arrive_in_order():
    loop = FakeLoop()
    box, a, b = Mailbox(loop), Inbox(), Inbox()
    with one_wake_up():
        for i in range(5):
            box.post(a if i % 2 else b, i)
        assert loop.calls == []                     # nothing woken before the step's outputs are all posted
    assert loop.run() == 1 and (a, b) == ([1, 3], [0, 2, 4])
    box.post(a, 5)                                  # outside: at once
    box.post(a, 6)                                  # one wake-up still pending: none more
    assert loop.run() == 1 and a == [1, 3, 5, 6]


def test_a_closed_loop_refuses_posts():
    loop = FakeLoop()
    box = Mailbox(loop)
    loop.closed = True
    with pytest.raises(RuntimeError, match="closed"):
        box.post(Inbox(), 1)


def test_a_loops_mailbox_does_not_keep_the_loop_alive():
    """Old code: the mailbox held its loop, and the module's weak map of mailboxes (loop ->
    mailbox) thereby every loop that ever received an output."""
    import asyncio
    import gc
    import weakref

    from tilesafe.serve.mailbox import mailbox_for
    loop = asyncio.new_event_loop()
    box = mailbox_for(loop)
    assert mailbox_for(loop) is box
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None
    with pytest.raises(RuntimeError, match="Event loop is closed"):
        box.post(Inbox(), 1)                        # a request still holding the box: aborted, as when closed


def test_an_engine_step_wakes_each_receiving_loop_once(llm, llm_one_seq):
    """Old code: one call_soon_threadsafe per request per step."""
    loop = FakeLoop()
    box = Mailbox(loop)
    core = EngineCore(llm, kv_blocks=32, block_size=4)
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    prompts = [[2, 4, 6], [8, 10], [12, 14, 16]]
    inboxes = [Inbox() for _ in prompts]
    for i, (p, inbox) in enumerate(zip(prompts, inboxes)):
        core.add(Request(f"m{i}", llm._sequences({"prompt_token_ids": p}, params)[0],
                         sink=lambda out, inbox=inbox: box.post(inbox, out)))
    wakeups = 0
    while core.has_work():
        core.step()
        wakeups += loop.run()
    # 3 requests x 4 tokens in 4 steps: 12 outputs, one wake-up a step — a step's outputs go out
    # while the next step runs, and the last step's at its end, before its own loop ran.
    assert core.steps == 4 and wakeups == 3
    want = [llm_one_seq.generate({"prompt_token_ids": p}, params)[0].outputs[0].token_ids for p in prompts]
    assert [[t for out in inbox for t in out.token_ids] for inbox in inboxes] == want
    assert all(inbox[-1].finished for inbox in inboxes)
