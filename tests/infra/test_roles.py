"""Least privilege: the exact set of data-plane grants, with the built-in role ids of FACTS.md."""

from __future__ import annotations

from typing import Any

import pytest

from .bicep_model import (
    INFRA,
    MAIN,
    Resource,
    accessor_chain,
    module_calls,
    parse,
    resolve,
    resources,
)

ROLES = "modules/roles.bicep"

# Built-in role definition ids (FACTS.md).
ROLE_IDS = {
    "090c5cfd-751d-490a-894a-3ce6f1109419": "Service Bus Data Owner",
    "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0": "Service Bus Data Receiver",
    "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39": "Service Bus Data Sender",
    "b7e6dc6d-f1e8-4753-8033-0f276bb0955b": "Storage Blob Data Owner",
    "3913510d-42f4-4e42-8a64-420c390055eb": "Monitoring Metrics Publisher",
}
SERVICE_BUS_DATA_OWNER = "090c5cfd-751d-490a-894a-3ce6f1109419"
COSMOS_DATA_CONTRIBUTOR = "00000000-0000-0000-0000-000000000002"

NAMESPACE = "Microsoft.ServiceBus/namespaces"
QUEUE = "Microsoft.ServiceBus/namespaces/queues"
TOPIC = "Microsoft.ServiceBus/namespaces/topics"
SUBSCRIPTION = "Microsoft.ServiceBus/namespaces/topics/subscriptions"
STORAGE = "Microsoft.Storage/storageAccounts"
APP_INSIGHTS = "Microsoft.Insights/components"
COSMOS = "Microsoft.DocumentDB/databaseAccounts"

RECEIVER = "Service Bus Data Receiver"
SENDER = "Service Bus Data Sender"
ORDERS = (QUEUE, "orders")
EVENTS = (TOPIC, "order-events")
BILLING = (SUBSCRIPTION, "billing")
SHIPPING = (SUBSCRIPTION, "shipping")
STATUS = (QUEUE, "order-status")
STATUS_SESSIONS = (QUEUE, "order-status-sessions")

# (principal, role, (scope resource type, Service Bus entity name or "")): everything granted,
# nothing more. The app's Data Owner (send + receive + manage) is what a trigger's target-based
# scaler needs to read its entity's message count (azure-functions-host#8892), so it goes wherever
# a trigger listens: the queue `orders`, both status queues (STATUS_SESSIONS switches between
# them), and the topic `order-events` (a topic trigger's scaler reads the TOPIC's metrics; the
# topic scope also covers both subscriptions and the dispatcher's publish). Issue 23.
OWNER = "Service Bus Data Owner"
EXPECTED_RBAC = {
    ("app", OWNER, ORDERS),
    ("app", OWNER, EVENTS),
    ("app", OWNER, STATUS),
    ("app", OWNER, STATUS_SESSIONS),
    ("app", "Storage Blob Data Owner", (STORAGE, "")),
    ("app", "Monitoring Metrics Publisher", (APP_INSIGHTS, "")),
    ("user", RECEIVER, ORDERS),
    ("user", SENDER, ORDERS),
    # `orders dlq` on the subscriptions (their own opt-in) and the status queues; status updates
    # from a laptop.
    ("user", RECEIVER, BILLING),
    ("user", RECEIVER, SHIPPING),
    ("user", RECEIVER, STATUS),
    ("user", SENDER, STATUS),
    ("user", RECEIVER, STATUS_SESSIONS),
    ("user", SENDER, STATUS_SESSIONS),
    ("user", "Monitoring Metrics Publisher", (APP_INSIGHTS, "")),
}
PRINCIPALS = {"appPrincipalId": "app", "userPrincipalId": "user"}


def _existing_types() -> dict[str, str]:
    return {r.symbol: r.type for r in resources(parse(ROLES)) if r.existing}


def _scope(symbol: str) -> tuple[str, str]:
    """(type, deployed entity name) of an `existing` scope; the name only for Service Bus, whose
    entities are told apart by it (followed through main.bicep into messaging.bicep)."""
    scope_type = _existing_types()[symbol]
    if not scope_type.startswith(NAMESPACE + "/"):
        return scope_type, ""
    body = next(r.body for r in resources(parse(ROLES)) if r.symbol == symbol)
    name = resolve(ROLES, body["name"])
    assert isinstance(name, str) and "$" not in name, (symbol, name)
    return scope_type, name


def _rbac_assignments() -> list[tuple[str, str, tuple[str, str], Resource, Any]]:
    found: list[tuple[str, str, tuple[str, str], Resource, Any]] = []
    for res in resources(parse(ROLES)):
        if res.type != "Microsoft.Authorization/roleAssignments":
            continue
        props = res.body["properties"]
        definition = props["roleDefinitionId"]["function"]
        assert definition["type"] == "subscription_resource_id", res.symbol
        assert (
            definition["parameters"]["resource_type"] == "Microsoft.Authorization/roleDefinitions"
        )
        role_id = resolve(ROLES, definition["parameters"]["resource_name_1"])
        scope_chain = accessor_chain(res.body["scope"])
        assert scope_chain is not None and len(scope_chain) == 1, res.symbol
        scope_type = _scope(scope_chain[0])
        principal = PRINCIPALS[props["principalId"]]
        role = ROLE_IDS.get(role_id, str(role_id))
        found.append((principal, role, scope_type, res, props))
    return found


def test_rbac_grants_are_exactly_the_least_privilege_set() -> None:
    granted = [(p, role, scope) for p, role, scope, _, _ in _rbac_assignments()]
    assert len(granted) == len(set(granted)), "a grant is declared twice"
    assert set(granted) == EXPECTED_RBAC


def test_service_bus_owner_is_the_apps_alone_and_never_namespace_wide() -> None:
    owners = {(who, scope) for who, role, scope, _, _ in _rbac_assignments() if role == OWNER}
    assert owners == {("app", ORDERS), ("app", EVENTS), ("app", STATUS), ("app", STATUS_SESSIONS)}
    for _, _, (scope_type, _), _, _ in _rbac_assignments():
        assert scope_type != NAMESPACE
    assert resolve(ROLES, "serviceBusDataOwner") == SERVICE_BUS_DATA_OWNER


def test_the_apps_identity_alone_may_send_to_the_events_topic_at_the_topics_scope() -> None:
    """Who may publish an order event (issue 37, the README's security notes): a send right on
    `order-events` is Data Sender or Data Owner granted at the topic or at the namespace. The
    app's identity alone holds one, Data Owner scoped to the topic; the subscriptions (which
    nobody sends to: the topic fills them) grant Receiver to the user who opted in to their
    dead letters and no more."""
    grants = [(who, role, scope) for who, role, scope, _, _ in _rbac_assignments()]
    may_publish = {
        (who, role, scope)
        for who, role, scope in grants
        if role in (SENDER, OWNER) and (scope == EVENTS or scope[0] == NAMESPACE)
    }
    on_subscriptions = {(who, role) for who, role, scope in grants if scope[0] == SUBSCRIPTION}

    assert may_publish == {("app", OWNER, EVENTS)}
    assert on_subscriptions == {("user", RECEIVER)}


def test_every_trigger_can_scale_on_its_entitys_length() -> None:
    """Target-based scaling for every Service Bus trigger of function_app.py: the app holds Data
    Owner on each entity a trigger listens to, and for a topic trigger at TOPIC scope (Owner on a
    subscription alone cannot read the topic's metrics). The app gets no Receiver or Sender
    grant at all: Owner covers both wherever it needs them, the send that schedules a delayed
    retry's copy on the trigger's own queue or topic included (issue 43)."""
    app = {(role, scope) for who, role, scope, _, _ in _rbac_assignments() if who == "app"}
    owned = {scope for role, scope in app if role == OWNER}
    triggers = _service_bus_triggers()
    assert {kind for kind, _ in triggers} == {"queue", "topic"}
    for kind, entity in triggers:
        scope = (QUEUE, entity) if kind == "queue" else (TOPIC, entity)
        assert scope in owned, (kind, entity)
    assert not {scope for role, scope in app if role in (RECEIVER, SENDER)}
    assert all(scope[0] != SUBSCRIPTION for _, scope in app)


def _service_bus_triggers() -> set[tuple[str, str]]:
    """(queue|topic, deployed entity) of every Service Bus trigger function_app.py declares (as
    the host indexes it: the consumers' triggers come from a loop over the registry), through
    the %SETTING% its binding names and the Bicep's value of that setting (both status queues
    for the status trigger: the setting picks one by STATUS_SESSIONS)."""
    from function_index import indexed_functions

    from .bicep_model import DEPLOYED_ENTITY_NAMES

    found: set[tuple[str, str]] = set()
    for bindings in indexed_functions().values():
        for binding in bindings:
            if binding["type"] != "serviceBusTrigger":
                continue
            kind = "queue" if "queueName" in binding else "topic"
            setting = str(binding["queueName" if kind == "queue" else "topicName"]).strip("%")
            if setting == "STATUS_QUEUE":
                found |= {(kind, STATUS[1]), (kind, STATUS_SESSIONS[1])}
            else:
                found.add((kind, DEPLOYED_ENTITY_NAMES[setting]))
    assert found, "no Service Bus trigger found in function_app.py"
    return found


def test_the_role_scopes_name_what_messaging_and_the_app_settings_deploy() -> None:
    """The scopes resolve to entities messaging.bicep creates, and the app's status queue setting
    names one of the granted queues in either mode."""
    messaging = "modules/messaging.bicep"
    deployed = {
        (r.type, resolve(messaging, r.body["name"]))
        for r in resources(parse(messaging))
        # A subscription's rule is part of it, not an entity a role is granted on.
        if r.type.startswith(NAMESPACE + "/") and not r.existing and not r.type.endswith("/rules")
    }
    granted = {scope for _, _, scope, _, _ in _rbac_assignments() if scope[1]}
    assert granted == deployed
    operands = parse(MAIN)["variables"]["appStatusQueueName"]["value"]["operator"]["operands"]
    assert operands["condition"] == "statusSessions"
    modes = {resolve(MAIN, operands["true_value"]), resolve(MAIN, operands["false_value"])}
    assert modes == {STATUS[1], STATUS_SESSIONS[1]}


@pytest.mark.parametrize("principal", ["app", "user"])
def test_assignment_names_are_deterministic_per_scope_principal_and_role(principal: str) -> None:
    for who, _, _, res, _ in _rbac_assignments():
        if who != principal:
            continue
        guid = res.body["name"]["function"]
        assert guid["type"] == "guid"
        args = list(guid["parameters"].values())
        assert f"{principal}PrincipalId" in args, res.symbol
        assert resolve(ROLES, args[-1]) in ROLE_IDS, res.symbol


def test_user_grants_are_conditional_and_app_grants_are_not() -> None:
    for who, _, scope, res, props in _rbac_assignments():
        if who == "user":
            # Receiver on a subscription has an opt-in of its own (below).
            expected = "grantUserSubscriptions" if scope[0] == SUBSCRIPTION else "grantUser"
            assert res.condition == expected, res.symbol
            assert props["principalType"] == "userPrincipalType"
        else:
            assert res.condition is None, res.symbol
            assert props["principalType"] == "ServicePrincipal"
    # grantUser = allowUserIdentityPrincipal && !empty(userPrincipalId): opt-in, as the official
    # azd templates' allowUserIdentityPrincipal, and never for an empty principal id.
    assert parse(ROLES)["variables"]["grantUser"]["value"] == {
        "operator": {
            "type": "and",
            "operands": {
                "operand_1": "allowUserIdentityPrincipal",
                "operand_2": {
                    "operator": {
                        "type": "not",
                        "operands": {
                            "bool_value": {
                                "function": {
                                    "type": "empty",
                                    "parameters": {"item_to_test": "userPrincipalId"},
                                }
                            }
                        },
                    }
                },
            },
        }
    }


def test_the_subscriptions_receiver_is_an_opt_in_of_its_own_never_laptop_tooling() -> None:
    """Issue 46: Receiver on a subscription (what `orders dlq` needs on billing's and shipping's
    dead letters) can also take and complete live events, and Service Bus RBAC has nothing
    narrower: a dead-letter sub-queue is no scope, peeking is receiving. So laptop tooling
    (`ALLOW_USER_IDENTITY_PRINCIPAL`) grants nothing on the subscriptions; only
    `ALLOW_USER_SUBSCRIPTION_DEAD_LETTERS`, off by default, does (docs/security.md)."""
    on_subscriptions = [
        res for who, _, scope, res, _ in _rbac_assignments() if scope[0] == SUBSCRIPTION
    ]
    assert on_subscriptions and all(
        res.condition == "grantUserSubscriptions" for res in on_subscriptions
    )
    grant = parse(ROLES)["variables"]["grantUserSubscriptions"]["value"]["operator"]
    assert grant["type"] == "and"
    assert grant["operands"]["operand_1"] == "allowUserSubscriptionDeadLetters"
    assert "userPrincipalId" in str(grant["operands"]["operand_2"])
    assert "allowUserIdentityPrincipal" not in str(grant)
    for path in (ROLES, MAIN):
        declared = parse(path)["parameters"]["allowUserSubscriptionDeadLetters"]
        assert declared["type"] == "bool" and declared["default"] is False, path
    (roles_call,) = [c for c in module_calls(parse(MAIN)).values() if c["detail"]["path"] == ROLES]
    assert roles_call["config"]["params"]["allowUserSubscriptionDeadLetters"] == (
        "allowUserSubscriptionDeadLetters"
    )
    import json

    mapped = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    value = mapped["parameters"]["allowUserSubscriptionDeadLetters"]["value"]
    assert value == "${ALLOW_USER_SUBSCRIPTION_DEAD_LETTERS=false}"


def test_user_grants_are_off_unless_the_deployment_opts_in() -> None:
    roles = parse(ROLES)["parameters"]["allowUserIdentityPrincipal"]
    assert roles["type"] == "bool" and roles["default"] is False
    main = parse(MAIN)["parameters"]["allowUserIdentityPrincipal"]
    assert main["type"] == "bool" and main["default"] is False
    (roles_call,) = [c for c in module_calls(parse(MAIN)).values() if c["detail"]["path"] == ROLES]
    assert roles_call["config"]["params"]["allowUserIdentityPrincipal"] == (
        "allowUserIdentityPrincipal"
    )
    import json

    mapped = json.loads((INFRA / "main.parameters.json").read_text(encoding="utf-8"))
    value = mapped["parameters"]["allowUserIdentityPrincipal"]["value"]
    assert value == "${ALLOW_USER_IDENTITY_PRINCIPAL=false}"


def test_the_two_cosmos_assignments_are_serialised() -> None:
    """Cosmos DB refuses concurrent role-assignment writes on one account ("another operation in
    progress"): the user's assignment waits for the app's instead of racing it."""
    by_symbol = {r.symbol: r for r in resources(parse(ROLES))}
    user = by_symbol["userCosmosDataContributor"]
    assert user.body["dependsOn"] == ["appCosmosDataContributor"]
    assert by_symbol["appCosmosDataContributor"].type == f"{COSMOS}/sqlRoleAssignments"


def test_cosmos_data_plane_grants_use_the_built_in_data_contributor() -> None:
    assignments = [r for r in resources(parse(ROLES)) if r.type == f"{COSMOS}/sqlRoleAssignments"]
    principals = {}
    for res in assignments:
        props = res.body["properties"]
        # Account scope: it covers every container of database.bicep, the Cosmos DB trigger's
        # monitored `orders` and lease container `leases` included (the trigger with a managed
        # identity needs the Data Contributor on both).
        assert props["scope"] == {
            "operator": {
                "type": "property_accessor",
                "operands": {"operand_1": "cosmosAccount", "operand_2": "id"},
            }
        }
        assert resolve(ROLES, "cosmosDataContributor") == COSMOS_DATA_CONTRIBUTOR
        assert props["roleDefinitionId"] == (
            "${cosmosAccount.id}/sqlRoleDefinitions/${cosmosDataContributor}"
        )
        assert res.body["parent"] == "cosmosAccount"
        assert _existing_types()["cosmosAccount"] == COSMOS
        principals[PRINCIPALS[props["principalId"]]] = res.condition
    assert principals == {"app": None, "user": "grantUser"}
    # Exactly the two, so the serialisation above covers every Cosmos assignment.
    assert len(assignments) == 2


def test_main_passes_the_function_identity_and_the_deploying_user() -> None:
    (roles_call,) = [c for c in module_calls(parse(MAIN)).values() if c["detail"]["path"] == ROLES]
    params = roles_call["config"]["params"]
    assert accessor_chain(params["appPrincipalId"]) == ["identity", "outputs", "principalId"]
    assert params["userPrincipalId"] == "principalId"
    assert params["userPrincipalType"] == "principalType"
    # The function app waits for its grants so its first start does not meet 403s.
    (function_call,) = [
        c
        for c in module_calls(parse(MAIN)).values()
        if c["detail"]["path"] == "modules/functionapp.bicep"
    ]
    assert "roles" in function_call["config"]["dependsOn"]
