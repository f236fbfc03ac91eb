"""An OTLP/HTTP trace sink for measuring tracing's cost: accepts and decodes every export
(``tests/support/otlp.py``, the tests' receiver), keeps nothing but counts, and prints how many
spans of how many traces it got when stopped (SIGTERM/SIGINT). Run it beside a benchmark whose
processes inherit ``OTEL_EXPORTER_OTLP_ENDPOINT`` (docs/performance.md, "Tracing cost"):

    python -m bench.otlp_sink --port 4318 &
    OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318 python -m bench.throughput ...
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import signal

from tests.support.otlp import OtlpReceiver


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=4318)
    args = parser.parse_args()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with OtlpReceiver(port=args.port) as sink:
        print(f"OTLP sink on {sink.endpoint}", flush=True)
        await stop.wait()
    names = collections.Counter(span.name.split(" ")[0] for span in sink.spans)
    traces = len({span.trace_id for span in sink.spans})
    summary = {"spans": len(sink.spans), "traces": traces, "exports": sink.requests}
    print("BENCH_JSON " + json.dumps({**summary, "by_name": dict(names)}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
