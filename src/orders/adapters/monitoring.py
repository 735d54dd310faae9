"""Export telemetry to Application Insights when the app setting is present."""

from __future__ import annotations

import logging

from orders.settings import Settings

logger = logging.getLogger("orders")
_configured = False


def configure_monitoring(settings: Settings) -> bool:
    """Configure azure-monitor-opentelemetry once per process; False when not configured."""
    global _configured
    if _configured or not settings.appinsights_connection_string:
        return _configured
    from azure.monitor.opentelemetry import configure_azure_monitor

    options: dict[str, object] = {"connection_string": settings.appinsights_connection_string}
    if settings.appinsights_authentication_string:
        # Local auth is off on the App Insights resource: export with Entra ID.
        from azure.identity import ManagedIdentityCredential

        options["credential"] = ManagedIdentityCredential(client_id=settings.azure_client_id)
    configure_azure_monitor(**options)
    _configured = True
    logger.info("Azure Monitor OpenTelemetry export configured")
    return True
