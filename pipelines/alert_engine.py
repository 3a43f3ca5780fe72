"""The alert lifecycle in event time: inactive -> pending -> firing -> resolved, one alert per rule and entity.

`AlertEngine.step` takes one micro-batch of shaped samples (pipelines/alert_signals.py) and returns the
transitions it caused; all it remembers between batches is `EngineState`, which the alerts job stores in
Delta after every batch and reloads on restart. Given the same state and batch, a step produces the same
transitions (sorted, no wall clock), which is what makes a replayed micro-batch harmless.

Semantics, per rule and entity, over samples in event-time order:
- condition true while inactive (or resolved): pending since that sample; firing at the first sample at
  least `for` after it (at once when `for` is 0);
- condition false while pending: back to inactive (resolved, for an alert that has fired); while firing:
  resolved, unless the rule's `keep_firing_for` has not passed since the condition stopped holding;
- flapping acts on notifications, never on the state: the condition of an alert that has fired changed more than
  `flap_detection.max_changes` times in the trailing `flap_detection.window`; its transitions are still recorded,
  marked `flapping`, and held back from the receivers. It settles when the changes in the window fall back to
  the limit or when its condition has not changed for `flap_detection.quiet` (which also forgets the changes:
  incidents apart by a quiet spell are separate incidents); at its first evaluation settled, the receivers get
  one transition with its true state (`previous` = `status`) if a held one left them behind;
- an entity with an open alert that has no sample at a time its source reported for the same cluster
  counts as false there (an offline broker's metrics do not keep its alerts open forever). Windowed rules
  are the exception: a window's sum holds between samples, so an entity is evaluated where its sum can
  change (its own samples, a sample leaving the window) and at the cluster's clock;
- samples older than the entity's last evaluated sample are late and ignored (counted in `late`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipelines.alert_expressions import compiled
from pipelines.alert_rules import AlertConfig, Rule
from pipelines.alert_samples import cluster_clocks, entity_keys, ms_of, records, times_by_cluster, typed
from pipelines.alert_signals import BROKER_STOPS, REPLICA_BROKERS, SOURCES
from pipelines.alert_state import OPEN, Alert, EngineState, Transition, fingerprint, transition_order
from pipelines.alert_templates import display, render_annotations
from pipelines.broker_reports import broker_reports
from schemas.gold import AlertStatus


@dataclass(frozen=True)
class Samples:
    """A rule's samples for one step, each with its condition and value."""

    frame: pd.DataFrame
    cond: np.ndarray
    value: np.ndarray


class AlertEngine:
    def __init__(self, config: AlertConfig, state: EngineState | None = None) -> None:
        self.config = config
        self.state = state or EngineState()
        self.rules = _inhibitors_first(config.rules)
        self.late = 0
        self._inhibitors: dict[tuple[int, tuple[str | None, ...]], list[Alert]] = {}  # see _advance
        self._unrendered: dict[str, tuple[Rule, dict[str, Any], dict[str, str]]] = {}  # see _apply
        self._prepared: dict[tuple[str, str, str], pd.DataFrame] = {}  # see _prepare
        self._of_frame: dict[tuple[int, tuple[str, ...]], tuple[pd.DataFrame, Any, Any]] = {}  # see _keys_and_times

    def step(self, frames: dict[str, pd.DataFrame]) -> list[Transition]:
        """Evaluate every rule on one batch of shaped frames; return the transitions, in event-time order."""
        frames = dict(frames)
        if "partition_state" in frames:
            frames["partition_state"] = self._with_hw_advance(frames["partition_state"])
        clocks = cluster_clocks(frames)
        if "broker_metrics" in frames or REPLICA_BROKERS in frames or BROKER_STOPS in frames:
            frames["broker_reports"] = broker_reports(self.state, frames.get("broker_metrics"),
                                                      frames.get(REPLICA_BROKERS), frames.get(BROKER_STOPS), clocks)
        self._prepared, self._of_frame = {}, {}
        out: list[Transition] = []
        for rule in self.rules:
            frame = frames.get(rule.source)
            if frame is None and not (rule.window_ms and self._has_windows(rule)):
                continue
            samples = self._samples(rule, frame, clocks)
            if samples is not None:
                out += self._advance(rule, samples)
        self._expire_resolved(clocks)
        self.state.forget_unused_windows()
        out.sort(key=transition_order)
        return out

    # -- samples -------------------------------------------------------------------------------------
    def _samples(self, rule: Rule, frame: pd.DataFrame | None, clocks: dict[str, int]) -> Samples | None:
        if frame is not None and len(frame):
            frame = self._prepare(rule, frame)
        if rule.window_ms:
            frame = self._windowed(rule, frame, clocks)
        if frame is None or not len(frame):
            return None
        # The frame may be shared with the other rules of its source (see _prepare): it is not written to. The
        # condition and value are kept beside it, and joined only to the rows that go on (see _advance).
        cond = np.broadcast_to(np.asarray(compiled(rule.when).evaluate(frame), dtype=bool), len(frame))
        value = (np.broadcast_to(np.asarray(compiled(rule.value).evaluate(frame), dtype="float64"), len(frame))
                 if rule.value else cond.astype("float64"))
        return Samples(frame, cond, value)

    def _prepare(self, rule: Rule, frame: pd.DataFrame) -> pd.DataFrame:
        """The rule's source frame with every column of the source (absent ones NaN), `ts` in ms, aggregated to the
        rule's scope when coarser than the source's grain: the same for every rule of that source, scope and
        aggregate, so made once per step (shared read-only: each rule's samples are a copy)."""
        coarser = rule.scope != SOURCES[rule.source].grain
        cache_key = (rule.source, rule.scope if coarser else "", rule.aggregate if coarser else "")
        if cache_key in self._prepared:
            return self._prepared[cache_key]
        base = self._prepared.get((rule.source, "", ""))
        if base is None:
            missing = [c for c in SOURCES[rule.source].columns if c not in frame.columns]
            base = frame.reindex(columns=[*frame.columns, *missing]).assign(ts=ms_of(frame["ts"]))
            self._prepared[(rule.source, "", "")] = base
        if coarser:  # aggregated over the scope's entities
            keys = ["run_id", "ts", *rule.entity_keys]
            entity = ("topic", "partition", "broker_id", "slo")
            numeric = [c for c in base.columns if c not in keys and c not in entity]
            grouped = base.groupby(keys, as_index=False, sort=True)[numeric]
            # A sum over entities none of which reports the column is unknown (NaN), not 0: brokers alone do not
            # say that no controller is active.
            base = grouped.sum(min_count=1) if rule.aggregate == "sum" else grouped.agg(rule.aggregate)
            self._prepared[cache_key] = base
        return base

    def _keys_and_times(self, frame: pd.DataFrame, keys: tuple[str, ...]) -> tuple[list[tuple[Any, ...]],
                                                                                   dict[str, list[int]]]:
        """`entity_keys` and `times_by_cluster` of a frame, once per step for the rules sharing it (see _prepare). The
        frame is kept with them, so its id cannot be another frame's during the step."""
        cached = self._of_frame.get((id(frame), keys))
        if cached is None:
            cached = (frame, entity_keys(frame, keys), times_by_cluster(frame))
            self._of_frame[(id(frame), keys)] = cached
        return cached[1], cached[2]

    def _windowed(self, rule: Rule, frame: pd.DataFrame | None, clocks: dict[str, int]) -> pd.DataFrame | None:
        """Sum each column over the trailing window, per entity, at every point after the entity's last evaluated
        one where its sum can change (one of its samples; a sample leaving the window) and at its cluster's
        clock. Between those points the sum holds, so nothing else needs evaluating: in particular an entity is
        not evaluated at the times other entities reported (as 'absent', it would resolve in between)."""
        w = self.state.windows
        prefix = f"{rule.name}/"
        added: dict[str, list[int]] = defaultdict(list)
        if frame is not None:
            cols = [c for c in frame.columns if c not in ("run_id", "ts", *rule.entity_keys)]
            for rec in records(frame):
                labels = self._labels(rule, rec)
                key = prefix + fingerprint(rule.name, labels)
                w.setdefault(key, []).append((int(rec["ts"]), {c: float(rec[c]) for c in cols}))
                self.state.window_labels[key] = labels
                added[key].append(int(rec["ts"]))
        # An open alert whose samples have all left the window still needs evaluating (at zero) to resolve, and one
        # whose notifications were held back, to settle.
        open_alerts = {k: a for k, a in self.state.alerts.items()
                       if a.rule == rule.name and (a.status in OPEN or a.held) and not w.get(k)}
        rows = []
        for key in sorted({k for k in w if k.startswith(prefix)} | set(open_alerts)):
            labels = self.state.window_labels[key] if key in w else open_alerts[key].labels
            cluster = labels["cluster"]
            samples = sorted(w.get(key, []), key=lambda s: s[0])
            ts = np.array([t for t, _ in samples], dtype=np.int64)
            upto = clocks.get(cluster)
            if upto is None:
                continue  # the cluster reported nothing in this batch: no time has passed for it
            done = self.state.window_evaluated.get(key, np.iinfo(np.int64).min)
            # A sample of this batch is evaluated at its own time even when that is not after `done`: the
            # union's tables arrive unevenly, so another table may have moved the clock past it already (late
            # for an alert already evaluated there: _advance skips it; its sum counts from the next point).
            fresh = np.array(added.get(key, []), dtype=np.int64)
            candidates = np.concatenate([ts, ts + rule.window_ms, np.array([upto], dtype=np.int64)])
            due = (candidates > done) | np.isin(candidates, fresh)
            points = np.unique(candidates[due & (candidates <= upto)])
            if not len(points):
                continue
            if key not in self.state.alerts and not len(fresh) and len(points) == 1 and points[0] == upto:
                # Only the clock moved: the sums are those of the last evaluation, whose condition did not hold (no
                # alert), so nothing can change. Most keys of a long window are like this on most batches.
                continue
            cols = sorted({c for _, v in samples for c in v})
            # Prefix sums: each point's window total is a difference of two of them (O(n log n), not O(n^2)).
            cum = np.vstack([np.zeros(len(cols)), np.cumsum([[v.get(c, 0.0) for c in cols] for _, v in samples],
                                                            axis=0).reshape(len(samples), len(cols))])
            hi = np.searchsorted(ts, points, side="right")
            lo = np.searchsorted(ts, points - rule.window_ms, side="right")
            sums = cum[hi] - cum[lo]
            entity = {k: typed(k, labels[k]) for k in rule.entity_keys}
            rows.append(pd.DataFrame(sums, columns=cols).assign(run_id=cluster, ts=points, **entity))
            self.state.window_evaluated[key] = max(int(done), int(points[-1]))
            if key in w:
                horizon = self.state.window_evaluated[key] - rule.window_ms
                w[key] = [s for s in samples if s[0] > horizon]
        for key in [k for k in w if k.startswith(prefix) and not w[k]]:
            del w[key]
            self.state.window_labels.pop(key, None)
        for key in [k for k in self.state.window_evaluated if k.startswith(prefix) and k not in w
                    and k not in self.state.alerts]:
            del self.state.window_evaluated[key]
        if not rows:
            return None
        out = pd.concat(rows, ignore_index=True)
        missing = [c for c in SOURCES[rule.source].columns if c not in out.columns]
        return out.reindex(columns=[*out.columns, *missing], fill_value=0.0).fillna(0.0)

    def _has_windows(self, rule: Rule) -> bool:
        prefix = f"{rule.name}/"
        return any(k.startswith(prefix) for k in self.state.windows) or any(
            a.rule == rule.name and a.status in OPEN for a in self.state.alerts.values())

    def _with_hw_advance(self, states: pd.DataFrame) -> pd.DataFrame:
        """Add `hw_advance`: how far each partition's HW moved since its previous sample (records committed
        in the interval), carrying each partition's last HW across micro-batches in the engine state."""
        # In numpy over the sorted rows (an entity's rows are adjacent): pandas' groupby, shift and tail took ~8 ms a
        # lane batch of a hundred partitions, this well under one.
        f = states.sort_values(["run_id", "topic", "partition", "ts"], kind="stable").reset_index(drop=True)
        run, topic = f["run_id"].to_numpy(), f["topic"].astype(str).to_numpy()
        partition, hw = f["partition"].to_numpy("int64"), f["high_watermark"].to_numpy("float64")
        same = np.zeros(len(f), bool)  # the row before is the same partition's
        same[1:] = (run[1:] == run[:-1]) & (topic[1:] == topic[:-1]) & (partition[1:] == partition[:-1])
        previous = np.full(len(f), np.nan)
        previous[1:][same[1:]] = hw[:-1][same[1:]]
        for i in np.flatnonzero(~same):  # a partition's first row in the batch: its HW from the batch before
            previous[i] = self.state.last_hw.get(str(run[i]), {}).get(f"{topic[i]}/{partition[i]}", np.nan)
        # An offline partition reports HW -1: the jump when a leader returns is its recovered log, not commits.
        previous[previous < 0] = np.nan
        advance = hw - previous
        f["hw_advance"] = np.where(np.isnan(advance), 0.0, np.maximum(advance, 0.0))
        last = np.ones(len(f), bool)
        last[:-1] = ~same[1:]
        for i in np.flatnonzero(last):
            self.state.last_hw.setdefault(str(run[i]), {})[f"{topic[i]}/{partition[i]}"] = int(hw[i])
        return f

    # -- lifecycle -----------------------------------------------------------------------------------
    def _labels(self, rule: Rule, rec: dict[str, Any]) -> dict[str, str]:
        labels = {"alertname": rule.name, "severity": rule.severity, "cluster": str(rec["run_id"])}
        labels.update({k: str(display(rec[k])) for k in rule.entity_keys})
        labels.update(rule.labels)
        return labels

    def _advance(self, rule: Rule, samples: Samples) -> list[Transition]:
        alerts = self.state.alerts
        # Inhibitors are evaluated before this rule: their alerts are final for the step, so index them once.
        self._inhibitors = {}
        for i, inh in enumerate(rule.inhibited_by):
            for a in alerts.values():
                if a.rule == inh.rule and a.fired_ms is not None:
                    self._inhibitors.setdefault((i, tuple(a.labels.get(k) for k in inh.equal)), []).append(a)
        # Open alerts can change; so can one whose receivers were left behind by a held transition (it settles).
        open_keys = {k: a for k, a in alerts.items() if a.rule == rule.name and (a.status in OPEN or a.held)}
        # Only entities whose condition held somewhere in the batch, or that have an open alert, can change:
        # select their rows by entity key before building records of them one by one.
        ek, times = self._keys_and_times(samples.frame, rule.entity_keys)
        wanted = {k for k, held in zip(ek, samples.cond, strict=True) if held} | {
            (a.cluster, *(typed(k, a.labels[k]) for k in rule.entity_keys)) for a in open_keys.values()}
        by_entity: dict[str, list[dict[str, Any]]] = defaultdict(list)
        labels_of: dict[str, dict[str, str]] = {}
        if wanted:
            keep = np.fromiter((k in wanted for k in ek), bool, len(ek))
            recs = records(samples.frame, keep)
            for rec, held, value in zip(recs, samples.cond[keep].tolist(), samples.value[keep].tolist(), strict=True):
                rec["_cond"], rec["_value"] = held, value
                labels = self._labels(rule, rec)
                fp = fingerprint(rule.name, labels)
                by_entity[fp].append(rec)
                labels_of[fp] = labels
        out: list[Transition] = []
        for fp in sorted(set(by_entity) | {a.fingerprint for a in open_keys.values()}):
            key = f"{rule.name}/{fp}"
            alert = alerts.get(key)
            recs = sorted(by_entity.get(fp, []), key=lambda r: r["ts"])
            cluster = alert.cluster if alert else str(recs[0]["run_id"])
            present = {int(r["ts"]) for r in recs}
            # A windowed entity has a row wherever its sum changes (see _windowed): no time is "absent".
            absent = [] if rule.window_ms else [t for t in times.get(cluster, []) if t not in present]
            seq: list[tuple[int, bool, dict[str, Any] | None]] = [(int(r["ts"]), bool(r["_cond"]), r) for r in recs]
            seq += [(t, False, None) for t in absent]
            for ts, cond, sample in sorted(seq, key=lambda s: (s[0], s[1])):
                if alert is not None and ts <= alert.last_ms:
                    self.late += sample is not None
                    continue
                alert, transition = self._apply(rule, key, fp, labels_of.get(fp), alert, ts, cond, sample)
                if transition is None and alert is not None:
                    transition = self._settled(rule, alert, ts)
                if transition is not None:
                    out.append(transition)
            self._render(key, alert)
        return out

    def _apply(self, rule: Rule, key: str, fp: str, labels: dict[str, str] | None, alert: Alert | None, ts: int,
               cond: bool, rec: dict[str, Any] | None) -> tuple[Alert | None, Transition | None]:
        status = alert.status if alert else AlertStatus.INACTIVE
        if alert is not None:
            alert.last_ms = ts
            if alert.fired_ms is not None or alert.resolved_ms is not None:   # it has fired (and may be pending again)
                self._count_change(alert, ts, cond)
        if not cond:
            if alert is None or status not in OPEN:
                return alert, None
            if status == AlertStatus.FIRING and self._kept_firing(rule, alert, ts):
                return alert, self._lifted(rule, alert, ts)
            new = AlertStatus.RESOLVED if status == AlertStatus.FIRING else AlertStatus.INACTIVE
            if new == AlertStatus.INACTIVE and alert.held:
                # It fired, went pending again, and a held transition left the receivers behind: it stays, resolved,
                # so that they are told when it settles.
                new = AlertStatus.RESOLVED
            alert.status, alert.resolved_ms = new, ts if new == AlertStatus.RESOLVED else None
            if new == AlertStatus.INACTIVE:
                del self.state.alerts[key]
            return alert, self._transition(rule, alert, new, status, ts)
        assert rec is not None and labels is not None
        value = float(rec["_value"])
        if status in OPEN:
            assert alert is not None
            alert.value, alert.cleared_ms = value, None
            # Rendered once, from the step's last such sample, or before a transition shows them.
            self._unrendered[key] = (rule, rec, labels)
            if status == AlertStatus.PENDING and ts - alert.since_ms >= rule.for_ms:
                alert.status, alert.fired_ms = AlertStatus.FIRING, ts
                alert.inhibited = self._inhibited(rule, labels, ts)
                return alert, self._transition(rule, alert, AlertStatus.FIRING, AlertStatus.PENDING, ts)
            return alert, self._lifted(rule, alert, ts) if status == AlertStatus.FIRING else None
        # A resolved alert firing again keeps its recent changes (that is how flapping is seen), whether its
        # receivers are behind and what they were last told.
        before = alert if alert is not None and status == AlertStatus.RESOLVED else None
        alert = Alert(rule.name, fp, labels["cluster"], labels, AlertStatus.PENDING, ts, None, None, ts, value,
                      render_annotations(rule, rec, labels), changes=before.changes if before else [],
                      flapping=before.flapping if before else False, condition=True,
                      held=before.held if before else False, told=before.told if before else None)
        if before is not None:
            alert.resolved_ms = before.resolved_ms   # a pending alert with a resolved time has fired before
        self.state.alerts[key] = alert
        if rule.for_ms == 0:
            alert.status, alert.fired_ms = AlertStatus.FIRING, ts
            alert.inhibited = self._inhibited(rule, labels, ts)
            return alert, self._transition(rule, alert, AlertStatus.FIRING, status, ts)
        return alert, self._transition(rule, alert, AlertStatus.PENDING, status, ts)

    def _count_change(self, alert: Alert, ts: int, cond: bool) -> None:
        """Record a change of the condition of an alert that has fired, keeping the changes within the flap window
        and since the last quiet spell (a condition unchanged for `quiet`), and whether that makes it flapping."""
        flap = self.config.flap_detection
        previous = alert.condition
        if previous is None:   # a state saved before the condition was kept: read it off the status
            previous = (alert.status == AlertStatus.PENDING
                        or (alert.status == AlertStatus.FIRING and alert.cleared_ms is None))
        if alert.changes and ts - alert.changes[-1] >= flap.quiet_ms:
            alert.changes = []
        if cond != previous:
            alert.changes.append(ts)
        alert.changes = [t for t in alert.changes if t > ts - flap.window_ms]
        alert.condition = cond
        alert.flapping = flap.flapping(len(alert.changes))

    def _kept_firing(self, rule: Rule, alert: Alert, ts: int) -> bool:
        """A firing alert whose condition no longer holds stays firing while `keep_firing_for` has not passed
        since the condition stopped."""
        if alert.cleared_ms is None:
            alert.cleared_ms = ts
        return ts - alert.cleared_ms < rule.keep_firing_for_ms

    def _settled(self, rule: Rule, alert: Alert, ts: int) -> Transition | None:
        """The transition that tells the receivers an alert's true state once it stopped flapping, if a held one
        left them behind: its status again (firing -> firing, resolved -> resolved), not held. None when the last
        status they were told is the true one again (a flap that ended where it began tells them nothing twice). A
        pending alert waits until it fires or resolves, whose own transition then tells them."""
        if not alert.held or alert.flapping or alert.status not in (AlertStatus.FIRING, AlertStatus.RESOLVED):
            return None
        if alert.told == alert.status:   # what the receivers last heard is true again: nothing to tell
            alert.held = False
            return None
        return self._transition(rule, alert, alert.status, alert.status, ts)

    def _lifted(self, rule: Rule, alert: Alert, ts: int) -> Transition | None:
        """A firing alert that fired inhibited is delivered once no inhibitor fires any more at `ts` (as Alertmanager
        notifies a muted alert when its inhibitor resolves): a firing -> firing transition, no longer inhibited.
        Without it an alert muted by a broader one would never page if it outlived it: a partition still offline
        when the controller's OfflinePartitions resolves."""
        if not alert.inhibited or self._inhibited(rule, alert.labels, ts):
            return None
        alert.inhibited = False
        return self._transition(rule, alert, AlertStatus.FIRING, AlertStatus.FIRING, ts)

    def _inhibited(self, rule: Rule, labels: dict[str, str], ts: int) -> bool:
        """Was an inhibiting alert firing at `ts`? Inhibitors are evaluated first over the whole batch, so
        one may have resolved after `ts` already: it still counts for what happened before."""
        for i, inh in enumerate(rule.inhibited_by):
            for a in self._inhibitors.get((i, tuple(labels.get(k) for k in inh.equal)), ()):
                if (a.fired_ms is not None and a.fired_ms <= ts
                        and (a.status == AlertStatus.FIRING
                             or (a.status == AlertStatus.RESOLVED and (a.resolved_ms or 0) > ts))):
                    return True
        return False

    def _render(self, key: str, alert: Alert | None) -> None:
        """An open alert's annotations, from its latest sample whose condition held."""
        deferred = self._unrendered.pop(key, None)
        if deferred is not None and alert is not None:
            alert.annotations = render_annotations(*deferred)

    def _transition(self, rule: Rule, a: Alert, status: AlertStatus, previous: AlertStatus, ts: int) -> Transition:
        self._render(f"{rule.name}/{a.fingerprint}", a)
        if status in (AlertStatus.FIRING, AlertStatus.RESOLVED) and not a.inhibited:
            a.held = a.flapping   # a flapping alert's notification is held back; any other tells the receivers
            if not a.flapping:
                a.told = status
        starts = a.fired_ms if a.fired_ms is not None else a.since_ms
        ended = ts if status in (AlertStatus.RESOLVED, AlertStatus.INACTIVE) else None
        return Transition(rule.name, a.fingerprint, a.cluster, status, previous, ts, rule.severity, rule.scope,
                          dict(a.labels), dict(a.annotations), a.value, starts, ended, a.inhibited, a.flapping)

    def _expire_resolved(self, clocks: dict[str, int]) -> None:
        """Resolved alerts stay visible in gold.alerts for `resolved_retention` of event time, then go."""
        keep = self.config.resolved_retention_ms
        for key in sorted(self.state.alerts):
            a = self.state.alerts[key]
            if a.status == AlertStatus.RESOLVED and a.resolved_ms is not None and a.cluster in clocks and not a.held \
                    and clocks[a.cluster] - a.resolved_ms > keep:
                del self.state.alerts[key]


def _inhibitors_first(rules: tuple[Rule, ...]) -> list[Rule]:
    """Evaluate inhibiting rules before the rules they inhibit, so a same-time inhibition is seen."""
    by_name = {r.name: r for r in rules}
    ordered: list[Rule] = []
    visiting: set[str] = set()

    def visit(r: Rule) -> None:
        if r in ordered:
            return
        if r.name in visiting:
            raise ValueError(f"rule {r.name!r}: inhibited_by forms a cycle")
        visiting.add(r.name)
        for inh in r.inhibited_by:
            visit(by_name[inh.rule])
        visiting.discard(r.name)
        ordered.append(r)

    for r in rules:
        visit(r)
    return ordered

