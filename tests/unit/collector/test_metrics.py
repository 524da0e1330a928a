"""Prometheus text out and back in; rates over a window; a snapshot from the log alone."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from jobs.collector import metrics


def _snapshot() -> metrics.Snapshot:
    return metrics.Snapshot(
        totals={"accepted": 10, "acknowledged": 7, "rejected": 2, "failed": 1},
        rejected_by_reason={"invalid_json": 1, "oversize": 1},
        gauges={"pending": 3, "failed_store": 1, "buffer_limit": 100, "broker_up": 1,
                "oldest_pending_age_seconds": 1.25},
        rates={"accepted": 4.5})


def test_render_is_prometheus_client_text():
    text = metrics.render(_snapshot())
    lines = text.splitlines()
    assert "# TYPE kappa_collector_accepted_total counter" in lines
    assert "kappa_collector_accepted_total 10.0" in lines  # prometheus-client writes floats
    assert "kappa_collector_dlq_delivered_total 0.0" in lines
    assert 'kappa_collector_rejected_by_reason_total{reason="oversize"} 1.0' in lines
    assert "kappa_collector_pending 3.0" in lines
    assert "kappa_collector_oldest_pending_age_seconds 1.25" in lines
    assert 'kappa_collector_rate{kind="accepted"} 4.5' in lines
    assert text.endswith("\n")
    assert metrics.CONTENT_TYPE == "text/plain; version=1.0.0; charset=utf-8"


def test_prometheus_clients_own_parser_reads_the_families():
    families = {f.name: f for f in text_string_to_metric_families(metrics.render(_snapshot()))}
    assert families["kappa_collector_accepted"].type == "counter"
    assert families["kappa_collector_pending"].type == "gauge"
    reasons = {s.labels["reason"]: s.value for s in families["kappa_collector_rejected_by_reason"].samples}
    assert reasons == {"invalid_json": 1.0, "oversize": 1.0}
    assert len(families) == 7 + 1 + 7 + 1  # counters, by reason, gauges, rate


def test_parse_reads_back_what_render_wrote():
    parsed = metrics.parse(metrics.render(_snapshot()))
    assert parsed.totals["accepted"] == 10 and parsed.totals["failed"] == 1
    assert parsed.rejected_by_reason == {"invalid_json": 1, "oversize": 1}
    assert parsed.gauges["pending"] == 3 and parsed.gauges["oldest_pending_age_seconds"] == 1.25
    assert parsed.rates == {"accepted": 4.5}
    assert parsed.value("rate:accepted") == 4.5 and parsed.value("pending") == 3


def test_rates_cover_the_window():
    meter = metrics.RateMeter(window_s=10)
    assert meter.rates()["accepted"] == 0.0
    for second in range(0, 31):
        meter.sample({"accepted": second * 100, "acknowledged": second * 50}, now=float(second))
    rates = meter.rates()
    assert rates["accepted"] == 100.0 and rates["acknowledged"] == 50.0 and rates["failed"] == 0.0


def test_snapshot_from_the_log_file():
    snap = metrics.from_log({"accepted": 5, "rejected:wrong_type": 2, "rejected": 2},
                            {"record": 1, "reject": 0, "failed": 4}, 50, 2.0)
    assert snap.totals["accepted"] == 5 and snap.rejected_by_reason == {"wrong_type": 2}
    assert snap.gauges == {"pending": 1, "pending_rejects": 0, "failed_store": 4, "buffer_limit": 50,
                           "oldest_pending_age_seconds": 2.0}
