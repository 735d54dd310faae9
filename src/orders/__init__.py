"""Exactly-once effects on top of at-least-once messaging (Service Bus -> Cosmos DB)."""

__version__ = "0.1.0"
