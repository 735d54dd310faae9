"""The process's one Entra ID credential (managed identity in Azure, your login on a laptop).

Created only when a setting needs it (no keys, no connection string) and closed by the
process's `ProcessClients` (bootstrap) after the clients that use it: the SDK clients do not
close a credential they were given.
"""

from __future__ import annotations

from azure.core.credentials_async import AsyncTokenCredential
from azure.identity.aio import DefaultAzureCredential

from orders.settings import Settings


class ProcessCredential:
    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._credential: DefaultAzureCredential | None = None

    def get(self) -> AsyncTokenCredential:
        if self._credential is None:
            self._credential = DefaultAzureCredential(
                managed_identity_client_id=self._settings.azure_client_id
            )
        return self._credential

    async def close(self) -> None:
        if self._credential is not None:
            await self._credential.close()
            self._credential = None
