"""Plain data and rules: no infrastructure imports live here."""
