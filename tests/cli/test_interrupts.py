"""Ctrl-C is never lost: a KeyboardInterrupt that CPython drops (raised inside a garbage collector's
callback) is raised again at the command's next progress event, and is not printed as a traceback."""
import signal
import weakref

import pytest

from cli.interrupts import ctrl_c_kept


class Garbage:
    pass


def test_a_ctrl_c_dropped_inside_a_weakref_callback_is_raised_again_at_the_next_check(capsys):
    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_kept() as ctrl_c:
        garbage = Garbage()
        weakref.finalize(garbage, signal.raise_signal, signal.SIGINT)  # the signal lands in the callback
        del garbage  # the callback runs here; its KeyboardInterrupt is dropped by CPython
        with pytest.raises(KeyboardInterrupt):
            ctrl_c.check()
        ctrl_c.check()  # once only
    assert "Traceback" not in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before  # the handler is given back


def test_a_ctrl_c_raised_through_is_raised_once_at_most_again():
    with ctrl_c_kept() as ctrl_c:
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        with pytest.raises(KeyboardInterrupt):  # the loop stops at the first; a second is harmless
            ctrl_c.check()
        ctrl_c.check()
