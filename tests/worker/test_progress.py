"""Progress steps (pure parts): shortening, the current step above the text, the finished
steps with their times, and a stream that shows steps within the throttle, from any thread."""

from __future__ import annotations

import threading
import time

from gateway.feishu.outbound.stream_card import answer_of, with_step
from gateway.ops.processes import wait_until
from gateway.worker.progress import STEP_MAX_CHARS, STEPS_KEPT, Done, Steps, shorten
from gateway.worker.streaming import MIN_INTERVAL_S, Stream


def test_a_step_is_one_line_cut_to_the_limit() -> None:
    assert shorten("  search   the\nwiki ") == "search the wiki"
    long = shorten("x" * 500)
    assert len(long) == STEP_MAX_CHARS and long.endswith("…")


def test_the_current_step_shows_as_a_line_above_the_text() -> None:
    assert with_step("the answer", "reading") == "⏳ reading\n\nthe answer"
    assert with_step("", "reading") == "⏳ reading"
    assert with_step("the answer", "") == "the answer"


def test_the_answer_is_read_back_without_the_step_line() -> None:
    for text, step in [("the answer\n\nmore", "reading"), ("", "reading"), ("plain", "")]:
        assert answer_of(with_step(text, step)) == text


def test_steps_finish_in_order_with_their_times_and_repeats_count_once() -> None:
    now = [0.0]
    steps = Steps(lambda: now[0])
    assert steps.done() is None
    assert steps.add("search") and not steps.add("search ") and not steps.add("  ")
    now[0] = 1.5
    steps.add("read")
    now[0] = 4.0
    done = steps.done()
    assert done is not None and steps.current == "read"
    assert [(s.text, s.took_s) for s in done.steps] == [("search", 1.5), ("read", 2.5)]
    assert done.elapsed_s == 4.0 and done.dropped == 0


def test_only_the_last_steps_are_kept_the_rest_counted() -> None:
    steps = Steps()
    for n in range(STEPS_KEPT + 5):
        steps.add(f"step {n}")
    done = steps.done()
    assert done is not None and done.dropped == 5 and len(done.steps) == STEPS_KEPT
    assert done.steps[0].text == "step 5"


class Recorder:
    """A surface that records what it was asked to show (the Surface protocol)."""

    def __init__(self) -> None:
        self.updates = 0
        self.shown: list[str] = []
        self.finished: list[tuple[str, str, Done | None]] = []

    def open(self, text: str) -> bool:
        self.shown.append(text)
        return True

    def update(self, text: str) -> bool:
        self.updates += 1
        self.shown.append(text)
        return True

    def finish(self, text: str, mark: str, done: Done | None = None) -> bool:
        self.finished.append((text, mark, done))
        return True


def test_a_step_opens_the_surface_and_a_throttled_one_shows_once_the_interval_allows() -> None:
    surface = Recorder()
    stream = Stream(surface, what="test", interval_s=0.01, limit_chars=1000,
                    stopped=threading.Event())
    stream.progress("searching the wiki")
    assert surface.shown == ["⏳ searching the wiki"] and stream.live
    stream.progress("reading page 1")  # within the interval: shown a moment later
    wait_until(lambda: surface.shown[-1] == "⏳ reading page 1", 2, "the throttled step")
    stream.close("the answer")
    [(text, mark, done)] = surface.finished
    assert text == "the answer" and mark == ""
    assert done is not None and [s.text for s in done.steps] == ["searching the wiki",
                                                                "reading page 1"]
    stream.progress("too late")
    assert surface.shown[-1] == "⏳ reading page 1", "nothing shows after the close"


def test_steps_from_other_threads_are_shown_no_faster_than_ten_a_second() -> None:
    surface = Recorder()
    stream = Stream(surface, what="test", interval_s=0.001, limit_chars=1000,
                    stopped=threading.Event())
    times: list[float] = []
    original = surface.update

    def timed(text: str) -> bool:
        times.append(time.monotonic())
        return original(text)
    surface.update = timed  # type: ignore[method-assign]
    def report(n: int) -> None:
        for i in range(50):
            stream.progress(f"t{n} step {i}")
    workers = [threading.Thread(target=report, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    stream.consume(f"w{i} " for i in range(200))
    for worker in workers:
        worker.join()
    stream.close(stream.text)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    assert all(gap >= MIN_INTERVAL_S * 0.95 for gap in gaps), min(gaps, default=None)
