#!/usr/bin/env python3
"""A TCP relay that adds a fixed one-way delay in each direction, for
bench/s3/s3_vs_s3torchconnector.sh on a kernel without the netem qdisc (the
development machine's has tbf and htb only, so `tc` can shape the rate but
cannot add latency).

  delay_relay.py LISTEN_ADDR LISTEN_PORT UPSTREAM_ADDR UPSTREAM_PORT DELAY_MS

Every chunk read from either side is written to the other DELAY_MS after it
arrived, in order, so a request and its answer take 2 x DELAY_MS more: the
round trip a client sees per request, as on a link with that latency. What it
does not model: TCP's own window growth over that round trip (the relay
acknowledges at once), which with reused connections and objects of about
100 KB matters little."""
import asyncio
import sys
import time


async def pump(reader, writer, delay):
    queue = asyncio.Queue()

    async def send():
        while True:
            due, chunk = await queue.get()
            if chunk is None:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(chunk)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(send())
    try:
        while True:
            chunk = await reader.read(1 << 18)
            if not chunk:
                break
            queue.put_nowait((time.monotonic() + delay, chunk))
    except ConnectionError:
        pass
    queue.put_nowait((0, None))
    try:
        await sender
    except ConnectionError:
        pass


async def main():
    addr, port, up_addr, up_port, delay_ms = sys.argv[1:6]
    delay = float(delay_ms) / 1000.0

    async def handle(reader, writer):
        try:
            up_reader, up_writer = await asyncio.open_connection(up_addr, int(up_port))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pump(reader, up_writer, delay), pump(up_reader, writer, delay))

    server = await asyncio.start_server(handle, addr, int(port), backlog=1024)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
