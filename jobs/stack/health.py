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
    if client_kwargs.get("password"):
        return _redis_open_without_password(client_kwargs, timeout_s)
    return None


def _redis_open_without_password(client_kwargs: dict[str, Any], timeout_s: float) -> str | None:
    """A password is configured: the server must refuse clients that do not AUTH."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    anonymous = redis.Redis(**{**client_kwargs, "password": None}, socket_timeout=timeout_s,
                            socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 0))
    try:
        anonymous.ping()
    except redis.AuthenticationError:
        return None
    except redis.ResponseError as exc:  # NOAUTH, or HELLO refused before AUTH (RESP3)
        if "NOAUTH" in str(exc) or "authenticated" in str(exc):
            return None
        return f"redis at {client_kwargs['host']}:{client_kwargs['port']}: {exc}"
    finally:
        anonymous.close()
    return (f"redis at {client_kwargs['host']}:{client_kwargs['port']} answers without a password "
            "although KAPPA_REDIS_PASSWORD is set: restart the embedded one (`kappa stack down` then "
            "`up`) or set requirepass on the server")
