"""azd postprovision hook: write local.settings.json from the azd environment's outputs.

`func start` then runs the function app on this machine against the deployed Service Bus queue,
Cosmos DB account and Application Insights, as you (`az login` / `azd auth login`) through
DefaultAzureCredential: no keys, no copying. An existing local.settings.json is kept (it may be
the emulator one from local.settings.sample.json); pass --force to replace it.

Only the standard library: azd runs this with the machine's Python, before any venv exists.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# app setting -> azd output (infra/main.bicep). The Service Bus namespace is exported under an
# upper-case name because azd does not keep mixed-case names reliably.
FROM_OUTPUTS = {
    "ServiceBusConnection__fullyQualifiedNamespace": "AZURE_SERVICEBUS_FULLY_QUALIFIED_NAMESPACE",
    "ORDERS_QUEUE": "ORDERS_QUEUE",
    "COSMOS_ENDPOINT": "COSMOS_ENDPOINT",
    "COSMOS_DATABASE": "COSMOS_DATABASE",
    "COSMOS_CONTAINER": "COSMOS_CONTAINER",
    "COSMOS_IDEMPOTENCY_CONTAINER": "COSMOS_IDEMPOTENCY_CONTAINER",
}
# Optional: an environment provisioned before the fan-out has no such outputs, and the code's
# defaults are the names the Bicep deploys.
OPTIONAL_OUTPUTS = {
    "APPLICATIONINSIGHTS_CONNECTION_STRING": "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "COSMOS_INBOX_CONTAINER": "COSMOS_INBOX_CONTAINER",
    "COSMOS_LEASES_CONTAINER": "COSMOS_LEASES_CONTAINER",
    "ORDER_EVENTS_TOPIC": "ORDER_EVENTS_TOPIC",
    "STATUS_QUEUE": "STATUS_QUEUE",
    "STATUS_SESSIONS": "STATUS_SESSIONS",
    "ORDERS_DUPLICATE_WINDOW_SECONDS": "ORDERS_DUPLICATE_WINDOW_SECONDS",
}
# Every consumer's subscription, as the JSON array [{"name": ..., "setting": ...}] main.bicep
# outputs (one element per consumer): each is written as its setting. Optional like the above.
SUBSCRIPTIONS_OUTPUT = "ORDER_EVENTS_SUBSCRIPTIONS"
# The billing trigger's switch: main.bicep's BILLING_ENABLED output is 'false' when PAYMENTS_URL
# was empty, and the function app then runs with this setting 'true' (functionapp.bicep).
BILLING_DISABLED_SETTING = "AzureWebJobs.bill_order.Disabled"
BILLING_DISABLED_NOTE = (
    "billing is DISABLED on purpose: PAYMENTS_URL is empty, so the function app runs with "
    f"{BILLING_DISABLED_SETTING}=true and billing events wait in the `billing` subscription "
    "(until their 14-day time to live dead-letters them) instead of failing into its "
    "dead-letter queue. Orders are still stored, shipped and given their status. To charge "
    "them: `azd env set PAYMENTS_URL <the payment provider's base URL>`, then `azd provision` "
    "(infra/README.md, 'First deploy')."
)


class HookError(Exception):
    """The azd environment cannot produce the settings."""


def azd_values(azd: str | None = None) -> dict[str, str]:
    """`azd env get-values --output json` of the current environment."""
    executable = azd or shutil.which("azd")
    if executable is None:
        raise HookError("azd is not on PATH")
    result = subprocess.run(
        [executable, "env", "get-values", "--output", "json"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if result.returncode != 0:
        raise HookError(f"azd env get-values failed: {result.stderr.strip()}")
    values = json.loads(result.stdout)
    if not isinstance(values, dict):
        raise HookError("azd env get-values did not print a JSON object")
    # An array output may come back as JSON itself rather than as a string of it.
    return {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}


def local_settings(values: Mapping[str, str]) -> dict[str, object]:
    """The local.settings.json document for the deployed resources."""
    missing = sorted(output for output in FROM_OUTPUTS.values() if not values.get(output))
    if missing:
        raise HookError(f"outputs missing from the azd environment: {', '.join(missing)}")
    settings: dict[str, str] = {
        # The host's own storage: Azurite locally, as in the official azd Functions templates.
        "AzureWebJobsStorage": "UseDevelopmentStorage=true",
        "FUNCTIONS_WORKER_RUNTIME": "python",
    }
    settings.update({name: values[output] for name, output in FROM_OUTPUTS.items()})
    # The outbox dispatcher's Cosmos DB trigger: the account alone, so the host signs in as you.
    settings["CosmosConnection__accountEndpoint"] = values["COSMOS_ENDPOINT"]
    # No __credential / __clientId and no AZURE_CLIENT_ID: locally DefaultAzureCredential must
    # pick your login, not the function's managed identity. No COSMOS_KEY or connection string:
    # those switch the app to emulator mode.
    for name, output in OPTIONAL_OUTPUTS.items():
        if values.get(output):
            settings[name] = values[output]
    settings.update(subscription_settings(values))
    if billing_disabled(values):
        # `func start` against the deployment leaves billing off as the deployment does.
        settings[BILLING_DISABLED_SETTING] = "true"
    if "APPLICATIONINSIGHTS_CONNECTION_STRING" in settings:
        # The resource refuses key ingestion; export with your Entra login.
        settings["APPLICATIONINSIGHTS_AUTHENTICATION_STRING"] = "Authorization=AAD"
    return {"IsEncrypted": False, "Values": settings}


def subscription_settings(values: Mapping[str, str]) -> dict[str, str]:
    """`<NAME>_SUBSCRIPTION` -> subscription, for every consumer the deployment has one for."""
    text = values.get(SUBSCRIPTIONS_OUTPUT)
    if not text:
        return {}
    try:
        entries = json.loads(text)
        return {str(entry["setting"]): str(entry["name"]) for entry in entries}
    except (ValueError, TypeError, KeyError) as exc:
        raise HookError(
            f"{SUBSCRIPTIONS_OUTPUT} is not a list of {{name, setting}}: {text!r}"
        ) from exc


def billing_disabled(values: Mapping[str, str]) -> bool:
    """Whether the deployment runs without billing (an environment from before the output: no)."""
    return values.get("BILLING_ENABLED", "").lower() == "false"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "local.settings.json")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--azd", help="path of the azd executable (default: from PATH)")
    args = parser.parse_args(argv)

    try:
        values = azd_values(args.azd)
    except (HookError, json.JSONDecodeError, subprocess.TimeoutExpired) as exc:
        print(f"local.settings.json not written: {exc}", file=sys.stderr)
        return 1
    # Said after every provision, whatever happens to the file: it is what the deployment does.
    if billing_disabled(values):
        print(f"note: {BILLING_DISABLED_NOTE}")
    if args.output.exists() and not args.force:
        print(f"{args.output} exists: kept (run with --force to write the Azure settings)")
        return 0
    try:
        document = local_settings(values)
    except HookError as exc:
        print(f"local.settings.json not written: {exc}", file=sys.stderr)
        return 1
    args.output.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.output} for the deployed resources")
    if values.get("ALLOW_USER_IDENTITY_PRINCIPAL", "").lower() != "true":
        print(
            "note: your login has no data-plane roles unless ALLOW_USER_IDENTITY_PRINCIPAL=true "
            "was set before `azd provision` (infra/README.md)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
