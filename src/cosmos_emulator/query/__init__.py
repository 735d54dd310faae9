"""The documented subset of Cosmos DB SQL: parse, plan and evaluate."""
