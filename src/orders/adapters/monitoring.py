"""Export telemetry to Application Insights when the app setting is present.

The Application Insights resource refuses instrumentation-key ingestion (local auth off), so
export authenticates with Entra ID whenever `APPLICATIONINSIGHTS_AUTHENTICATION_STRING` says
`Authorization=AAD`: with `DefaultAzureCredential`, which is the function's managed identity in
Azure (its client id from the authentication string, else `AZURE_CLIENT_ID`) and your
`az login` / `azd auth login` session on a laptop. The credential lives as long as the exporters
that use it: `shutdown_monitoring()` flushes and stops them, then closes it; a process that never
calls it has the credential closed at interpreter exit, after the OpenTelemetry SDK's own final
flush.
"""

from __future__ import annotations

import atexit
import logging
from dataclasses import dataclass
from typing import Any

from orders.settings import MonitoringSettings, Settings

logger = logging.getLogger("orders")


@dataclass
class _Monitoring:
    credential: Any | None  # azure.identity.DefaultAzureCredential (sync: the exporters are sync)

    def close_credential(self) -> None:
        credential, self.credential = self.credential, None
        if credential is not None:
            credential.close()


_state: _Monitoring | None = None


def _authentication(authentication_string: str | None) -> tuple[bool, str | None]:
    """(use Entra ID, client id) from `ClientId=<id>;Authorization=AAD` (keys case-insensitive)."""
    if not authentication_string:
        return False, None
    pairs: dict[str, str] = {}
    for part in authentication_string.split(";"):
        key, sep, value = part.partition("=")
        if sep:
            pairs[key.strip().lower()] = value.strip()
    return pairs.get("authorization", "").upper() == "AAD", pairs.get("clientid") or None


def configure_monitoring(settings: Settings | MonitoringSettings) -> bool:
    """Configure azure-monitor-opentelemetry once per process; False when not configured."""
    global _state
    if _state is not None:
        return True
    if isinstance(settings, Settings):
        settings = settings.monitoring
    if not settings.appinsights_connection_string:
        return False
    from azure.monitor.opentelemetry import configure_azure_monitor

    options: dict[str, Any] = {"connection_string": settings.appinsights_connection_string}
    use_entra, client_id = _authentication(settings.appinsights_authentication_string)
    credential = None
    if use_entra:
        from azure.identity import DefaultAzureCredential

        # In Azure this resolves to the user-assigned managed identity; on a laptop to the
        # developer's login (a hard-coded ManagedIdentityCredential could not export there).
        credential = DefaultAzureCredential(
            managed_identity_client_id=client_id or settings.azure_client_id
        )
        options["credential"] = credential
    state = _Monitoring(credential)
    # Registered before the SDK registers its own exit handlers, so (exit handlers run last
    # registered first) the providers flush their final batch while the credential still works.
    atexit.register(state.close_credential)
    try:
        configure_azure_monitor(**options)
    except BaseException:
        atexit.unregister(state.close_credential)
        state.close_credential()
        raise
    _state = state
    logger.info(
        "Azure Monitor OpenTelemetry export configured (%s)",
        "Entra ID" if use_entra else "connection string only",
    )
    return True


def shutdown_monitoring() -> None:
    """Flush and stop the exporters this module configured, then close their credential."""
    global _state
    state, _state = _state, None
    if state is None:
        return
    atexit.unregister(state.close_credential)
    from opentelemetry import _logs, metrics, trace

    try:
        # The SDK providers unregister their own exit handlers when shut down explicitly.
        for provider in (
            trace.get_tracer_provider(),
            metrics.get_meter_provider(),
            _logs.get_logger_provider(),
        ):
            shutdown = getattr(provider, "shutdown", None)
            if callable(shutdown):
                shutdown()
    finally:
        state.close_credential()
