"""A TCP forwarder for the network-partition tests: ``python -m tests.integration.tcp_forward
LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT``. Run inside a network namespace, it makes the
broker's advertised address (127.0.0.1:9092) there lead over the namespace's veth link to the host;
run on the host, it takes that traffic on to the broker. Cutting the link cuts every connection."""

from __future__ import annotations

import asyncio
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def _serve(listen_host: str, listen_port: int, target_host: str, target_port: int) -> None:
    async def connect(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(_pipe(client_reader, server_writer), _pipe(server_reader, client_writer))

    server = await asyncio.start_server(connect, listen_host, listen_port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    host, port, target, target_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    asyncio.run(_serve(host, port, target, target_port))
