"""`tidegate serve` started by `make serve` takes the terminal's foreground for itself.

Ctrl-C sends SIGINT to every process of the terminal's foreground process group. Under `make serve`
that group holds make too, and make, whatever its child does, answers SIGINT by waiting for the child
and then killing itself with the same signal: the shell reports 130 and make prints `Interrupt`,
however cleanly the gateway stopped. So when make started it (GNU make exports `MAKELEVEL` to its
recipes) from a terminal, the gateway moves into a process group of its own and makes that group the
terminal's foreground one: Ctrl-C then reaches the gateway (and the workers it starts) alone, it
stops as it always does, exits 0, and make reports that 0. The terminal goes back to make's group as
the gateway exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Iterator

_given_back: tuple[int, int] | None = None  # (the terminal's fd, the group it is handed back to)


@contextlib.contextmanager
def _no_sigttou() -> Iterator[None]:
    # a process outside the foreground group that sets the foreground gets SIGTTOU (stopped) unless
    # it ignores it: moving out of make's group makes the gateway such a process
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTTOU, previous)


def take_foreground_from_make() -> bool:
    """Under make, on a terminal where make's group is in the foreground: the gateway's own group in
    the foreground instead (and make's back when the process exits). Whether it did."""
    global _given_back
    if "MAKELEVEL" not in os.environ or _given_back is not None:
        return False
    try:
        fd = sys.stdin.fileno()
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp() or os.getpgrp() == os.getpid():
            return False  # not on a terminal, in the background, or already a group of its own
        make_group = os.getpgrp()
        os.setpgid(0, 0)
        with _no_sigttou():
            os.tcsetpgrp(fd, os.getpgrp())
    except (OSError, ValueError):  # no usable terminal: Ctrl-C works as before
        return False
    _given_back = (fd, make_group)
    atexit.register(give_back)
    return True


def give_back() -> None:
    """The terminal's foreground back to make's group, once; before every exit, `os._exit` included."""
    global _given_back
    if _given_back is None:
        return
    fd, group = _given_back
    _given_back = None
    with contextlib.suppress(OSError), _no_sigttou():
        os.tcsetpgrp(fd, group)
