"""Health probes shared by the stack, ``kappa doctor`` and the collector."""

from __future__ import annotations

from typing import Any

HEALTH_TIMEOUT_S = 2.0


def kafka_healthy(client_config: dict[str, Any], timeout_s: float = HEALTH_TIMEOUT_S) -> str | None:
    """Return None when the cluster answers a metadata request, else the reason it did not."""
    from confluent_kafka.admin import AdminClient

    timeout_ms = str(int(timeout_s * 1000))
    props: dict[str, Any] = {**client_config, "socket.connection.setup.timeout.ms": timeout_ms}
    props.setdefault("log_level", "0")
    try:
        metadata = AdminClient(props).list_topics(timeout=timeout_s)
    except Exception as exc:
        return f"kafka unreachable at {client_config.get('bootstrap.servers')}: {exc}"
    if not metadata.brokers:
        return "kafka answered with no brokers"
    return None


def redis_healthy(client_kwargs: dict[str, Any], timeout_s: float = HEALTH_TIMEOUT_S) -> str | None:
    """Return None when Redis answers PING, else the reason it did not."""
    import redis

    client = redis.Redis(**client_kwargs, socket_timeout=timeout_s,
                         socket_connect_timeout=timeout_s)
    try:
        client.ping()
    except redis.RedisError as exc:
        return f"redis unreachable at {client_kwargs['host']}:{client_kwargs['port']}: {exc}"
    finally:
        client.close()
    return None
