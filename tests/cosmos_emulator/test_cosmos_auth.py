"""Master-key signatures: a request signed with another key, or not signed, is 401."""

from __future__ import annotations

import base64

import pytest
from azure.cosmos import CosmosClient, exceptions
from cosmos_rest import call

from cosmos_emulator import WELL_KNOWN_KEY, RunningCosmosEmulator, start_in_background

OTHER_KEY = base64.b64encode(b"not-the-emulator-key-" * 3).decode()


def test_wrong_key_is_401_through_the_sdk(cosmos_emulator: RunningCosmosEmulator) -> None:
    with pytest.raises(exceptions.CosmosHttpResponseError) as err:
        CosmosClient(cosmos_emulator.url, OTHER_KEY).create_database("never")
    assert err.value.status_code == 401


def test_unsigned_and_tampered_requests_are_401(cosmos_emulator: RunningCosmosEmulator) -> None:
    status, _, body = call(cosmos_emulator.url, cosmos_emulator.key, "GET", "/dbs/", sign=False)
    assert status == 401 and body["code"] == "Unauthorized"
    status, _, _ = call(cosmos_emulator.url, OTHER_KEY, "GET", "/dbs/")
    assert status == 401
    status, _, _ = call(cosmos_emulator.url, cosmos_emulator.key, "GET", "/dbs/")
    assert status == 200


def test_a_configured_key_replaces_the_well_known_one() -> None:
    with start_in_background(key=OTHER_KEY) as emu:
        assert emu.key == OTHER_KEY
        client = CosmosClient(emu.url, OTHER_KEY)
        client.create_database("ok")
        with pytest.raises(exceptions.CosmosHttpResponseError) as err:
            CosmosClient(emu.url, WELL_KNOWN_KEY).create_database("nope")
        assert err.value.status_code == 401
