"""A webhook dispatcher alone in a process, for the tests that SIGKILL it: it delivers what gold.alert_events
holds (recovery at start) to one receiver and exits 0 once idle, or dies at the kill point it is given.

    python -m tests.alerts.webhook_child LAKEHOUSE URL [--flush-every SECONDS] [--kill-at webhook:<n>:after_post]
"""

from __future__ import annotations

import argparse
import sys

from foundation import kill_points
from tests.alerts.test_webhook import dispatcher
from tests.kill_at import armed_sigkill


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="webhook_child")
    p.add_argument("lakehouse")
    p.add_argument("url")
    p.add_argument("--flush-every", type=float, default=0.5, help="seconds between outcome flushes (0.5)")
    p.add_argument("--kill-at", type=armed_sigkill, default=None,
                   help="SIGKILL at this kill point, e.g. webhook:2:after_post (once the 2nd POST is answered)")
    a = p.parse_args(argv)
    kill_points.arm(a.kill_at)
    d = dispatcher(a.lakehouse, a.url, flush_every_s=a.flush_every).start()
    try:
        if not d.wait_idle(120):
            print("webhook_child: not idle after 120 s", file=sys.stderr)
            return 1
    finally:
        d.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
