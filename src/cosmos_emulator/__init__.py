"""A pure-Python Cosmos DB for NoSQL emulator speaking the gateway REST protocol.

from cosmos_emulator import start_in_background
with start_in_background() as emu:
    client = CosmosClient(emu.url, emu.key)
"""

from .auth import WELL_KNOWN_KEY
from .http_limits import HttpLimits
from .server import RunningCosmosEmulator, start_in_background

__all__ = ["WELL_KNOWN_KEY", "HttpLimits", "RunningCosmosEmulator", "start_in_background"]
