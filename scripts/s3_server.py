"""A real S3 on loopback for the tests and for trying `s3://` checkpoints, data and models on a laptop:
moto's server in a virtualenv of its own (moto pulls botocore, whose python-dateutil pin conflicts with
the launcher's kubernetes client, so it cannot share the project's environment). The venv is built once
and cached like the image's (scripts/image_venv.py, keyed by its pins).

    python scripts/s3_server.py --python   # build if needed, print the venv's python
    python scripts/s3_server.py            # serve on a free port of 127.0.0.1, print its endpoint URL

Point a run at it with the standard variables: AWS_ENDPOINT_URL=<printed>, AWS_REGION=us-east-1 and any
AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (moto accepts every key).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from image_venv import cached_venv  # noqa: E402

# 5.2.5 or newer: 5.2.1 leaves out the ETag header that AWS's CRT client (s3torchconnector) needs.
PINS = ["moto[s3]==5.2.5", "flask==3.1.3", "flask-cors==6.0.5"]

SERVE = """
import logging, sys
from moto.server import ThreadedMotoServer
logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
host, port = server.get_host_and_port()
print(f"http://{host}:{port}", flush=True)
while sys.stdin.read(1):  # until the parent closes its end of the pipe
    pass
server.stop()
"""


def ensure(check_only: bool = False) -> Path | None:
    return cached_venv("s3-server", [["install", *PINS]], check_only)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", action="store_true", help="print the server venv's python and exit")
    args = parser.parse_args()
    python = ensure()
    if args.python:
        print(python)
        return 0
    # The server replaces this process (one process, no child of ours left running when it stops).
    os.execv(str(python), [str(python), "-c", SERVE])


if __name__ == "__main__":
    sys.exit(main())
