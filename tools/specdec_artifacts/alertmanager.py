"""Alertmanager routing: critical to PagerDuty (Events API v2), warning to chat, as a plain
config file and as a prometheus-operator `AlertmanagerConfig` resource built from one routing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specdec_artifacts.rules import INHIBITED_ALERTS, INHIBITING_ALERTS
from specdec_artifacts.settings import Routing, Settings

Document = dict[str, Any]

PAGERDUTY_SEVERITY = (
    '{{ if eq .CommonLabels.severity "warning" }}warning'
    '{{ else if eq .CommonLabels.severity "info" }}info'
    "{{ else }}critical{{ end }}"
)
"""Events API v2 severity from the alert's `severity` label (critical unless told otherwise)."""

INHIBITION_EQUAL = ("namespace", "pod", "instance")
"""`instance` too: outside Kubernetes `namespace` and `pod` are empty on every alert, and
Alertmanager treats two empty labels as equal, so one down target would silence all the others."""


_FIRST = "(index .Alerts 0)"
EVENT_SUMMARY = (
    "[{{ .Status | toUpper }}] {{ " + _FIRST + ".Labels.alertname }} "
    "{{ .CommonLabels.model_name }} ({{ .CommonLabels.namespace }}): "
    "{{ " + _FIRST + ".Annotations.summary }}"
)
EVENT_DETAILS = {
    "model_name": "{{ .CommonLabels.model_name }}",
    "namespace": "{{ .CommonLabels.namespace }}",
    "temperature_bucket": "{{ .CommonLabels.temperature_bucket }}",
    "runbook_url": "{{ " + _FIRST + ".Annotations.runbook_url }}",
    "dashboard_url": "{{ " + _FIRST + ".Annotations.dashboard_url }}",
    "alerts": ("{{ range .Alerts }}{{ .Labels.alertname }} {{ .Labels.instance }}: "
               "{{ .Annotations.description }} Runbook: {{ .Annotations.runbook_url }}\n"
               "{{ end }}"),
}
EVENT_LINKS = (
    ("{{ " + _FIRST + ".Annotations.runbook_url }}", "Runbook"),
    ("{{ " + _FIRST + ".Annotations.dashboard_url }}", "Dashboard"),
)
CHAT_TITLE = ("[{{ .Status | toUpper }}] {{ .CommonLabels.model_name }} "
              "({{ .CommonLabels.namespace }}): {{ len .Alerts }} speculative-decoding alert(s)")
CHAT_TEXT = ("{{ range .Alerts }}*{{ .Labels.alertname }}* ({{ .Labels.severity }}) "
             "{{ .Annotations.description }}\nRunbook: {{ .Annotations.runbook_url }}\n"
             "Dashboard: {{ .Annotations.dashboard_url }}\n{{ end }}")


@dataclass(frozen=True)
class Endpoints:
    """Where receivers send: the production defaults from the config, or a test's stubs."""

    pagerduty_url: str
    routing_key_file: str
    slack_api_url_file: str

    @classmethod
    def of(cls, routing: Routing) -> Endpoints:
        return cls(routing.pagerduty_url, routing.pagerduty_routing_key_file,
                   routing.slack_api_url_file)


def plain_config(settings: Settings, endpoints: Endpoints | None = None) -> Document:
    """alertmanager.yml: one route tree, two receivers, the inhibition of a down pod's alerts."""
    routing = settings.routing
    ends = endpoints or Endpoints.of(routing)
    return {
        "route": {
            "receiver": routing.chat_receiver,
            "group_by": list(routing.group_by),
            "group_wait": routing.group_wait,
            "group_interval": routing.group_interval,
            "repeat_interval": routing.repeat_interval,
            "routes": [
                {"receiver": routing.pagerduty_receiver, "matchers": ['severity="critical"']},
                {"receiver": routing.chat_receiver, "matchers": ['severity="warning"']},
            ],
        },
        "inhibit_rules": [{
            "source_matchers": [f'alertname=~"{"|".join(INHIBITING_ALERTS)}"'],
            "target_matchers": [f'alertname=~"{"|".join(INHIBITED_ALERTS)}"'],
            "equal": list(INHIBITION_EQUAL),
        }],
        "receivers": [
            {"name": routing.pagerduty_receiver, "pagerduty_configs": [{
                "routing_key_file": ends.routing_key_file,
                "url": ends.pagerduty_url,
                "send_resolved": True,
                "severity": PAGERDUTY_SEVERITY,
                "class": "{{ " + _FIRST + ".Labels.alertname }}",
                "component": "{{ .CommonLabels.model_name }}",
                "group": "{{ .CommonLabels.namespace }}",
                "description": EVENT_SUMMARY,
                "details": dict(EVENT_DETAILS),
                "links": [{"href": href, "text": text} for href, text in EVENT_LINKS],
            }]},
            {"name": routing.chat_receiver, "slack_configs": [{
                "api_url_file": ends.slack_api_url_file,
                "channel": routing.slack_channel,
                "send_resolved": True,
                "title": CHAT_TITLE,
                "text": CHAT_TEXT,
            }]},
        ],
    }


def alertmanager_config_resource(settings: Settings) -> Document:
    """The same routing as a `monitoring.coreos.com/v1alpha1` AlertmanagerConfig.

    The operator nests it under the global route with a `namespace` matcher, so it only sees
    alerts from its own namespace; keys come from Secrets in that namespace.
    """
    routing = settings.routing
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": "specdec", "labels": {"alertmanagerConfig": "specdec"}},
        "spec": {
            "route": {
                "receiver": routing.chat_receiver,
                "groupBy": list(routing.group_by),
                "groupWait": routing.group_wait,
                "groupInterval": routing.group_interval,
                "repeatInterval": routing.repeat_interval,
                "routes": [
                    {"receiver": routing.pagerduty_receiver,
                     "matchers": [_matcher("severity", "critical")]},
                    {"receiver": routing.chat_receiver,
                     "matchers": [_matcher("severity", "warning")]},
                ],
            },
            "inhibitRules": [{
                "sourceMatch": [_matcher("alertname", "|".join(INHIBITING_ALERTS), "=~")],
                "targetMatch": [_matcher("alertname", "|".join(INHIBITED_ALERTS), "=~")],
                "equal": list(INHIBITION_EQUAL),
            }],
            "receivers": [
                {"name": routing.pagerduty_receiver, "pagerdutyConfigs": [{
                    "routingKey": {"name": routing.pagerduty_secret.name,
                                   "key": routing.pagerduty_secret.key},
                    "url": routing.pagerduty_url,
                    "sendResolved": True,
                    "severity": PAGERDUTY_SEVERITY,
                    "class": "{{ " + _FIRST + ".Labels.alertname }}",
                    "component": "{{ .CommonLabels.model_name }}",
                    "group": "{{ .CommonLabels.namespace }}",
                    "description": EVENT_SUMMARY,
                    "details": [{"key": k, "value": v} for k, v in EVENT_DETAILS.items()],
                    "pagerDutyLinkConfigs": [{"href": href, "alt": text}
                                             for href, text in EVENT_LINKS],
                }]},
                {"name": routing.chat_receiver, "slackConfigs": [{
                    "apiURL": {"name": routing.slack_secret.name,
                               "key": routing.slack_secret.key},
                    "channel": routing.slack_channel,
                    "sendResolved": True,
                    "title": CHAT_TITLE,
                    "text": CHAT_TEXT,
                }]},
            ],
        },
    }


def _matcher(name: str, value: str, match_type: str = "=") -> dict[str, str]:
    return {"name": name, "value": value, "matchType": match_type}
