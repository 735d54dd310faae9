"""The only modules that import Azure SDKs; SDK errors become `orders.exceptions` here."""
