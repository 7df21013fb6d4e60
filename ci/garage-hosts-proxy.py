"""A TCP proxy for ci/garage-hosts: LISTEN_ADDR LISTEN_PORT UPSTREAM_ADDR UPSTREAM_PORT MODE_FILE.

Forwards every connection to the upstream. MODE_FILE (re-read every 100 ms) says how:
`pass`; `delay MS` (each piece of data, either way, waits MS milliseconds first);
`drop-responses` (requests reach the upstream, its answers are discarded: a one-way loss).
The kernel of the test machines has no netem qdisc, so delay and loss come from here.
"""

import asyncio
import sys

LISTEN_ADDR, LISTEN_PORT, UP_ADDR, UP_PORT, MODE_FILE = sys.argv[1:6]
CONNECT_TIMEOUT_S = 5.0
mode = ("pass", 0)


def parse_mode(text):
    words = text.split()
    if len(words) == 2 and words[0] == "delay" and words[1].isdigit():
        return ("delay", int(words[1]))
    if words == ["drop-responses"]:
        return ("drop-responses", 0)
    return ("pass", 0)


async def watch_mode():
    global mode
    while True:
        try:
            with open(MODE_FILE, encoding="ascii") as f:
                new_mode = parse_mode(f.read())
        except (OSError, ValueError):
            new_mode = ("pass", 0)
        if new_mode != mode:
            print(f"proxy: mode {new_mode}", file=sys.stderr, flush=True)
            mode = new_mode
        await asyncio.sleep(0.1)


async def pump(reader, writer, is_response):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            kind, delay_ms = mode
            if kind == "delay":
                await asyncio.sleep(delay_ms / 1000.0)
            if kind == "drop-responses" and is_response:
                continue
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def handle(client_reader, client_writer):
    try:
        up_reader, up_writer = await asyncio.wait_for(
            asyncio.open_connection(UP_ADDR, int(UP_PORT)), CONNECT_TIMEOUT_S
        )
    except (OSError, asyncio.TimeoutError) as e:
        print(f"proxy: upstream connect failed: {e!r}", file=sys.stderr, flush=True)
        client_writer.close()
        return
    await asyncio.gather(
        pump(client_reader, up_writer, False), pump(up_reader, client_writer, True)
    )


async def main():
    asyncio.get_running_loop().create_task(watch_mode())
    server = await asyncio.start_server(handle, LISTEN_ADDR, int(LISTEN_PORT))
    async with server:
        await server.serve_forever()


asyncio.run(main())
