// @azure/cosmos against containers on several partition key ranges (issue 38, item 3): the
// JavaScript SDK reads the ranges, fans queries out per range and merges them itself, and reads
// the change feed per feed range. The Python SDK's side is in
// tests/cosmos_emulator/test_cosmos_partition_ranges.py.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import { ChangeFeedStartFrom, CosmosClient } from "@azure/cosmos";

import { drain } from "./change_feed.mjs";
import { startCosmos } from "./emulators.mjs";

const RANGES = 3;
const ITEMS = 30;

let cosmos;
let client;
let database;
let container;

before(async () => {
  cosmos = await startCosmos(["--partition-ranges", String(RANGES)]);
  client = new CosmosClient({ endpoint: cosmos.endpoint, key: cosmos.key });
  ({ database } = await client.databases.createIfNotExists({ id: "js-ranges" }));
  ({ container } = await database.containers.create({
    id: `c-${randomUUID()}`,
    partitionKey: { paths: ["/pk"] },
  }));
  for (let n = 0; n < ITEMS; n += 1) {
    await container.items.create({ id: `i${n}`, pk: `p${n}`, n });
  }
});

after(async () => {
  client?.dispose();
  await cosmos?.stop();
});

const everyId = () => Array.from({ length: ITEMS }, (_, n) => `i${n}`).sort();

describe("a container on three partition key ranges", () => {
  test("the SDK reads three ranges splitting the hash space", async () => {
    const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
    assert.deepEqual(
      ranges.map((r) => [r.id, r.minInclusive, r.maxExclusive]),
      [
        ["0", "", "15555555555555555555555555555555"],
        ["1", "15555555555555555555555555555555", "2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"],
        ["2", "2AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "FF"],
      ],
    );
    assert.equal((await container.getFeedRanges()).length, RANGES);
  });

  test("cross-partition queries fan out and merge each item once", async () => {
    const values = async (query) => (await container.items.query(query).fetchAll()).resources;
    const descending = await values("SELECT VALUE c.n FROM c ORDER BY c.n DESC");
    assert.deepEqual(descending, Array.from({ length: ITEMS }, (_, n) => ITEMS - 1 - n));
    assert.deepEqual(await values("SELECT VALUE COUNT(1) FROM c"), [ITEMS]);
    assert.deepEqual(await values("SELECT VALUE c.n FROM c ORDER BY c.n OFFSET 5 LIMIT 3"), [
      5, 6, 7,
    ]);
    // + 1: this SDK's unordered DISTINCT drops falsy rows (`if (item)` in
    // UnorderedDistinctEndpointComponent), so a 0 would be lost on any server.
    const distinct = await values("SELECT DISTINCT VALUE c.n % 4 + 1 FROM c");
    assert.deepEqual(distinct.sort(), [1, 2, 3, 4]);
    const { resources: all } = await container.items.readAll().fetchAll();
    assert.deepEqual(all.map((d) => d.id).sort(), everyId());
  });

  test("the change feed per feed range and for the whole container", async () => {
    const perRange = [];
    for (const feedRange of await container.getFeedRanges()) {
      const ids = await drain(
        container.items.getChangeFeedIterator({
          changeFeedStartFrom: ChangeFeedStartFrom.Beginning(feedRange),
        }),
      );
      assert.ok(ids.length > 0, "every range holds some of the keys");
      perRange.push(...ids);
    }
    assert.deepEqual(perRange.sort(), everyId());
    const whole = container.items.getChangeFeedIterator({
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
    });
    assert.deepEqual((await drain(whole)).sort(), everyId());
    await container.items.upsert({ id: "i4", pk: "p4", n: 40 });
    await container.items.create({ id: "late", pk: "late" });
    assert.deepEqual((await drain(whole)).sort(), ["i4", "late"]);
  });
});
