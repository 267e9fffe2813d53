"""The route-call clients by name: the lean HTTP/1.1 client (default) or httpx.

Apart from `transport.py` (the protocol both implement) so that neither implementation's
module imports the other, even through a deferred import.
"""

from __future__ import annotations

from gate.gateway.transport import Transport, TransportName


def create_transport(
    name: TransportName, *, connect_timeout_s: float, read_timeout_s: float
) -> Transport:
    """The named transport; the read timeout bounds the wait for the head and each read."""
    if name == "httpx":
        from gate.gateway.httpx_transport import HttpxTransport

        return HttpxTransport(connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s)
    from gate.gateway.http1 import Pool

    return Pool(connect_timeout_s=connect_timeout_s, read_timeout_s=read_timeout_s)
