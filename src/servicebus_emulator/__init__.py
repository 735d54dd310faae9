"""A pure-Python Azure Service Bus emulator that the real azure-servicebus SDK talks to."""

from .config import ConfigError, QueueSettings, load_config
from .server import EmulatorServer, RunningEmulator, connection_string, start_in_background

__all__ = [
    "ConfigError",
    "EmulatorServer",
    "QueueSettings",
    "RunningEmulator",
    "connection_string",
    "load_config",
    "start_in_background",
]
