"""Issue 18 item 20: a service port taken between choosing and binding it costs a retry, not the run."""

from __future__ import annotations

import socket

from jobs.config.load import load_config
from tests.conftest import free_port, start_stack


def test_the_stack_starts_on_new_ports_when_its_port_was_taken(tmp_path):
    with socket.socket() as squatter:  # another suite's service took the chosen port
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports: list[int] = []

        def config_for(attempt: int):
            ports.append(taken if attempt == 0 else free_port())
            return load_config("test", environ={}, overrides={
                "kafka.embedded": False, "redis.port": ports[-1],
                "stack.data_dir": str(tmp_path / f"stack-{attempt}")})

        embedded, config = start_stack(config_for)
        try:
            assert len(ports) == 2 and config.redis.port == ports[1] != taken
            (redis,) = [s for s in embedded.status() if s.name == "redis"]
            assert redis.healthy and redis.address == f"127.0.0.1:{ports[1]}"
        finally:
            embedded.down(progress=lambda message: None)
