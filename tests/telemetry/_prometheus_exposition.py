"""What the OpenTelemetry Collector's ``prometheus`` exporter serves for the metrics it received.

No collector binary installs here, so its translation is written out from its documented rules
(the collector-contrib ``prometheusexporter`` with its defaults, ``add_metric_suffixes: true``,
and the ``otlptranslator`` naming it uses):

* metric names: characters outside ``[a-zA-Z0-9_:]`` become ``_``; the unit is appended as a
  suffix (``s`` -> ``_seconds``; an annotation in braces such as ``{request}`` is dropped);
  a monotonic cumulative sum gets ``_total``; a histogram becomes ``_bucket`` (with ``le``),
  ``_sum`` and ``_count``;
* labels: the point's attributes, their names sanitised the same way (``wm.cache.result`` ->
  ``wm_cache_result``);
* ``job`` is ``service.namespace/service.name`` (or ``service.name``), ``instance`` is
  ``service.instance.id`` when there is one; the other resource attributes go to
  ``target_info``;
* the latest cumulative value of each series is served (the exporter keeps state).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ._loopback_http import QuietHandler
from ._loopback_http import serving as loopback_serving
from ._otlp_receiver import Received, attributes_of

_INVALID = re.compile(r"[^a-zA-Z0-9_:]+")
_UNITS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "1": "ratio"}
_RESOURCE_LABELS = ("service.name", "service.namespace", "service.instance.id")


def sanitise(name: str) -> str:
    cleaned = _INVALID.sub("_", name)
    return f"_{cleaned}" if cleaned[:1].isdigit() else cleaned


def metric_name(name: str, unit: str, monotonic_sum: bool) -> str:
    base = sanitise(name)
    unit = re.sub(r"\{[^}]*\}", "", unit).strip()
    suffix = _UNITS.get(unit, sanitise(unit) if unit else "")
    if suffix and not base.endswith(f"_{suffix}"):
        base = f"{base}_{suffix}"
    if monotonic_sum and not base.endswith("_total"):
        base = f"{base}_total"
    return base


def _number(value: float) -> str:
    """A float as Go's strconv 'g' / -1 writes it (``5e-05``, ``0.1``, ``10``)."""
    if value == float("inf"):
        return "+Inf"
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    body = ",".join(f'{key}="{_escaped(value)}"' for key, value in sorted(labels.items()))
    return "{" + body + "}"


def _job_labels(resource: dict[str, Any]) -> dict[str, str]:
    name = str(resource.get("service.name", ""))
    namespace = resource.get("service.namespace")
    labels = {"job": f"{namespace}/{name}" if namespace else name}
    if "service.instance.id" in resource:
        labels["instance"] = str(resource["service.instance.id"])
    return labels


def _point_labels(point: Any, resource: dict[str, Any]) -> dict[str, str]:
    labels = {sanitise(k): str(v) for k, v in attributes_of(point.attributes).items()}
    return {**labels, **_job_labels(resource)}


def exposition(received: Received) -> str:
    """The text exposition of the latest state of every series received so far."""
    series: dict[tuple[str, str], tuple[str, float]] = {}  # (name, labels) -> (type, value)
    types: dict[str, str] = {}
    for resource, metric in list(received.resource_metrics):
        kind = metric.WhichOneof("data")
        if kind in ("sum", "gauge"):
            data = getattr(metric, kind)
            monotonic = kind == "sum" and data.is_monotonic
            name = metric_name(metric.name, metric.unit, monotonic)
            types[name] = "counter" if monotonic else "gauge"
            for point in data.data_points:
                value = point.as_double if point.HasField("as_double") else point.as_int
                series[(name, _labels(_point_labels(point, resource)))] = (name, float(value))
        elif kind == "histogram":
            name = metric_name(metric.name, metric.unit, False)
            types[name] = "histogram"
            for point in metric.histogram.data_points:
                _histogram(series, name, point, _point_labels(point, resource))
        others = {k: str(v) for k, v in resource.items() if k not in _RESOURCE_LABELS}
        info = {sanitise(k): v for k, v in others.items()} | _job_labels(resource)
        series[("target_info", _labels(info))] = ("target_info", 1.0)
        types["target_info"] = "gauge"
    lines: list[str] = []
    for family in sorted(types):
        lines.append(f"# TYPE {family} {types[family]}")
        for (name, labels), (owner, value) in sorted(series.items()):
            if owner == family:
                lines.append(f"{name}{labels} {_number(value)}")
    return "\n".join(lines) + "\n"


def _histogram(
    series: dict[tuple[str, str], tuple[str, float]], name: str, point: Any, labels: dict[str, str]
) -> None:
    running = 0
    bounds = [*point.explicit_bounds, float("inf")]
    for bound, count in zip(bounds, point.bucket_counts, strict=True):
        running += count
        key = (f"{name}_bucket", _labels({**labels, "le": _number(bound)}))
        series[key] = (name, float(running))
    series[(f"{name}_sum", _labels(labels))] = (name, float(point.sum))
    series[(f"{name}_count", _labels(labels))] = (name, float(point.count))


@contextmanager
def serving(received: Received) -> Iterator[int]:
    """Serve :func:`exposition` of ``received`` on 127.0.0.1 at ``/metrics``; yields the port."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, exposition(received).encode(), "text/plain; version=0.0.4")

    with loopback_serving(Handler) as port:
        yield port
