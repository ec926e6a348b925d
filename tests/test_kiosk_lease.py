"""The kiosk's attract-loop lease (demo.web.kiosk.AttractLease): one tab runs the loop, on a
fake clock. The same in a real browser: tests/test_kiosk.py."""

from demo.web.kiosk import LEASE_S, AttractLease


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_tab_holds_the_loop_until_it_stops_renewing():
    clock = Clock()
    lease = AttractLease(clock=clock)
    assert lease.renew("main", shows_race=True)
    assert not lease.renew("second", shows_race=True)  # held: the second tab runs no loop
    clock.now += LEASE_S - 0.1
    assert lease.renew("main", shows_race=False)        # the holder keeps it on any tab
    clock.now += LEASE_S - 0.1
    assert not lease.renew("second", shows_race=True)  # renewed just now: still held
    clock.now += LEASE_S + 0.1                           # the main tab was closed
    assert lease.renew("second", shows_race=True)
    assert not lease.renew("main", shows_race=True)


def test_a_free_lease_never_goes_to_a_tab_showing_another_tab():
    clock = Clock()
    lease = AttractLease(clock=clock)
    assert not lease.renew("scoreboard screen", shows_race=False)
    assert lease.renew("race screen", shows_race=True)
    clock.now += LEASE_S + 1
    assert not lease.renew("scoreboard screen", shows_race=False)  # expired, but it shows the Scoreboard
