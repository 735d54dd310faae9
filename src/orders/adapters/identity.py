"""The process's one Entra ID credential (managed identity in Azure, your login on a laptop).

Created only when a setting needs it (no keys, no connection string) and closed by the
process's `ProcessClients` (`adapters/process_clients.py`) after the clients that use it: the
SDK clients do not close a credential they were given. Imported then too: azure.identity (with
MSAL and its cryptography) is a tenth of a second of every process's start that keys never use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from orders.settings import Settings

if TYPE_CHECKING:
    from azure.core.credentials_async import AsyncTokenCredential
    from azure.identity.aio import DefaultAzureCredential


class ProcessCredential:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._credential: DefaultAzureCredential | None = None

    def get(self) -> AsyncTokenCredential:
        if self._credential is None:
            from azure.identity.aio import DefaultAzureCredential

            self._credential = DefaultAzureCredential(
                managed_identity_client_id=self._settings.azure_client_id
            )
        return self._credential

    async def close(self) -> None:
        if self._credential is not None:
            await self._credential.close()
            self._credential = None
