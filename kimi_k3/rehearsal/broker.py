"""The rehearsal's ZMQ event-plane broker: an XSUB/XPUB forwarder bound to 127.0.0.1 only.

Dynamo 1.6.1's direct ZMQ event plane binds every publisher (KV events, KV metrics, forward-pass metrics, active
sequences) to tcp://0.0.0.0:0 and offers no bind-address setting (DYN_EVENT_PLANE_HOST only changes the address it
advertises; lib/runtime/src/transports/event_plane). In its broker mode (DYN_ZMQ_BROKER_URL="xsub=... , xpub=...")
publishers and subscribers connect to a broker instead and listen on nothing; Dynamo's own broker is a binary
outside the PyPI wheels, so this is the same forwarder with pyzmq (pinned in constraints-rehearse.txt).

Runs in the rehearsal venv: python rehearse_broker.py XSUB_PORT XPUB_PORT (until stopped).
"""

from __future__ import annotations

import sys

import zmq

HOST = "127.0.0.1"
HWM = 100_000  # the runtime's own publisher high-water mark (its log: "sndhwm=100000")


def main(argv: list[str]) -> int:
    xsub_port, xpub_port = (int(a) for a in argv)
    ctx = zmq.Context()
    xsub, xpub = ctx.socket(zmq.XSUB), ctx.socket(zmq.XPUB)
    xsub.setsockopt(zmq.RCVHWM, HWM)
    xpub.setsockopt(zmq.SNDHWM, HWM)
    xsub.bind(f"tcp://{HOST}:{xsub_port}")
    xpub.bind(f"tcp://{HOST}:{xpub_port}")
    print(f"ZMQ broker: xsub tcp://{HOST}:{xsub_port}, xpub tcp://{HOST}:{xpub_port}", flush=True)
    try:
        zmq.proxy(xsub, xpub)  # until the rehearsal stops this process (SIGTERM's default action ends it)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
