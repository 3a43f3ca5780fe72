"""The exporter namings isrwatch reads broker_metrics under: four configurations of the Prometheus JMX exporter.

Operators run the exporter their brokers already have, and a monitor does not get to change a production broker's
JVM flags. Each configuration names an MBean attribute its own way; a naming here is a function from the MBean
(its domain and keys, in the order Kafka registers them: type, name, then the others) and the attribute (`Value`
for a gauge, `Count` for a meter) to the series the exporter writes, or None where that configuration exports
nothing for it. For the MBeans isrwatch reads, on Kafka 4.3 and jmx_exporter 1.0.1:

    kafka.server:type=ReplicaManager,name=IsrShrinksPerSec  Count
      isrwatch        kafka_server_ReplicaManager_IsrShrinksPerSec{attribute="Count"}    conf/jmx_exporter.yaml
      agent-default   kafka_server_ReplicaManager_Count{name="IsrShrinksPerSec"}          the exporter's default rules
      strimzi         kafka_server_replicamanager_isrshrinks_total                        Strimzi's kafka-metrics.yaml
      confluent       kafka_server_replicamanager_isrshrinkspersec                        Confluent's kafka_broker.yml

Strimzi's rules leave out RequestMetrics' meters, so a broker under them has no produce error meters (missing,
not zero); Strimzi and Confluent export no app-info, so the node's id is not in their expositions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from schemas.bronze import ExporterRules
from schemas.kafka_metrics import BROKER_METERS, CONTROLLER_METERS, MBEANS

Labels = frozenset[tuple[str, str]]
Series = tuple[str, Labels]   # a series name and its exact label set


@dataclass(frozen=True)
class MBean:
    """An MBean name: its domain and its keys in the order Kafka registers them (type, name, then the others)."""

    domain: str
    keys: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, object_name: str) -> MBean:
        """The MBean named `object_name`, e.g. `kafka.server:type=ReplicaFetcherManager,name=MaxLag,clientId=Replica`
        (its `others`: clientId=Replica)."""
        domain, _, key_list = object_name.partition(":")
        pairs = [pair.partition("=") for pair in key_list.split(",")]
        if not domain or any(not key or not equals for key, equals, _ in pairs) or pairs[0][0] != "type":
            raise ValueError(f"not an MBean name with its type first: {object_name!r}")
        return cls(domain, tuple((key, value) for key, _, value in pairs))

    @property
    def type(self) -> str:
        return self.keys[0][1]

    @property
    def name(self) -> str | None:
        return dict(self.keys).get("name")

    @property
    def others(self) -> tuple[tuple[str, str], ...]:
        """The keys after type and name (topic, clientId, request, error, id, …)."""
        return tuple((k, v) for k, v in self.keys[1:] if k != "name")

    @property
    def subdomain(self) -> str:
        """What `kafka\\.(\\w+)` captures in the rules: `server` of kafka.server."""
        return self.domain.removeprefix("kafka.")


Naming = Callable[[MBean, str], tuple[str, dict[str, str]] | None]


def isrwatch_naming(bean: MBean, attribute: str) -> tuple[str, dict[str, str]] | None:
    """conf/jmx_exporter.yaml: `kafka_<domain>_<type>_<name>`, the other keys and the attribute as labels."""
    if bean.name is None:
        if bean.type == "app-info" and attribute == "StartTimeMs":
            return "kafka_server_app_info_StartTimeMs", dict(bean.others)
        return None
    return f"kafka_{bean.subdomain}_{bean.type}_{bean.name}", {**dict(bean.others), "attribute": attribute}


def _safe_name(text: str) -> str:
    """The exporter's safeName: each run of `_` and characters outside [A-Za-z0-9_:] becomes one `_`; a leading
    digit gets one before it."""
    safe = re.sub(r"[^A-Za-z0-9:]+", "_", text)
    return f"_{safe}" if text[:1].isdigit() else safe


def agent_default_naming(bean: MBean, attribute: str) -> tuple[str, dict[str, str]]:
    """The exporter's default rules (`pattern: ".*"` without a name): `<domain>_<first key's value>_<attribute>`,
    the other keys as labels (jmx_exporter's defaultExport)."""
    first_value = bean.keys[0][1]
    return (_safe_name(f"{bean.domain}_{first_value}_{attribute}"),
            {_safe_name(k): v for k, v in bean.keys[1:]})


_PER_SECOND = re.compile(r"(.+)PerSec\w*")   # greedy, as the rules' `name=(.+)PerSec\w*`


def strimzi_naming(bean: MBean, attribute: str) -> tuple[str, dict[str, str]] | None:
    """Strimzi's kafka-metrics.yaml (lowercaseOutputName; label names as the keys): a Value as the gauge
    `kafka_<domain>_<type>_<name>`; a Count of a `…PerSec` meter as the counter `kafka_<domain>_<type>_<name less
    PerSec>_total`, of another MBean as `kafka_<domain>_<type>_<name>_count_total`; RequestMetrics' Counts and
    app-info not at all. (Its rules for names with `Percent`, which none of the MBeans isrwatch reads has, differ.)"""
    if bean.name is None or len(bean.others) > 2 or not bean.domain.startswith("kafka."):
        return None
    base = f"kafka_{bean.subdomain}_{bean.type}_{bean.name}"
    if attribute == "Value":
        return base.lower(), dict(bean.others)
    if attribute != "Count" or bean.type == "RequestMetrics":
        return None
    meter = _PER_SECOND.fullmatch(bean.name)
    name = f"kafka_{bean.subdomain}_{bean.type}_{meter.group(1)}_total" if meter else f"{base}_count_total"
    return name.lower(), dict(bean.others)


def confluent_naming(bean: MBean, attribute: str) -> tuple[str, dict[str, str]] | None:
    """Confluent's kafka_broker.yml (lowercaseOutputName, lowercaseOutputLabelNames): Count and Value alike as
    `kafka_<domain>_<type>_<name>` with up to two other keys as labels; app-info is blacklisted."""
    if bean.name is None or len(bean.others) > 2 or attribute not in ("Count", "Value"):
        return None
    return (f"kafka_{bean.subdomain}_{bean.type}_{bean.name}".lower(),
            {k.lower(): v for k, v in bean.others})


METER_KEYS = frozenset((*BROKER_METERS, *CONTROLLER_METERS))
# The node's own id: kafka.server:type=app-info,id=<node id>, whose StartTimeMs is when the Kafka server started.
APP_INFO_START = (MBean.parse("kafka.server:type=app-info,id=0"), "StartTimeMs")
CURRENT_CONTROLLER = (MBean.parse("kafka.server:type=MetadataLoader,name=CurrentControllerId"), "Value")


def _series(naming: Naming, bean: MBean, attribute: str) -> Series | None:
    named = naming(bean, attribute)
    return None if named is None else (named[0], frozenset(named[1].items()))


@dataclass(frozen=True)
class Dialect:
    """One exporter configuration: the series of each broker_metrics key (MBEANS) and of the node's id and view of
    the active controller, under its naming."""

    rules: ExporterRules
    series: Mapping[Series, str]          # series -> MBEANS key
    node_id_series: str | None            # app-info's StartTimeMs, labelled id=<node id>; None: not exported
    current_controller: Series | None

    @classmethod
    def of(cls, rules: ExporterRules, naming: Naming) -> Dialect:
        series = {}
        for key, object_name in MBEANS.items():
            named = _series(naming, MBean.parse(object_name), "Count" if key in METER_KEYS else "Value")
            if named is not None:
                series[named] = key
        app_info = naming(*APP_INFO_START)
        if app_info is not None and set(app_info[1]) != {"id"}:
            raise AssertionError(f"{rules}: app-info's series {app_info} has labels other than id")
        return cls(rules, series, None if app_info is None else app_info[0], _series(naming, *CURRENT_CONTROLLER))

    @property
    def exported_keys(self) -> frozenset[str]:
        """The MBEANS keys this configuration exports (once Kafka has registered their MBean)."""
        return frozenset(self.series.values())


# In the order a tie is broken: the same number of matching series (a standby controller's gauges, named alike by
# Strimzi and Confluent) goes to the first.
DIALECTS: tuple[Dialect, ...] = (
    Dialect.of(ExporterRules.ISRWATCH, isrwatch_naming),
    Dialect.of(ExporterRules.AGENT_DEFAULT, agent_default_naming),
    Dialect.of(ExporterRules.STRIMZI, strimzi_naming),
    Dialect.of(ExporterRules.CONFLUENT, confluent_naming),
)
