"""``Plan.schedule()``: one comparable value for what a run executes, equal however a plan
gives its order (letters, windows, the flush default) and different when sizes or order
differ."""

from __future__ import annotations

from tidgap import Plan


def test_one_schedule_however_the_order_is_given() -> None:
    flush = Plan.of([[4, 4], [4, 4]], [[4, 4], [4, 4]])
    letters = Plan.of([[4, 4], [4, 4]], [[4, 4], [4, 4]], order=["FFBB", "FFBB"])
    windows = Plan.of([[4, 4], [4, 4]], [[4, 4], [4, 4]], windows=[8, 8])
    assert flush.schedule() == letters.schedule() == windows.schedule()
    assert hash(flush.schedule()) == hash(windows.schedule())  # a dict key


def test_another_order_or_size_is_another_schedule() -> None:
    gpipe = Plan.of([[8, 8], [8, 8]], [[8, 8], [8, 8]])
    one_f_one_b = Plan.of([[8, 8], [8, 8]], [[8, 8], [8, 8]], order=["FFBB", "FBFB"])
    other_backward = Plan.of([[8, 8], [8, 8]], [[8, 8], [4, 12]])
    assert len({gpipe.schedule(), one_f_one_b.schedule(), other_backward.schedule()}) == 3
