"""Wall time for the controller. The only clock the adapters and handlers read, so the tests and the
twin can run the real handlers on virtual time by replacing `now`."""

import time


def now() -> float:
    return time.time()
