"""Prometheus metrics of one service instance (its own registry: several can share a process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


@dataclass
class ServeMetrics:
    """The service's counters, gauges and histograms, registered in ``registry``."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        reg = self.registry
        self.clients = Gauge("kappa_serve_clients", "Connected stream clients", ["transport"],
                             registry=reg)
        self.received = Counter("kappa_serve_records_received_total",
                                "Records read by the shared consumers", ["stream"], registry=reg)
        self.sent = Counter("kappa_serve_events_sent_total", "Events sent to clients",
                            ["transport"], registry=reg)
        self.overflows = Counter("kappa_serve_client_overflows_total",
                                 "Clients disconnected because their buffer was full", registry=reg)
        self.send_timeouts = Counter("kappa_serve_send_timeouts_total",
                                     "Clients disconnected because a send timed out", registry=reg)
        self.resumes = Counter("kappa_serve_resumes_total", "Resumed connections by catch-up source",
                               ["source"], registry=reg)
        self.not_retained = Counter("kappa_serve_resume_not_retained_total",
                                    "Resumes that asked for records Kafka no longer retains",
                                    registry=reg)
        self.requests = Counter("kappa_serve_http_requests_total", "HTTP requests",
                                ["route", "status"], registry=reg)
        self.latency = Histogram("kappa_serve_http_request_seconds", "REST request latency",
                                 ["route"], registry=reg,
                                 buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5))
        self.rejected = Counter("kappa_serve_rejected_total",
                                "Requests refused (auth, rate limit, client limit)", ["reason"],
                                registry=reg)
        self.lag = Gauge("kappa_serve_consumer_lag_records",
                         "High watermark minus the hub's position, per stream", ["stream"],
                         registry=reg)
