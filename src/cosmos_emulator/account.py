"""The database account document (`GET /`) the SDK reads when a client starts."""

from __future__ import annotations

import json
from typing import Any

_QUERY_ENGINE = {
    "maxSqlQueryInputLength": 262144,
    "maxJoinsPerSqlQuery": 5,
    "maxLogicalAndPerSqlQuery": 500,
    "maxLogicalOrPerSqlQuery": 500,
    "maxUdfRefPerSqlQuery": 10,
    "maxInExpressionItemsCount": 16000,
    "queryMaxInMemorySortDocumentCount": 500,
    "maxQueryRequestTimeoutFraction": 0.9,
    "sqlAllowNonFiniteNumbers": False,
    "sqlAllowAggregateFunctions": True,
    "sqlAllowSubQuery": False,
    "sqlAllowScalarSubQuery": False,
    "allowNewKeywords": True,
    "sqlAllowLike": False,
    "sqlAllowGroupByClause": False,
    "maxSpatialQueryCells": 12,
    "spatialMaxGeometryPointCount": 256,
    "sqlDisableOptimizationFlags": 0,
    "sqlAllowTop": True,
    "enableSpatialIndexing": True,
}


def account_metadata(url: str) -> dict[str, Any]:
    """`url` must be the one the client reached: the SDK routes every later call to it."""
    location = [{"name": "South Central US", "databaseAccountEndpoint": url}]
    return {
        "_self": "",
        "id": "localhost",
        "_rid": "localhost",
        "media": "//media/",
        "addresses": "//addresses/",
        "_dbs": "//dbs/",
        "writableLocations": location,
        "readableLocations": location,
        "enableMultipleWriteLocations": False,
        "userReplicationPolicy": {
            "asyncReplication": False,
            "minReplicaSetSize": 1,
            "maxReplicasetSize": 4,
        },
        "userConsistencyPolicy": {"defaultConsistencyLevel": "Session"},
        "systemReplicationPolicy": {"minReplicaSetSize": 1, "maxReplicasetSize": 4},
        "readPolicy": {"primaryReadCoefficient": 1, "secondaryReadCoefficient": 1},
        "queryEngineConfiguration": json.dumps(_QUERY_ENGINE),
    }
