"""Alertmanager routing of this project's alerts only (alertname SpecDecode*): critical to
PagerDuty (Events API v2), warning to chat. Built from one routing as a subtree to merge into an
existing config, as a standalone config (tests), and as a prometheus-operator AlertmanagerConfig.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from specdec_artifacts.rules import ALERT_PREFIX, INHIBITED_ALERTS, INHIBITING_ALERTS
from specdec_artifacts.settings import Routing, Settings

Document = dict[str, Any]

OURS = f"{ALERT_PREFIX}.*"
"""The alertname regex every route of ours matches first: other teams' alerts never reach our
receivers, whatever their severity."""
DEFAULT_RECEIVER = "default"
"""The root receiver of the standalone config; in a merged config, the user's own."""

PAGERDUTY_SEVERITY = (
    '{{ if eq .CommonLabels.severity "warning" }}warning'
    '{{ else if eq .CommonLabels.severity "info" }}info'
    "{{ else }}critical{{ end }}"
)
"""Events API v2 severity from the alert's `severity` label (critical unless told otherwise)."""

INHIBITION_EQUAL = ("namespace", "pod", "instance")
"""`instance` too: outside Kubernetes `namespace` and `pod` are empty on every alert, and
Alertmanager treats two empty labels as equal, so one down target would silence all the others.
The cluster label, where configured, is added."""


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
    "alerts": (
        "{{ range .Alerts }}{{ .Labels.alertname }} {{ .Labels.instance }}: "
        "{{ .Annotations.description }} Runbook: {{ .Annotations.runbook_url }}\n"
        "{{ end }}"
    ),
}
EVENT_LINKS = (
    ("{{ " + _FIRST + ".Annotations.runbook_url }}", "Runbook"),
    ("{{ " + _FIRST + ".Annotations.dashboard_url }}", "Dashboard"),
)
CHAT_TITLE = (
    "[{{ .Status | toUpper }}] {{ .CommonLabels.model_name }} "
    "({{ .CommonLabels.namespace }}): {{ len .Alerts }} speculative-decoding alert(s)"
)
CHAT_TEXT = (
    "{{ range .Alerts }}*{{ .Labels.alertname }}* ({{ .Labels.severity }}) "
    "{{ .Annotations.description }}\nRunbook: {{ .Annotations.runbook_url }}\n"
    "Dashboard: {{ .Annotations.dashboard_url }}\n{{ end }}"
)


@dataclass(frozen=True)
class Endpoints:
    """Where receivers send: the production defaults from the config, or a test's stubs."""

    pagerduty_url: str
    routing_key_file: str
    slack_api_url_file: str

    @classmethod
    def of(cls, routing: Routing) -> Endpoints:
        return cls(
            routing.pagerduty_url, routing.pagerduty_routing_key_file, routing.slack_api_url_file
        )


def subtree(settings: Settings, endpoints: Endpoints | None = None) -> Document:
    """alerts/alertmanager.yaml: our route, receivers and inhibition, to merge into a config
    (`merge_into`): the route goes first in the user's root `routes`, the lists are appended."""
    routing = settings.alertmanager
    ends = endpoints or Endpoints.of(routing)
    return {
        "routes": [
            {
                "receiver": routing.chat_receiver,
                "matchers": [f'alertname=~"{OURS}"'],
                "group_by": [*routing.group_by, *settings.cluster],
                "group_wait": routing.group_wait,
                "group_interval": routing.group_interval,
                "repeat_interval": routing.repeat_interval,
                "routes": [
                    {"receiver": routing.pagerduty_receiver, "matchers": ['severity="critical"']},
                    {"receiver": routing.chat_receiver, "matchers": ['severity="warning"']},
                ],
            }
        ],
        "inhibit_rules": [
            {
                "source_matchers": [f'alertname=~"{"|".join(INHIBITING_ALERTS)}"'],
                "target_matchers": [f'alertname=~"{"|".join(INHIBITED_ALERTS)}"'],
                "equal": [*INHIBITION_EQUAL, *settings.cluster],
            }
        ],
        "receivers": [
            {
                "name": routing.pagerduty_receiver,
                "pagerduty_configs": [
                    {
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
                    }
                ],
            },
            {
                "name": routing.chat_receiver,
                "slack_configs": [
                    {
                        "api_url_file": ends.slack_api_url_file,
                        "channel": routing.slack_channel,
                        "send_resolved": True,
                        "title": CHAT_TITLE,
                        "text": CHAT_TEXT,
                    }
                ],
            },
        ],
    }


def merge_into(config: Document, ours: Document) -> Document:
    """`config` with our subtree merged in: our route first among the root's routes (so a
    catch-all of the user's cannot take our alerts), our receivers and inhibit rules appended.
    Refuses a receiver name the config already uses."""
    merged = copy.deepcopy(config)
    route = merged.get("route")
    if not isinstance(route, dict) or "receiver" not in route:
        raise ValueError("the config has no root route with a receiver to merge under")
    taken = {receiver["name"] for receiver in merged.get("receivers", [])}
    clash = sorted(taken & {receiver["name"] for receiver in ours["receivers"]})
    if clash:
        raise ValueError(f"receiver names already used in the config: {', '.join(clash)}")
    route["routes"] = [*copy.deepcopy(ours["routes"]), *route.get("routes", [])]
    merged["receivers"] = [*merged.get("receivers", []), *copy.deepcopy(ours["receivers"])]
    merged["inhibit_rules"] = [
        *merged.get("inhibit_rules", []),
        *copy.deepcopy(ours["inhibit_rules"]),
    ]
    return merged


def standalone_config(
    settings: Settings, endpoints: Endpoints | None = None, default: Document | None = None
) -> Document:
    """A whole alertmanager.yml: a root route to `default` (a receiver that drops everything,
    unless given) with the subtree merged in. The e2e test and `amtool` tests run it."""
    root = {
        "route": {"receiver": DEFAULT_RECEIVER},
        "receivers": [default or {"name": DEFAULT_RECEIVER}],
    }
    return merge_into(root, subtree(settings, endpoints))


def alertmanager_config_resource(settings: Settings) -> Document:
    """The same routing as a `monitoring.coreos.com/v1alpha1` AlertmanagerConfig.

    The operator puts its route first under the global root with `continue: true`, adding a
    `namespace=<its namespace>` matcher unless the Alertmanager's
    `alertmanagerConfigMatcherStrategy` is `None` (prometheus-operator pkg/alertmanager/amcfg.go);
    our alertname matcher keeps other teams' alerts of that namespace out.
    """
    routing = settings.alertmanager
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": "specdec", "labels": {"alertmanagerConfig": "specdec"}},
        "spec": {
            "route": {
                "receiver": routing.chat_receiver,
                "matchers": [_matcher("alertname", OURS, "=~")],
                "groupBy": [*routing.group_by, *settings.cluster],
                "groupWait": routing.group_wait,
                "groupInterval": routing.group_interval,
                "repeatInterval": routing.repeat_interval,
                "routes": [
                    {
                        "receiver": routing.pagerduty_receiver,
                        "matchers": [_matcher("severity", "critical")],
                    },
                    {
                        "receiver": routing.chat_receiver,
                        "matchers": [_matcher("severity", "warning")],
                    },
                ],
            },
            "inhibitRules": [
                {
                    "sourceMatch": [_matcher("alertname", "|".join(INHIBITING_ALERTS), "=~")],
                    "targetMatch": [_matcher("alertname", "|".join(INHIBITED_ALERTS), "=~")],
                    "equal": [*INHIBITION_EQUAL, *settings.cluster],
                }
            ],
            "receivers": [
                {
                    "name": routing.pagerduty_receiver,
                    "pagerdutyConfigs": [
                        {
                            "routingKey": {
                                "name": routing.pagerduty_secret.name,
                                "key": routing.pagerduty_secret.key,
                            },
                            "url": routing.pagerduty_url,
                            "sendResolved": True,
                            "severity": PAGERDUTY_SEVERITY,
                            "class": "{{ " + _FIRST + ".Labels.alertname }}",
                            "component": "{{ .CommonLabels.model_name }}",
                            "group": "{{ .CommonLabels.namespace }}",
                            "description": EVENT_SUMMARY,
                            "details": [{"key": k, "value": v} for k, v in EVENT_DETAILS.items()],
                            "pagerDutyLinkConfigs": [
                                {"href": href, "alt": text} for href, text in EVENT_LINKS
                            ],
                        }
                    ],
                },
                {
                    "name": routing.chat_receiver,
                    "slackConfigs": [
                        {
                            "apiURL": {
                                "name": routing.slack_secret.name,
                                "key": routing.slack_secret.key,
                            },
                            "channel": routing.slack_channel,
                            "sendResolved": True,
                            "title": CHAT_TITLE,
                            "text": CHAT_TEXT,
                        }
                    ],
                },
            ],
        },
    }


def _matcher(name: str, value: str, match_type: str = "=") -> dict[str, str]:
    return {"name": name, "value": value, "matchType": match_type}
