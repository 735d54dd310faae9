"""Telemetry export as deployed: the authentication string the Bicep sets drives an Entra ID
credential that works in Azure and on a laptop, and the credential is closed with the exporters.

configure_azure_monitor and DefaultAzureCredential are replaced by recorders: nothing is sent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from orders.adapters import monitoring
from orders.settings import Settings

from .bicep_model import REPO_ROOT
from .test_settings_parity import bicep_app_settings

CONNECTION = "InstrumentationKey=00000000-0000-0000-0000-000000000000;IngestionEndpoint=https://x/"


class RecordingCredential:
    made: list[RecordingCredential] = []

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.closed = 0
        RecordingCredential.made.append(self)

    def close(self) -> None:
        self.closed += 1


class _Calls(list[dict[str, Any]]):
    def append_kw(self, **kwargs: Any) -> None:
        self.append(kwargs)


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Calls]:
    import azure.identity
    import azure.monitor.opentelemetry

    recorded = _Calls()
    RecordingCredential.made = []
    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", recorded.append_kw)
    monkeypatch.setattr(azure.identity, "DefaultAzureCredential", RecordingCredential)
    monitoring.shutdown_monitoring()
    yield recorded
    monitoring.shutdown_monitoring()


def _settings(**env: str) -> Settings:
    return Settings.from_env({"COSMOS_ENDPOINT": "https://a.documents.azure.com:443/", **env})


def test_the_deployed_authentication_string_selects_the_managed_identity(calls: _Calls) -> None:
    value = str(bicep_app_settings()["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"])
    deployed = value.replace("${identityClientId}", "11111111-2222-3333-4444-555555555555")
    settings = _settings(
        APPLICATIONINSIGHTS_CONNECTION_STRING=CONNECTION,
        APPLICATIONINSIGHTS_AUTHENTICATION_STRING=deployed,
        AZURE_CLIENT_ID="ignored-when-the-string-names-one",
    )

    assert monitoring.configure_monitoring(settings) is True

    (credential,) = RecordingCredential.made
    assert credential.kwargs == {
        "managed_identity_client_id": "11111111-2222-3333-4444-555555555555"
    }
    assert calls == [{"connection_string": CONNECTION, "credential": credential}]


def test_a_laptop_exports_with_its_login_not_a_managed_identity(calls: _Calls) -> None:
    settings = _settings(
        APPLICATIONINSIGHTS_CONNECTION_STRING=CONNECTION,
        APPLICATIONINSIGHTS_AUTHENTICATION_STRING="Authorization=AAD",
    )

    assert monitoring.configure_monitoring(settings) is True

    (credential,) = RecordingCredential.made
    # DefaultAzureCredential, not ManagedIdentityCredential: on a laptop it falls through to the
    # developer's az / azd login.
    assert isinstance(credential, RecordingCredential)
    assert credential.kwargs == {"managed_identity_client_id": None}
    assert calls[0]["credential"] is credential


def test_without_entra_no_credential_is_made(calls: _Calls) -> None:
    assert monitoring.configure_monitoring(
        _settings(APPLICATIONINSIGHTS_CONNECTION_STRING=CONNECTION)
    )
    assert RecordingCredential.made == []
    assert calls == [{"connection_string": CONNECTION}]


def test_no_connection_string_configures_nothing(calls: _Calls) -> None:
    assert monitoring.configure_monitoring(_settings()) is False
    assert calls == [] and RecordingCredential.made == []


def test_configured_once_and_the_credential_closed_once_at_shutdown(calls: _Calls) -> None:
    settings = _settings(
        APPLICATIONINSIGHTS_CONNECTION_STRING=CONNECTION,
        APPLICATIONINSIGHTS_AUTHENTICATION_STRING="ClientId=abc;Authorization=AAD",
    )
    assert monitoring.configure_monitoring(settings) is True
    assert monitoring.configure_monitoring(settings) is True
    (credential,) = RecordingCredential.made
    assert len(calls) == 1 and credential.closed == 0

    monitoring.shutdown_monitoring()
    monitoring.shutdown_monitoring()

    assert credential.closed == 1


def test_a_failed_configuration_closes_the_credential_it_made(
    monkeypatch: pytest.MonkeyPatch, calls: _Calls
) -> None:
    import azure.monitor.opentelemetry

    def refuse(**kwargs: Any) -> None:
        raise ValueError("bad connection string")

    monkeypatch.setattr(azure.monitor.opentelemetry, "configure_azure_monitor", refuse)
    settings = _settings(
        APPLICATIONINSIGHTS_CONNECTION_STRING="nonsense",
        APPLICATIONINSIGHTS_AUTHENTICATION_STRING="Authorization=AAD",
    )
    with pytest.raises(ValueError, match="bad connection string"):
        monitoring.configure_monitoring(settings)
    (credential,) = RecordingCredential.made
    assert credential.closed == 1
    monitoring.shutdown_monitoring()  # nothing configured: nothing closed twice
    assert credential.closed == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ClientId=abc;Authorization=AAD", (True, "abc")),
        ("authorization=aad", (True, None)),
        (" Authorization = AAD ; ClientId = x ", (True, "x")),
        ("Authorization=Key", (False, None)),
        ("garbage", (False, None)),
        (None, (False, None)),
    ],
)
def test_authentication_string_parsing(text: str | None, expected: tuple[bool, str | None]) -> None:
    assert monitoring._authentication(text) == expected


def test_host_exports_through_opentelemetry_and_keeps_successful_executions() -> None:
    host = json.loads((REPO_ROOT / "host.json").read_text(encoding="utf-8"))
    assert host["telemetryMode"] == "OpenTelemetry"
    levels = host["logging"]["logLevel"]
    # "Error" here hid every successful execution from the requests table.
    assert levels.get("Host.Results", levels["default"]) in ("Information", "Trace", "Debug")
    # Application Insights SDK settings do not apply in OpenTelemetry mode (mixing them is a
    # known misconfiguration, azure-functions-host#11366).
    assert "applicationInsights" not in host["logging"]
