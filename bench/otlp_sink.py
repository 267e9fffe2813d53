"""An OTLP/HTTP endpoint that accepts and discards traces (the benchmark's collector)."""

import sys

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route


async def traces(request: Request) -> Response:
    await request.body()
    return Response(b"", media_type="application/x-protobuf")


app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
