"""moto's server with the CloudFormation patches of ``moto_shim``: ``python -m tests.deploy.moto_server PORT``.

A process of its own, so the patches never reach the tests' in-process ``mock_aws``.
"""

from __future__ import annotations

import sys
import threading

from moto.server import ThreadedMotoServer

import tests.deploy.moto_shim  # noqa: F401  (patches moto's CloudFormation on import)


def main() -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=int(sys.argv[1]), verbose=False)
    server.start()
    print("moto server ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
