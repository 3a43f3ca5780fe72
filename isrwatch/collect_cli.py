"""`isrwatch collect`: watch a real Kafka cluster into the same bronze tables `isrwatch emulate` writes."""

from __future__ import annotations

import argparse
import functools
import signal
import threading
from pathlib import Path
from typing import Any

from foundation.logs import logger
from isrwatch.arguments import lakehouse_root, seconds_argument

log = logger("collect")


def _metrics_url(value: str) -> tuple[int | None, str]:
    """`URL` (the node id is read from the exposition) or `ID=URL`."""
    node, sep, url = value.partition("=")
    if sep and node.isdigit():
        return int(node), url
    if not value.startswith(("http://", "https://")):
        raise argparse.ArgumentTypeError(f"--metrics-url expects [ID=]http://HOST:PORT/metrics, got {value!r}")
    return None, value


def add_collect_parser(sub: Any) -> None:
    p = sub.add_parser("collect", help="watch a real Kafka cluster into the bronze tables",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                       description="Reads a Kafka cluster every interval (Admin API broker by broker, each broker's "
                                   "Prometheus JMX exporter, an end-to-end canary) and appends one batch to the "
                                   "bronze tables per interval, as `isrwatch emulate` does for the emulator.")
    p.add_argument("--bootstrap-servers", required=True, metavar="HOST:PORT[,HOST:PORT…]",
                   help="brokers to start from; the others are learned from the cluster")
    p.add_argument("--metrics-url", action="append", type=_metrics_url, default=[], metavar="[ID=]URL",
                   help="a broker's or controller's Prometheus JMX exporter (conf/jmx_exporter.yaml's rules, the "
                        "exporter's default rules, Strimzi's or Confluent's); repeat it")
    p.add_argument("--alert-rules", default=None, metavar="FILE",
                   help="the alert rules (default conf/alerts.yaml): the warnings about a node's missing metrics name "
                        "the rules they keep from firing")
    p.add_argument("--lakehouse", type=lakehouse_root, default="lakehouse",
                   help="lakehouse root for the bronze Delta tables")
    p.add_argument("--state-dir", default=None,
                   help="local folder for what the collector remembers of a cluster between runs (default: the "
                        "lakehouse; required when the lakehouse is on an object store)")
    p.add_argument("--interval", type=seconds_argument, default=1.0, help="collection interval (e.g. 1s, 500ms)")
    p.add_argument("--timeout", type=seconds_argument, default=0.5,
                   help="per-broker request timeout: a broker slower than this is reported as not answering")
    p.add_argument("--scrape-timeout", type=seconds_argument, default=10.0,
                   help="the most one metrics scrape may take; each URL is scraped at its exporter's own pace, and a "
                        "node is not reporting once a scrape runs past 3x its recent ones (at least --timeout)")
    p.add_argument("--duration", type=seconds_argument, default=None,
                   help="stop after this long (default: until Ctrl-C)")
    p.add_argument("--no-canary", action="store_true", help="do not produce and consume the canary topic")
    p.add_argument("--canary-topic", default="__isrwatch_canary", help="the canary's topic (created if absent)")
    p.add_argument("--canary-rate", type=float, default=10.0, help="canary records per second per partition")
    p.add_argument("--quiet", action="store_true", help="no progress line per interval")
    p.add_argument("--command-config", default=None, metavar="FILE",
                   help="Kafka client properties (as kafka-topics.sh --command-config takes them) for every "
                        "connection to the brokers, the canary's too: security.protocol, ssl.truststore.location/"
                        "password/type/certificates, ssl.keystore.location/password/type/certificate.chain/key, "
                        "ssl.key.password, ssl.endpoint.identification.algorithm, sasl.mechanism (PLAIN, "
                        "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER), sasl.jaas.config, "
                        "sasl.oauthbearer.token.endpoint.url; secrets as ${env:NAME}. See docs/collector.md#security")


def main_collect(args: argparse.Namespace) -> int:
    from collector.canary_topic import CanaryError
    from collector.client_properties import security_from_file
    from collector.client_security import PLAINTEXT_SECURITY
    from collector.cluster_view import CollectorError
    from collector.collect_loop import Collector, CollectSettings
    from collector.scrape_schedule import ScrapeTiming
    from collector.security_errors import SecurityConfigError
    from foundation.bronze_sink import SinkSchemaError

    security = PLAINTEXT_SECURITY
    if args.command_config is not None:
        try:
            security = security_from_file(args.command_config)
        except SecurityConfigError as e:
            log.error(f"isrwatch collect: {e}")
            return 2
        for key in security.ignored_properties:
            log.warning(f"isrwatch collect: warning: {key} in {args.command_config} is ignored (the collector has its "
                        "own timeouts and client ids)")
    from pipelines.alert_rules import AlertConfigError
    from pipelines.rule_metrics import metrics_read_by_rules_file

    try:
        rule_metrics = metrics_read_by_rules_file(args.alert_rules)
    except AlertConfigError as e:
        log.error(f"isrwatch collect: {e}")
        return 2
    urls: dict[int | None, list[str]] = {}
    for node, url in args.metrics_url:
        urls.setdefault(node, []).append(url)
    settings = CollectSettings(bootstrap_servers=args.bootstrap_servers.split(","), lakehouse=args.lakehouse,
                               metrics_urls=urls, interval_s=args.interval, timeout_s=args.timeout,
                               scrape_timeout_s=args.scrape_timeout,
                               state_dir=args.state_dir, security=security, alert_rule_metrics=rule_metrics)
    try:
        state_root = settings.state_root
        ScrapeTiming(settings.interval_s, settings.timeout_s, settings.scrape_timeout_s)
    except ValueError as e:
        log.error(f"isrwatch collect: {e}")
        return 2
    canary_factory = None
    if not args.no_canary:
        from collector.canary_feed import canary_for_collector
        from collector.kafka_wire import BrokerConnection

        canary_factory = canary_for_collector(args.bootstrap_servers, state_root=state_root,
                                              topic=args.canary_topic, rate_per_partition=args.canary_rate,
                                              client_config=security.librdkafka_config(),
                                              connect=functools.partial(BrokerConnection, security=security))
    try:
        collector = Collector(settings, canary_factory=canary_factory)
    except (CollectorError, CanaryError) as e:
        log.error(f"isrwatch collect: {e}")
        return 2
    stop = threading.Event()

    def request_stop(signum: int, _frame: object) -> None:
        if stop.is_set():  # a second Ctrl-C: leave at once
            raise KeyboardInterrupt
        stop.set()
        log.info("isrwatch collect: stopping after this interval")

    previous = signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    warned: list[str] = []

    def progress(status: dict[str, Any]) -> None:
        # At the start and whenever they change, each URL giving none or only part of the metrics in full; on
        # every progress line, in short.
        if status["metrics_warnings"] != warned:
            warned[:] = status["metrics_warnings"]
            for warning in warned:
                log.warning(f"isrwatch collect: {warning}")
        if args.quiet:
            return
        silent = status["not_answering"]
        incomplete = collector.metrics_briefs()
        print(f"collect batch {status['batch']}: {status['partitions']} partitions, {status['events']} events, "
              f"{status['elapsed_ms']:.0f} ms" + (f", not answering: {silent}" if silent else "")
              + (f"; metrics incomplete: {', '.join(incomplete)}" if incomplete else ""), flush=True)

    print(f"isrwatch collect: cluster {collector.cluster_id}, run {collector.run_id}, "
          f"writing to {args.lakehouse if '://' in args.lakehouse else Path(args.lakehouse).resolve()}"
          + (f", connecting over {security.describe()}" if args.command_config is not None else ""), flush=True)
    try:
        batches = collector.run(duration_s=args.duration, on_step=progress, should_stop=stop.is_set)
    except SinkSchemaError as e:
        log.error(f"isrwatch collect: {e}")
        return 2
    finally:
        collector.close()
        signal.signal(signal.SIGINT, previous)
    print(f"isrwatch collect: stopped after {batches} batches (run {collector.run_id})", flush=True)
    return 0
