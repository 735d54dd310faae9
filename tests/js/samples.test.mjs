// Microsoft's JavaScript SDK samples for @azure/cosmos (Azure/azure-sdk-for-js,
// sdk/cosmosdb/cosmos/samples/v4/javascript/) replayed against our Cosmos emulator: each test
// makes the same SDK calls in the same order as the sample it names, and asserts what that
// sample prints or expects. The samples' code is not copied; their data (Families.json) is
// replaced by our own of the same shape. Samples that need what the emulator README names as a
// documented gap (stored procedures, all-versions-and-deletes change feed, Entra ID / resource
// tokens, client-side encryption, full-text search) are listed there with the reason, not here.
import assert from "node:assert/strict";
import { randomBytes, randomUUID } from "node:crypto";
import { Agent } from "node:https";
import { after, before, describe, test } from "node:test";

import {
  BulkOperationType,
  ChangeFeedMode,
  ChangeFeedPolicy,
  ChangeFeedRetentionTimeSpan,
  ChangeFeedStartFrom,
  CosmosClient,
  DataType,
  IndexKind,
  PartitionKeyBuilder,
  PartitionKeyDefinitionVersion,
  PartitionKeyKind,
  PatchOperationType,
  PriorityLevel,
  StatusCodes,
} from "@azure/cosmos";

import { changeRanges, startCosmos } from "./emulators.mjs";

let cosmos;
let client;
// The token of the emulator's switches, here for its range split (POST /_emulator/ranges).
const FAULT_TOKEN = randomBytes(24).toString("base64url");

before(async () => {
  process.env.COSMOS_EMULATOR_FAULT_TOKEN = FAULT_TOKEN;
  cosmos = await startCosmos();
  // As every sample builds it: endpoint and key, default options.
  client = new CosmosClient({ endpoint: cosmos.endpoint, key: cosmos.key });
});

after(async () => {
  client?.dispose();
  await cosmos?.stop();
});

// The samples read COSMOS_DATABASE / COSMOS_CONTAINER; each test draws its own.
function newIds() {
  return { databaseId: `sample-db-${randomUUID()}`, containerId: `sample-c-${randomUUID()}` };
}

// Shared/handleError.js `finish()`: every sample ends by deleting its database, and treats a
// failure to do so as the sample failing.
async function finish(databaseId) {
  const { statusCode } = await client.database(databaseId).delete();
  assert.equal(statusCode, 204);
  const { statusCode: afterDelete } = await client.database(databaseId).read().catch((e) => e);
  assert.equal(afterDelete ?? 404, 404);
}

// Issue 44: the change-feed and query samples run twice, as they are and against a container
// whose first partition key range splits in the middle of the sample (after its items are
// written, between its reads, between the pages of a continuation). The body takes the hook and
// calls it where the split goes; unsplit it does nothing.
const NO_SPLIT = {
  title: "",
  split: async () => {},
  hashVersion: PartitionKeyDefinitionVersion.V1,
};
const SPLIT = {
  title: " [its container split midway]",
  split: splitFirstRange,
  // The emulator splits hash-V2 ranges only (README, "Splits and merges"): the samples' V1
  // containers are V2 in this variant; their keys and reads are the same.
  hashVersion: PartitionKeyDefinitionVersion.V2,
};

/** The operator switch: split the container's first live range (POST /_emulator/ranges). */
async function splitFirstRange(container) {
  const { resources: ranges } = await container.readPartitionKeyRanges().fetchAll();
  const split = { split: ranges[0].id };
  assert.equal((await changeRanges(cosmos.endpoint, FAULT_TOKEN, container, split)).length, 2);
}

/** One sample body, registered twice: as it is, and with its container split midway. */
function withAndWithoutSplit(name, body) {
  test(name, () => body(NO_SPLIT));
  test(`${name}${SPLIT.title}`, () => body(SPLIT));
}

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (error) => {
    assert.equal(error.code, code, error.message);
    return true;
  });
}

// Our own families, in the shape of the samples' Data/Families.json.
const FAMILIES = [
  {
    id: "AndersenFamily",
    lastName: "Andersen",
    parents: [{ firstName: "Thomas" }, { firstName: "Mary Kay" }],
    children: [{ firstName: "Henriette Thaulow", gender: "female", grade: 5 }],
    address: { state: "WA", county: "King", city: "Seattle" },
    isRegistered: true,
  },
  {
    id: "WakefieldFamily",
    lastName: "Wakefield",
    parents: [{ familyName: "Wakefield", firstName: "Robin" }],
    children: [
      { familyName: "Merriam", firstName: "Jesse", gender: "female", grade: 8 },
      { familyName: "Miller", firstName: "Lisa", gender: "female", grade: 1 },
    ],
    address: { state: "NY", county: "Manhattan", city: "NY" },
    isRegistered: false,
  },
];

describe("management samples", () => {
  test("DatabaseManagement.js: create if not exists, read all, read twice, delete", async () => {
    const { databaseId } = newIds();
    await client.databases.createIfNotExists({ id: databaseId });
    const { resources: dbDefList } = await client.databases.readAll().fetchAll();
    assert.ok(dbDefList.some((db) => db.id === databaseId));
    const { resource: dbDef } = await client.database(databaseId).read();
    const databaseResponse = await client.database(databaseId).read();
    assert.equal(dbDef.id, databaseResponse.resource.id);
    assert.equal(dbDef.id, databaseId);
    await finish(databaseId);
  });

  test("ContainerManagement.js: create without a partition key, read all, read, delete", async () => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    // No partition key: the SDK sends its default, /_partitionKey.
    await database.containers.createIfNotExists({ id: containerId });
    const { resources: containersList } = await database.containers.readAll().fetchAll();
    assert.deepEqual(
      containersList.map((c) => c.id),
      [containerId],
    );
    const container = database.container(containerId);
    const { resource: containerDef } = await container.read();
    assert.equal(containerDef.id, containerId);
    assert.deepEqual(containerDef.partitionKey.paths, ["/_partitionKey"]);
    assert.equal(container.url, `dbs/${databaseId}/colls/${containerId}`);
    await container.delete();
    await rejectsWith(container.read(), 404);
    await finish(databaseId);
  });

  test("AlterQueryThroughput.js: read all offers, replace the container's with 700 RU/s", async () => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    await database.containers.createIfNotExists({ id: containerId });
    const { resources: offers } = await client.offers.readAll().fetchAll();
    let replaced = 0;
    for (const oldOffer of offers) {
      assert.ok(oldOffer.content, "found invalid offer");
      const newOffer = {
        ...oldOffer,
        content: {
          offerThroughput: 700,
          offerIsRUPerMinuteThroughputEnabled: oldOffer.content.offerIsRUPerMinuteThroughputEnabled,
        },
        offerVersion: "V2",
      };
      const { resources: databases } = await client.databases.readAll().fetchAll();
      const responses = await Promise.all(
        databases
          .filter((db) => db.id === databaseId)
          .map((db) => client.database(db.id).containers.readAll().fetchAll()),
      );
      const found = responses
        .flatMap((response) => response.resources)
        .find((c) => c._rid === oldOffer.offerResourceId && c.id === containerId);
      if (found) {
        const { resource } = await client.offer(oldOffer.id).replace(newOffer);
        assert.equal(resource.content.offerThroughput, 700);
        replaced += 1;
      }
    }
    // A container created without throughput in a database without any gets its own (400 RU/s
    // by default), so exactly one offer was the sample's to alter.
    assert.equal(replaced, 1);
    const { resources: after } = await client.offers.readAll().fetchAll();
    const { resource: containerDef } = await database.container(containerId).read();
    const offer = after.find((o) => o.offerResourceId === containerDef._rid);
    assert.equal(offer.content.offerThroughput, 700);
    const { resources: containersList } = await database.containers.readAll().fetchAll();
    assert.deepEqual(
      containersList.map((c) => c.id),
      [containerId],
    );
    await database.container(containerId).delete();
    await finish(databaseId);
  });
});

describe("item samples", () => {
  withAndWithoutSplit("ItemManagement.js: create, read all, conditional read / replace, upsert, patch", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({ id: containerId });
    // The sample creates them with Promise.all; one after the other here, so that the first
    // item listed is the Andersens, as with the sample's own data.
    for (const family of FAMILIES) await container.items.create(family);
    const { resources: itemDefList } = await container.items.readAll().fetchAll();
    assert.deepEqual(
      itemDefList.map((f) => f.id),
      ["AndersenFamily", "WakefieldFamily"],
    );
    const id = itemDefList[0].id;
    // No partition key: the items have no /_partitionKey, so they live under Undefined.
    const item = container.item(id, undefined);
    const { resource: readDoc } = await item.read();
    assert.equal(readDoc.id, id);

    // If-None-Match with the current etag: 304 and no body.
    const notModified = await item.read({
      accessCondition: { type: "IfNoneMatch", condition: readDoc._etag },
    });
    assert.equal(notModified.statusCode, StatusCodes.NotModified);
    // The sample's test for it: no item, and an empty body (the SDK makes that null).
    assert.equal(notModified.resource, null);
    assert.equal(notModified.headers["content-length"], "0");

    readDoc.foo = "bar";
    await item.replace(readDoc);
    const changed = await item.read({
      accessCondition: { type: "IfNoneMatch", condition: readDoc._etag },
    });
    assert.equal(changed.statusCode, 200, "Expected item this time. Something is wrong!");
    assert.equal(changed.resource.foo, "bar");

    await split(container);
    const querySpec = {
      query: "SELECT * FROM Families f WHERE  f.lastName = @lastName",
      parameters: [{ name: "@lastName", value: "Andersen" }],
    };
    const { resources: results } = await container.items.query(querySpec).fetchAll();
    assert.equal(results.length, 1);
    const person = results[0];
    assert.equal(person.children.length, 1);
    person.children.push({ firstName: "Newborn", gender: "unknown", fingers: 10, toes: 10 });
    person.lastName = "Updated Family";
    const { resource: updatedPerson } = await container.items.upsert(person);
    assert.equal(updatedPerson.lastName, "Updated Family");
    assert.equal(updatedPerson.children.length, 2);

    // A replace the server has moved past: the stale etag is refused with 412.
    person.foo = "bar";
    await item.replace(person);
    person.foo = "should never get set";
    await rejectsWith(
      item.replace(person, { accessCondition: { type: "IfMatch", condition: person._etag } }),
      412,
    );

    const upsertSource = itemDefList[1];
    upsertSource.foo = "baz";
    const upserted1 = await container.items.upsert(upsertSource);
    assert.equal(upserted1.statusCode, 200);
    upsertSource.id = "HazzardFamily";
    const upserted2 = await container.items.upsert(upsertSource);
    assert.equal(upserted2.statusCode, 201);
    assert.notEqual(upserted1.resource.id, upserted2.resource.id);
    assert.notEqual(upserted1.resource._rid, upserted2.resource._rid);

    const patchId = itemDefList.find((t) => t.id === "AndersenFamily").id;
    const { resource: patched1 } = await container
      .item(patchId)
      .patch([{ op: "replace", path: "/lastName", value: "Martin" }]);
    assert.equal(patched1.lastName, "Martin");
    const { resource: patched2 } = await container.item(patchId).patch([
      { op: "add", path: "/aka", value: "MeFamily" },
      { op: "replace", path: "/lastName", value: "Jose" },
      { op: "remove", path: "/parents" },
      { op: "set", path: "/address/zip", value: 90211 },
      { op: "incr", path: "/address/zip", value: 5 },
    ]);
    assert.equal(patched2.aka, "MeFamily");
    assert.equal(patched2.lastName, "Jose");
    assert.equal(patched2.parents, undefined);
    assert.equal(patched2.address.zip, 90216);
    const { resource: patched3 } = await container.item(patchId).patch({
      condition: "from c where NOT IS_DEFINED(c.newImproved)",
      operations: [{ op: "add", path: "/newImproved", value: "it works" }],
    });
    assert.equal(patched3.newImproved, "it works");
    // The same conditional patch again: the condition is now false, 412.
    await rejectsWith(
      container.item(patchId).patch({
        condition: "from c where NOT IS_DEFINED(c.newImproved)",
        operations: [{ op: "add", path: "/newImproved", value: "twice" }],
      }),
      412,
    );

    await item.delete();
    assert.equal((await item.read()).statusCode, 404);
    await finish(databaseId);
  });

  withAndWithoutSplit("IndexManagement.js: indexing directives, policy replaces, a range query", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container, resource: containerDef } = await database.containers.createIfNotExists({
      id: containerId,
    });
    const { resource: itemDef, item } = await container.items.create(
      { id: "item1", foo: "bar" },
      { indexingDirective: "exclude" },
    );
    assert.equal(itemDef.id, "item1");
    const querySpec = {
      query: "SELECT * FROM root r WHERE r.foo=@foo",
      parameters: [{ name: "@foo", value: "bar" }],
    };
    const { resources: results } = await container.items.query(querySpec).fetchAll();
    assert.equal(results.length, 0, "there were not meant to be results");
    assert.equal((await item.read()).statusCode, 200);

    await container.replace({
      id: containerId,
      partitionKey: containerDef.partitionKey,
      indexingPolicy: { automatic: false },
    });
    await container.items.create({ id: "item2", foo: "bar" }, { indexingDirective: "include" });
    const { resources: results2 } = await container.items.query(querySpec).fetchAll();
    assert.deepEqual(
      results2.map((r) => r.id),
      ["item2"],
    );

    await container.replace({
      id: containerId,
      partitionKey: containerDef.partitionKey,
      indexingPolicy: {
        includedPaths: [
          {
            path: "/*",
            indexes: [
              { kind: IndexKind.Range, dataType: DataType.String },
              { kind: IndexKind.Range, dataType: DataType.Number },
            ],
          },
        ],
      },
    });
    await container.items.create({ id: "item3", stringField: "a string value" });
    await split(container);
    const queryIterator = container.items.query(
      {
        query: "SELECT * FROM root r WHERE r.stringField > @value",
        parameters: [{ name: "@value", value: "a" }],
      },
      { enableScanInQuery: true },
    );
    const { resources: items, requestCharge } = await queryIterator.fetchNext();
    assert.equal(items[0].id, "item3");
    assert.equal(typeof requestCharge, "number");

    // The root path "/" with a legacy precision, and an excluded path.
    await container.replace({
      id: containerId,
      partitionKey: containerDef.partitionKey,
      indexingPolicy: {
        includedPaths: [
          {
            path: "/",
            indexes: [{ kind: IndexKind.Range, dataType: DataType.Number, precision: 2 }],
          },
        ],
        excludedPaths: [{ path: "/metaData/*" }],
      },
    });
    const { item: item4 } = await container.items.create({
      id: "item4",
      metaData: "meta",
      subDoc: { searchable: "searchable", subSubDoc: { someProperty: "value" } },
    });
    // The sample expects this query to throw ("paths that have been excluded"), but counts a
    // query that answers as passing too: it throws inside its own try and then catches that.
    // Excluded paths are not modelled here (README, "Query subset"), so it answers.
    await container.items
      .query({
        query: "SELECT * FROM root r WHERE r.metaData = @value",
        parameters: [{ name: "@value", value: "meta" }],
      })
      .fetchAll();
    assert.equal((await item4.read()).statusCode, 200);
    assert.equal((await item.read()).statusCode, 200);
    await finish(databaseId);
  });

  withAndWithoutSplit("QueryThroughput.js: ORDER BY _ts, a scan and COUNT with big pages, to the end", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    // The sample queries an existing container; this one holds 30 items over 5 partitions.
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container: created } = await database.containers.create({
      id: containerId,
      partitionKey: { paths: ["/pk"] },
    });
    for (let i = 0; i < 30; i++) await created.items.create({ id: `q${i}`, pk: `p${i % 5}` });
    const container = client.database(databaseId).container(containerId);
    const options = { maxItemCount: 10000, maxDegreeOfParallelism: 1000, bufferItems: true };
    const counted = {};
    for (const query of [
      "Select * from c order by c._ts",
      "Select * from c",
      "Select value count(c.id) from c",
    ]) {
      const queryIterator = container.items.query(query, options);
      const rows = [];
      // The sample's bound is on rows; pages are bounded too, so that an iterator that answers
      // empty pages forever fails the test instead of hanging it.
      for (let page = 0; queryIterator.hasMoreResults() && rows.length <= 100000; page++) {
        assert.ok(page < 100, `${query}: still more results after 100 pages`);
        const { resources } = await queryIterator.fetchNext();
        if (resources !== undefined) rows.push(...resources);
        if (page === 0) await split(container);
      }
      counted[query] = rows;
    }
    const ordered = counted["Select * from c order by c._ts"];
    assert.equal(ordered.length, 30);
    assert.deepEqual(
      ordered.map((r) => r._ts),
      ordered.map((r) => r._ts).sort((a, b) => a - b),
    );
    assert.equal(counted["Select * from c"].length, 30);
    assert.deepEqual(counted["Select value count(c.id) from c"], [30]);
    await finish(databaseId);
  });
});

async function createBulkItems(container) {
  const ids = {
    readItemId: `item1${randomUUID()}`,
    deleteItemId: `item2${randomUUID()}`,
    replaceItemId: `item3${randomUUID()}`,
    patchItemId: `item4${randomUUID()}`,
  };
  // Partition key values of every JSON type the sample tries: true, {} (Undefined), 5.
  await container.items.create({ id: ids.readItemId, key: true, class: "2010" });
  await container.items.create({ id: ids.deleteItemId, key: {}, class: "2011" });
  await container.items.create({ id: ids.replaceItemId, key: 5, class: "2012" });
  await container.items.create({ id: ids.patchItemId, key: 5, class: "2019" });
  return ids;
}

function bulkOperations(ids, upsertBody) {
  return [
    {
      operationType: BulkOperationType.Create,
      partitionKey: "A",
      resourceBody: { id: `doc1${randomUUID()}`, name: "sample", key: "A" },
    },
    { operationType: BulkOperationType.Upsert, partitionKey: "U", resourceBody: upsertBody },
    { operationType: BulkOperationType.Read, id: ids.readItemId, partitionKey: true },
    { operationType: BulkOperationType.Delete, id: ids.deleteItemId, partitionKey: {} },
    {
      operationType: BulkOperationType.Replace,
      partitionKey: 5,
      id: ids.replaceItemId,
      resourceBody: { id: ids.replaceItemId, name: "nice", key: 5 },
    },
    {
      operationType: BulkOperationType.Patch,
      partitionKey: 5,
      id: ids.patchItemId,
      resourceBody: {
        operations: [{ op: PatchOperationType.add, path: "/great", value: "goodValue" }],
      },
    },
  ];
}

async function bulkSampleContainer(containerId) {
  const databaseId = `bulk db${randomUUID()}`;
  const { database } = await client.databases.create({ id: databaseId });
  const { container } = await database.containers.create({
    id: containerId,
    partitionKey: { paths: ["/key"], version: 2 },
    throughput: 25100,
  });
  return { databaseId, container };
}

describe("bulk samples", () => {
  test("Bulk.js: items.bulk with each operation type (an upsert without id)", async () => {
    const { databaseId, container } = await bulkSampleContainer("bulkContainerV2");
    const ids = await createBulkItems(container);
    const response = await container.items.bulk(
      bulkOperations(ids, { name: "other", key: "U" }),
    );
    assert.deepEqual(
      response.map((r) => r.statusCode),
      [201, 201, 200, 204, 200, 200],
    );
    assert.equal(response[2].resourceBody.class, "2010");
    assert.equal(response[4].resourceBody.name, "nice");
    assert.equal(response[5].resourceBody.great, "goodValue");
    await rejectsWith(container.item(ids.deleteItemId, {}).read().then(throwOn404), 404);
    await finish(databaseId);
  });

  test("ExecuteBulkOperations.js: executeBulkOperations with each operation type", async () => {
    const { databaseId, container } = await bulkSampleContainer("bulkContainer");
    const ids = await createBulkItems(container);
    const response = await container.items.executeBulkOperations(
      bulkOperations(ids, { id: `doc1${randomUUID()}`, name: "other", key: "U" }),
    );
    assert.deepEqual(
      response.map((r) => r.response?.statusCode ?? r.error?.code),
      [201, 201, 200, 204, 200, 200],
    );
    assert.equal(response[5].response.resourceBody.great, "goodValue");
    await finish(databaseId);
  });
});

// A point read answers 404 without throwing; this turns it into the error the helper expects.
function throwOn404(response) {
  if (response.statusCode === 404) throw Object.assign(new Error("not found"), { code: 404 });
  return response;
}

describe("hierarchical partition keys and diagnostics", () => {
  test("HierarchicalPartitioning.js: MultiHash keys with None and null; read, patch, bulk", async () => {
    const { databaseId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: "hierarchical_partition_container",
      partitionKey: {
        paths: ["/name", "/address/zip"],
        version: 2,
        kind: PartitionKeyKind.MultiHash,
      },
      throughput: 400,
    });
    await container.items.create({
      id: "item1",
      name: "item1",
      key: "asdf",
      address: { zip: 23 },
      removable: "prev",
    });
    const bothKey = new PartitionKeyBuilder().addValue("item1").addValue(23).build();
    // The address is missing altogether: the second level is None.
    await container.items.create({ id: "item2", name: "item2", key: "asdf" });
    const missingKey = new PartitionKeyBuilder().addValue("item2").addNoneValue().build();
    await container.items.create({
      id: "item3",
      name: "item3",
      key: "asdf",
      address: { zip: null },
    });
    const nullKey = new PartitionKeyBuilder().addValue("item3").addNullValue().build();

    const read = await container.item("item1", bothKey).read();
    assert.equal(read.statusCode, 200);
    assert.equal(read.item.id, "item1");
    const { resource: patchedItem } = await container.item("item1", bothKey).patch([
      { op: "add", path: "/laster", value: "c" },
      { op: "replace", path: "/removable", value: "b" },
    ]);
    assert.equal(patchedItem.laster, "c");
    assert.equal(patchedItem.removable, "b");

    const response = await container.items.bulk([
      {
        // The partition key is taken from the body.
        operationType: BulkOperationType.Create,
        resourceBody: { id: "item3", name: "sample", address: { zip: 345 } },
      },
      {
        operationType: BulkOperationType.Upsert,
        resourceBody: { id: "item1", name: "item1", newValue: "newvalue", address: { zip: 23 } },
      },
      { operationType: BulkOperationType.Read, id: "item2", partitionKey: missingKey },
      { operationType: BulkOperationType.Delete, id: "item1", partitionKey: bothKey },
      {
        operationType: BulkOperationType.Replace,
        partitionKey: nullKey,
        id: "item3",
        resourceBody: { id: "item3", name: "item3", key: 5, address: { zip: null } },
      },
    ]);
    assert.deepEqual(
      response.map((e) => e.statusCode),
      [201, 200, 200, 204, 200],
    );
    assert.equal(response[2].resourceBody.key, "asdf");
    assert.equal((await container.item("item3", nullKey).read()).resource.key, 5);
    const sample = new PartitionKeyBuilder().addValue("sample").addValue(345).build();
    assert.equal((await container.item("item3", sample).read()).statusCode, 200);
    await finish(databaseId);
  });

  test("Diagnostics.js: diagnostics of a database, container, item, batch and query", async () => {
    const { databaseId, containerId } = newIds();
    const diagnosed = [];
    const dbResponse = await client.databases.createIfNotExists({ id: databaseId });
    diagnosed.push(dbResponse.diagnostics);
    const { container, diagnostics: containerDiagnostics } =
      await dbResponse.database.containers.createIfNotExists({
        id: containerId,
        partitionKey: { paths: ["/key1"] },
      });
    diagnosed.push(containerDiagnostics);
    const created = await container.items.create({
      id: "itemId",
      key1: "A",
      key2: "B",
      class: "2010",
    });
    assert.equal(created.statusCode, 201);
    diagnosed.push(created.diagnostics);
    // The sample's batch cannot succeed: its bodies carry `key`, not the container's `key1`, and
    // the item it patches does not exist. The SDK answers it without throwing.
    const batch = await container.items.batch(
      [
        {
          operationType: BulkOperationType.Create,
          resourceBody: { id: "batchItemCreate", key: "A", school: "high" },
        },
        {
          operationType: BulkOperationType.Upsert,
          resourceBody: { id: "upsertItemId", key: "A", school: "elementary" },
        },
        {
          operationType: BulkOperationType.Patch,
          id: "patchItemId",
          resourceBody: {
            operations: [{ op: PatchOperationType.add, path: "/good", value: "greatValue" }],
            condition: "from c where NOT IS_DEFINED(c.newImproved)",
          },
        },
      ],
      "A",
    );
    // As Cosmos answers a failed transactional batch: 207, the failing operation's status (a
    // key mismatch: 400, substatus 1001) and 424 (failed dependency) for the others.
    assert.equal(batch.code, 207);
    assert.deepEqual(
      batch.result.map((r) => r.statusCode),
      [400, 424, 424],
    );
    assert.equal(batch.result[0].subStatusCode, 1001);
    // All or nothing: none of its items was written.
    assert.equal((await container.item("batchItemCreate", "A").read()).statusCode, 404);
    diagnosed.push(batch.diagnostics);
    const { resources, diagnostics: queryDiagnostics } = await container.items
      .query("select * from c")
      .fetchAll();
    assert.deepEqual(
      resources.map((r) => r.id),
      ["itemId"],
    );
    diagnosed.push(queryDiagnostics);
    for (const diagnostics of diagnosed) {
      const stats = diagnostics.clientSideRequestStatistics;
      assert.equal(typeof stats.requestStartTimeUTCInMs, "number");
      assert.equal(typeof stats.requestDurationInMs, "number");
      assert.equal(typeof stats.totalResponsePayloadLengthInBytes, "number");
      assert.ok(
        stats.locationEndpointsContacted.every((url) => url.startsWith(cosmos.endpoint)),
        JSON.stringify(stats.locationEndpointsContacted),
      );
      assert.equal(stats.retryDiagnostics.failedAttempts.length, 0);
      assert.ok(Array.isArray(stats.metadataDiagnostics.metadataLookups));
      assert.ok(Array.isArray(stats.gatewayStatistics));
    }
    await finish(databaseId);
  });
});

// The samples' change feed loop: pages until the first 304, whose continuation it returns.
// `afterFirstPage` runs once the first page is in (the split variants split there).
async function drainChangeFeed(iterator, afterFirstPage = async () => {}) {
  const pages = [];
  for await (const result of iterator.getAsyncIterator()) {
    if (result.statusCode === StatusCodes.NotModified) {
      return { pages, continuationToken: result.continuationToken };
    }
    pages.push(result.result);
    if (pages.length === 1) await afterFirstPage();
  }
  throw new Error("the change feed iterator ended without a 304");
}

function sortedIds(pages) {
  return pages
    .flat()
    .map((item) => `${item.id}/${item.name}`)
    .sort();
}

// The samples' ingestData (ChangeFeedIterator/*): four items per i, one per name.
async function ingest(container, from, to, { ids = true } = {}) {
  const written = [];
  for (let i = from; i < to; i++) {
    for (const name of ["sample1", "sample2", "sample3", "sample4"]) {
      const body = ids ? { id: `item${i}`, name, key: i } : { name, key: i };
      const { resource } = await container.items.create(body);
      written.push(`${resource.id}/${name}`);
    }
  }
  return written;
}

// The samples' container keyed on /name, hash V1 as theirs are (V2 where it must split).
async function nameKeyContainer(
  database,
  containerId,
  version = PartitionKeyDefinitionVersion.V1,
) {
  const { container } = await database.containers.createIfNotExists({
    id: containerId,
    partitionKey: { paths: ["/name"], version },
    throughput: 11000,
  });
  return container;
}

describe("change feed samples", () => {
  withAndWithoutSplit("ChangeFeed.js: from a point in time, from the beginning, from now", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: containerId,
      partitionKey: { paths: ["/pk"] },
    });
    const pk = "0";
    const { resource: first } = await container.items.create({ id: "1", pk });
    // A point in time is sent as an HTTP date, in whole seconds (If-Modified-Since); the sample
    // means "after id=1", so wait for the clock to leave the second id=1 was written in.
    while (Math.floor(Date.now() / 1000) <= first._ts) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const now = new Date();
    const { headers } = await container.items.create({ id: "2", pk });
    const lsn = headers["lsn"];
    assert.match(lsn, /^\d+$/);
    await container.items.create({ id: "3", pk });

    // The sample's first scenario, a continuation from this `lsn`, is a documented gap (the
    // emulator README, "JavaScript SDK samples"): see the todo test below.
    const specificPointInTime = container.items.changeFeed(pk, { startTime: now });
    const fromBeginning = container.items.changeFeed(pk, { startFromBeginning: true });
    const fromNow = container.items.changeFeed(pk, {});
    const ids = async (iterator) => (await iterator.fetchNext()).result.map((v) => parseInt(v.id));

    // The sample notes Cosmos may answer a first empty page "while it finds the right
    // continuation"; two pages together hold [2, 3].
    const pointInTime = [...(await ids(specificPointInTime)), ...(await ids(specificPointInTime))];
    assert.deepEqual(pointInTime, [2, 3]);
    assert.deepEqual(await ids(fromBeginning), [1, 2, 3]);
    assert.deepEqual(await ids(fromNow), []);

    await split(container);
    await container.items.create({ id: "4", pk });
    for (const iterator of [specificPointInTime, fromBeginning, fromNow]) {
      assert.deepEqual(await ids(iterator), [4]);
    }
    await finish(databaseId);
  });

  test(
    "ChangeFeed.js: a continuation from a write's `lsn` header starts after that write",
    {
      todo:
        "the `lsn` header counts the container's writes, the change feed's continuation the " +
        "account's `_lsn`; Cosmos has one LSN per partition key range for both",
    },
    async () => {
      const { databaseId, containerId } = newIds();
      const { database } = await client.databases.createIfNotExists({ id: databaseId });
      const { container } = await database.containers.createIfNotExists({
        id: containerId,
        partitionKey: { paths: ["/pk"] },
      });
      const pk = "0";
      await container.items.create({ id: "1", pk });
      const { headers } = await container.items.create({ id: "2", pk });
      await container.items.create({ id: "3", pk });
      const specificContinuation = container.items.changeFeed(pk, {
        continuation: headers["lsn"].toString(),
      });
      try {
        const { result } = await specificContinuation.fetchNext();
        assert.deepEqual(
          result.map((v) => parseInt(v.id)),
          [3],
        );
      } finally {
        await finish(databaseId);
      }
    },
  );

  withAndWithoutSplit("ChangeFeedIteratorEntireContainer.js: from the beginning, then a continuation", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const container = await nameKeyContainer(database, containerId, hashVersion);
    const firstBatch = await ingest(container, 1, 11);
    const tillNow = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
      }),
      () => split(container),
    );
    assert.ok(tillNow.pages.every((page) => page.length === 1));
    assert.deepEqual(sortedIds(tillNow.pages), firstBatch.sort());
    const secondBatch = await ingest(container, 11, 21);
    const fromContinuation = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Continuation(tillNow.continuationToken),
      }),
      () => split(container),
    );
    assert.deepEqual(sortedIds(fromContinuation.pages), secondBatch.sort());
    // The sample's second half (ChangeFeedMode.AllVersionsAndDeletes) is a documented gap.
    await finish(databaseId);
  });

  withAndWithoutSplit("ChangeFeedIteratorEpkRange.js: a feed range from the beginning, then onwards", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const container = await nameKeyContainer(database, containerId, hashVersion);
    // No ids: the SDK makes them.
    await ingest(container, 1, 11, { ids: false });
    const feedRanges = await container.getFeedRanges();
    assert.ok(feedRanges.length >= 1);
    await split(container);
    const read = [];
    let continuationToken;
    for (const feedRange of feedRanges) {
      const tillNow = await drainChangeFeed(
        container.items.getChangeFeedIterator({
          maxItemCount: 1,
          changeFeedStartFrom: ChangeFeedStartFrom.Beginning(feedRange),
        }),
      );
      read.push(...tillNow.pages.flat());
      // The sample continues from the first range's token.
      continuationToken ??= tillNow.continuationToken;
    }
    assert.equal(read.length, 40);
    assert.equal(new Set(read.map((item) => item.id)).size, 40);
    await ingest(container, 11, 21, { ids: false });
    await split(container);
    const fromContinuation = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Continuation(continuationToken),
      }),
    );
    const newer = fromContinuation.pages.flat();
    assert.ok(newer.every((item) => item.key >= 11));
    if (feedRanges.length === 1) assert.equal(newer.length, 40);
    await finish(databaseId);
  });

  withAndWithoutSplit("ChangeFeedPartitionKey.js: one key from the beginning, then a continuation", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const container = await nameKeyContainer(database, containerId, hashVersion);
    await ingest(container, 1, 11, { ids: false });
    const tillNow = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning("sample1"),
      }),
      () => split(container),
    );
    const firstKeys = tillNow.pages.flat().map((item) => [item.name, item.key]);
    assert.deepEqual(
      firstKeys,
      Array.from({ length: 10 }, (_, i) => ["sample1", i + 1]),
    );
    await ingest(container, 11, 21, { ids: false });
    const fromContinuation = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Continuation(tillNow.continuationToken),
      }),
      () => split(container),
    );
    assert.deepEqual(
      fromContinuation.pages.flat().map((item) => [item.name, item.key]),
      Array.from({ length: 10 }, (_, i) => ["sample1", i + 11]),
    );
    await finish(databaseId);
  });

  withAndWithoutSplit("ChangeFeedHierarchicalPartitionKey.js: a MultiHash key, then a continuation", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: containerId,
      partitionKey: {
        paths: ["/key1", "/key2"],
        version: PartitionKeyDefinitionVersion.V2,
        kind: PartitionKeyKind.MultiHash,
      },
      throughput: 11000,
    });
    const ingestHierarchical = async (from, to) => {
      for (let i = from; i < to; i++) {
        for (const [key1, key2] of [
          [0, "0"],
          [0, "1"],
          [1, "0"],
          [1, "1"],
        ]) {
          await container.items.create({ name: `sample${i}`, key1, key2 });
        }
      }
    };
    await ingestHierarchical(1, 11);
    const tillNow = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning([0, "0"]),
      }),
      () => split(container),
    );
    const only00 = (items) => items.every((item) => item.key1 === 0 && item.key2 === "0");
    const first = tillNow.pages.flat();
    assert.ok(only00(first));
    assert.deepEqual(
      first.map((item) => item.name),
      Array.from({ length: 10 }, (_, i) => `sample${i + 1}`),
    );
    await ingestHierarchical(11, 21);
    await split(container);
    const fromContinuation = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Continuation(tillNow.continuationToken),
      }),
    );
    const second = fromContinuation.pages.flat();
    assert.ok(only00(second));
    assert.deepEqual(
      second.map((item) => item.name),
      Array.from({ length: 10 }, (_, i) => `sample${i + 11}`),
    );
    await finish(databaseId);
  });

  withAndWithoutSplit("ChangeFeedIteratorLatestVersion.js: the container, a partition key, a feed range", async ({ split, hashVersion }) => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const container = await nameKeyContainer(database, containerId, hashVersion);
    // This sample's ingestData includes its end.
    const ingestInclusive = (from, to) => ingest(container, from, to + 1);
    const continueFrom = (continuationToken) =>
      drainChangeFeed(
        container.items.getChangeFeedIterator({
          maxItemCount: 1,
          changeFeedStartFrom: ChangeFeedStartFrom.Continuation(continuationToken),
        }),
        () => split(container),
      );

    const batch12 = await ingestInclusive(1, 2);
    let drained = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
      }),
    );
    assert.deepEqual(sortedIds(drained.pages), batch12.sort());
    const batch34 = await ingestInclusive(3, 4);
    const after34 = await continueFrom(drained.continuationToken);
    assert.deepEqual(sortedIds(after34.pages), batch34.sort());

    drained = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning("sample1"),
      }),
    );
    assert.deepEqual(sortedIds(drained.pages), [
      "item1/sample1",
      "item2/sample1",
      "item3/sample1",
      "item4/sample1",
    ]);
    await ingestInclusive(5, 6);
    assert.deepEqual(sortedIds((await continueFrom(drained.continuationToken)).pages), [
      "item5/sample1",
      "item6/sample1",
    ]);

    const epkRanges = await container.getFeedRanges();
    drained = await drainChangeFeed(
      container.items.getChangeFeedIterator({
        maxItemCount: 1,
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning(epkRanges[0]),
      }),
    );
    if (epkRanges.length === 1) assert.equal(drained.pages.flat().length, 24);
    const batch78 = await ingestInclusive(7, 8);
    const newer = sortedIds((await continueFrom(drained.continuationToken)).pages);
    assert.ok(newer.every((id) => batch78.includes(id)));
    if (epkRanges.length === 1) assert.deepEqual(newer, batch78.sort());
    await finish(databaseId);
  });
});

describe("request option samples", () => {
  // samples-dev/ChangeFeedIterator/ChangeFeedIteratorWithPriorityLevel.ts (a TypeScript sample
  // with no JavaScript twin in samples/v4).
  test("ChangeFeedIteratorWithPriorityLevel.ts: Low and High priority feeds, from now", async () => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const container = await nameKeyContainer(database, containerId);
    const ingestInclusive = (from, to) => ingest(container, from, to + 1);
    const drainFrom = (changeFeedStartFrom, priorityLevel) =>
      drainChangeFeed(
        container.items.getChangeFeedIterator({
          maxItemCount: 1,
          changeFeedStartFrom,
          priorityLevel,
        }),
      );
    const resume = (token, priorityLevel) =>
      drainFrom(ChangeFeedStartFrom.Continuation(token), priorityLevel);

    const batch12 = await ingestInclusive(1, 2);
    let drained = await drainFrom(ChangeFeedStartFrom.Beginning(), PriorityLevel.Low);
    assert.deepEqual(sortedIds(drained.pages), batch12.sort());
    const batch34 = await ingestInclusive(3, 4);
    const after34 = await resume(drained.continuationToken, PriorityLevel.Low);
    assert.deepEqual(sortedIds(after34.pages), batch34.sort());

    drained = await drainFrom(ChangeFeedStartFrom.Beginning("sample1"), PriorityLevel.High);
    assert.equal(sortedIds(drained.pages).length, 4);
    await ingestInclusive(5, 6);
    const after56 = await resume(drained.continuationToken, PriorityLevel.High);
    assert.deepEqual(sortedIds(after56.pages), ["item5/sample1", "item6/sample1"]);

    const epkRanges = await container.getFeedRanges();
    drained = await drainFrom(ChangeFeedStartFrom.Beginning(epkRanges[0]), PriorityLevel.Low);
    if (epkRanges.length === 1) assert.equal(drained.pages.flat().length, 24);
    const batch78 = await ingestInclusive(7, 8);
    const after78 = sortedIds((await resume(drained.continuationToken, PriorityLevel.Low)).pages);
    assert.ok(after78.every((id) => batch78.includes(id)));
    if (epkRanges.length === 1) assert.deepEqual(after78, batch78.sort());

    // From now: the first answer is a 304 with the starting point, nothing before it.
    const fromNow = await drainFrom(ChangeFeedStartFrom.Now(epkRanges[0]), PriorityLevel.High);
    assert.deepEqual(fromNow.pages, []);
    const batch910 = await ingestInclusive(9, 10);
    const after910 = sortedIds((await resume(fromNow.continuationToken, PriorityLevel.High)).pages);
    assert.ok(after910.every((id) => batch910.includes(id)));
    if (epkRanges.length === 1) assert.deepEqual(after910, batch910.sort());
    await finish(databaseId);
  });

  test("PriorityLevel.js: CRUD, query and change feed with High and Low priority", async () => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: containerId,
      partitionKey: { paths: ["/category"], version: PartitionKeyDefinitionVersion.V1 },
      throughput: 11000,
    });
    const high = { priorityLevel: PriorityLevel.High };
    const low = { priorityLevel: PriorityLevel.Low };
    const { resource: highItem } = await container.items.create(
      { id: "high-priority-item", category: "important", description: "Critical operation" },
      high,
    );
    assert.equal(highItem.id, "high-priority-item");
    const { resource: lowItem } = await container.items.create(
      { id: "low-priority-item", category: "background", description: "Background operation" },
      low,
    );
    assert.equal(lowItem.id, "low-priority-item");
    for (let i = 1; i <= 3; i++) {
      await container.items.create(
        { id: `item-${i}`, category: `category-${i}`, value: i * 100 },
        i % 2 === 0 ? low : high,
      );
    }

    const { statusCode } = await container.item("high-priority-item", "important").read(high);
    assert.equal(statusCode, 200);
    await container.item("low-priority-item", "background").read(low);
    const { resources: allItems } = await container.items.readAll(low).fetchAll();
    assert.equal(allItems.length, 5);

    // The sample passes its parameters in the feed options (the second argument), so the query
    // goes out with an undeclared @category: a 400 that names it. (It then calls
    // `.setParameters(...)`, which @azure/cosmos 4.9.3 does not have: the sample itself stops
    // here with a TypeError, caught by its own try. The rest is what it means to do.)
    await assert.rejects(
      container.items
        .query("SELECT * FROM c WHERE c.category = @category", {
          parameters: [{ name: "@category", value: "important" }],
        })
        .fetchAll(),
      (error) => {
        assert.equal(error.code, 400);
        assert.match(error.message, /@category/);
        return true;
      },
    );
    const { resources: highResults } = await container.items
      .query(
        {
          query: "SELECT * FROM c WHERE c.category = @category",
          parameters: [{ name: "@category", value: "important" }],
        },
        high,
      )
      .fetchAll();
    assert.equal(highResults.length, 1);
    const { resources: lowResults } = await container.items
      .query(
        {
          query: "SELECT * FROM c WHERE c.category != @category",
          parameters: [{ name: "@category", value: "system" }],
        },
        low,
      )
      .fetchAll();
    assert.equal(lowResults.length, 5);

    const { resource: itemToUpdate } = await container.item("item-1", "category-1").read(high);
    itemToUpdate.value = 150;
    await container.item(itemToUpdate.id, "category-1").replace(itemToUpdate, high);
    itemToUpdate.value = 200;
    await container.item(itemToUpdate.id, "category-1").replace(itemToUpdate, low);
    assert.equal((await container.item("item-1", "category-1").read()).resource.value, 200);

    await container.item("low-priority-item", "background").delete(low);
    await container.item("high-priority-item", "important").delete(high);

    // The change feed part: its ingestData writes item<i> with category-<i % 3 + 1>.
    const ingestCategories = async (from, to) => {
      for (let i = from; i <= to; i++) {
        const category = `category-${(i % 3) + 1}`;
        await container.items.create({ id: `item${i}`, category, key: i });
      }
    };
    const count = async (options) => {
      const { pages, continuationToken } = await drainChangeFeed(
        container.items.getChangeFeedIterator(options),
      );
      return { ids: pages.flat().map((item) => item.id).sort(), continuationToken };
    };
    const resume = (continuationToken, priorityLevel) =>
      count({
        maxItemCount: 5,
        changeFeedStartFrom: ChangeFeedStartFrom.Continuation(continuationToken),
        priorityLevel,
      });

    await ingestCategories(1, 2);
    let fed = await count({
      maxItemCount: 5,
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
      priorityLevel: PriorityLevel.Low,
    });
    assert.deepEqual(fed.ids, ["item-1", "item-2", "item-3", "item1", "item2"]);
    await ingestCategories(3, 4);
    const after34 = await resume(fed.continuationToken, PriorityLevel.Low);
    assert.deepEqual(after34.ids, ["item3", "item4"]);

    fed = await count({
      maxItemCount: 5,
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning("category-1"),
      priorityLevel: PriorityLevel.High,
    });
    assert.deepEqual(fed.ids, ["item-1", "item3"]);
    await ingestCategories(5, 6);
    assert.deepEqual((await resume(fed.continuationToken, PriorityLevel.High)).ids, ["item6"]);

    const epkRanges = await container.getFeedRanges();
    fed = await count({
      maxItemCount: 5,
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning(epkRanges[0]),
      priorityLevel: PriorityLevel.Low,
    });
    if (epkRanges.length === 1) assert.equal(fed.ids.length, 9);
    await ingestCategories(7, 8);
    const afterRange = (await resume(fed.continuationToken, PriorityLevel.Low)).ids;
    assert.ok(afterRange.every((id) => ["item7", "item8"].includes(id)));
    if (epkRanges.length === 1) assert.deepEqual(afterRange, ["item7", "item8"]);

    // From now: the first answer is a 304 carrying the starting point.
    const fromNow = await count({
      maxItemCount: 5,
      changeFeedStartFrom: ChangeFeedStartFrom.Now(epkRanges[0]),
      priorityLevel: PriorityLevel.High,
    });
    assert.deepEqual(fromNow.ids, []);
    await ingestCategories(9, 10);
    const afterNow = (await resume(fromNow.continuationToken, PriorityLevel.High)).ids;
    assert.ok(afterNow.every((id) => ["item9", "item10"].includes(id)));
    if (epkRanges.length === 1) assert.deepEqual(afterNow, ["item10", "item9"]);
    await finish(databaseId);
  });

  test("ExcludedLocations.js: every kind of request with excludedLocations", async () => {
    const { databaseId, containerId } = newIds();
    const requestOptions = { excludedLocations: ["West US 3"] };
    const readItemId = `item1${randomUUID()}`;
    const deleteItemId = `item2${randomUUID()}`;
    const replaceItemId = `item3${randomUUID()}`;
    const patchItemId = `item4${randomUUID()}`;
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: containerId,
      partitionKey: { paths: ["/key"], version: 2 },
      throughput: 4000,
    });
    const key = "Central US";
    await container.items.create({ id: readItemId, key, value: 123 }, requestOptions);
    const { resource: readItem } = await container.item(readItemId, key).read(requestOptions);
    assert.equal(readItem.value, 123);
    const upserted = await container.items.upsert(
      { id: readItemId, key, value: 456 },
      requestOptions,
    );
    assert.equal(upserted.statusCode, 200);
    await container.item(readItemId, key).delete(requestOptions);
    const { resources: queryResults } = await container.items
      .query(
        { query: "SELECT * FROM c WHERE c.key = @key", parameters: [{ name: "@key", value: key }] },
        requestOptions,
      )
      .fetchAll();
    assert.deepEqual(queryResults, []);

    const batch = await container.items.batch(
      [
        { operationType: "Create", resourceBody: { id: deleteItemId, key, value: 1 } },
        { operationType: "Upsert", resourceBody: { id: replaceItemId, key, value: 2 } },
        { operationType: "Delete", id: deleteItemId },
      ],
      key,
      requestOptions,
    );
    assert.deepEqual(
      batch.result.map((r) => r.statusCode),
      [201, 201, 204],
    );

    const bulk = await container.items.executeBulkOperations(
      [
        {
          operationType: BulkOperationType.Create,
          partitionKey: key,
          resourceBody: { id: patchItemId, key, value: 4 },
        },
        {
          operationType: BulkOperationType.Upsert,
          partitionKey: key,
          resourceBody: { id: readItemId, key, value: 5 },
        },
        // No partition key: @azure/cosmos 4.9.3 refuses this one itself (newer versions look
        // it up), so it never reaches the server and the item stays.
        { operationType: BulkOperationType.Delete, id: patchItemId },
      ],
      requestOptions,
    );
    assert.deepEqual(
      bulk.slice(0, 2).map((r) => r.response.statusCode),
      [201, 201],
    );
    assert.equal(bulk[2].error.message, "PartitionKey is required for Delete operations.");
    assert.equal((await container.item(patchItemId, key).read()).resource.value, 4);
    // The sample ends without finish(); the database is dropped here all the same.
    await finish(databaseId);
  });

  test("ThroughputBucket.js: client and request buckets on CRUD, query, bulk, change feed", async () => {
    const { databaseId, containerId } = newIds();
    const bucketClient = new CosmosClient({
      endpoint: cosmos.endpoint,
      key: cosmos.key,
      throughputBucket: 1,
    });
    try {
      const { database } = await bucketClient.databases.createIfNotExists({ id: databaseId });
      const { container } = await database.containers.createIfNotExists({
        id: containerId,
        partitionKey: { paths: ["/pk"] },
      });
      const createItemId = `create-item-${randomUUID()}`;
      const { resource: createdItem } = await container.items.create(
        { id: createItemId, pk: "crud-pk", name: "CRUD Test Document", operation: "create" },
        { throughputBucket: 2 },
      );
      assert.equal(createdItem.id, createItemId);
      const { resource: readItem } = await container
        .item(createItemId, "crud-pk")
        .read({ throughputBucket: 3 });
      readItem.operation = "update";
      readItem.updatedAt = new Date().toISOString();
      const { resource: updatedItem } = await container
        .item(createItemId, "crud-pk")
        .replace(readItem, { throughputBucket: 4 });
      assert.equal(updatedItem.operation, "update");
      for (let i = 1; i <= 2; i++) {
        const { resource } = await container.items.upsert(
          {
            id: `upsert-item-${i}`,
            pk: "crud-pk",
            name: `Upserted Document ${i}`,
            operation: "upsert",
          },
          { throughputBucket: 2 },
        );
        assert.equal(resource.id, `upsert-item-${i}`);
      }
      await container.item(createItemId, "crud-pk").delete({ throughputBucket: 4 });
      const { resources: queryResults } = await container.items
        .query(
          {
            query: "SELECT * FROM c WHERE c.operation = @operation",
            parameters: [{ name: "@operation", value: "upsert" }],
          },
          { throughputBucket: 3 },
        )
        .fetchAll();
      assert.deepEqual(queryResults.map((r) => r.id).sort(), ["upsert-item-1", "upsert-item-2"]);
      for (const item of queryResults) await container.item(item.id, item.pk).delete();

      // A second client with bucket 1; one request overrides it with 2.
      const otherClient = new CosmosClient({
        endpoint: cosmos.endpoint,
        key: cosmos.key,
        throughputBucket: 1,
      });
      try {
        const clientContainer = otherClient.database(databaseId).container(container.id);
        const itemId1 = `client-bucket-${randomUUID()}`;
        const itemId2 = `operation-bucket-${randomUUID()}`;
        await clientContainer.items.create({ id: itemId1, pk: "client-test" });
        await clientContainer.items.create(
          { id: itemId2, pk: "client-test" },
          { throughputBucket: 2 },
        );
        await clientContainer.item(itemId1, "client-test").delete();
        await clientContainer.item(itemId2, "client-test").delete();
      } finally {
        otherClient.dispose();
      }

      // The sample leaves the partition key to be taken from each body, which newer SDKs do;
      // @azure/cosmos 4.9.3 refuses such an operation itself, before any request. So it is given.
      const bodies = Array.from({ length: 5 }, (_, i) => ({
        id: `bulk-item-${i + 1}`,
        pk: "bulk-pk",
        name: `Bulk Document ${i + 1}`,
      }));
      const [refused] = await container.items.executeBulkOperations(
        [{ operationType: "Create", resourceBody: bodies[0] }],
        { throughputBucket: 2 },
      );
      assert.equal(refused.error.message, "PartitionKey is required for Create operations.");
      const operations = bodies.map((resourceBody) => ({
        operationType: "Create",
        partitionKey: "bulk-pk",
        resourceBody,
      }));
      const res = await container.items.executeBulkOperations(operations, { throughputBucket: 2 });
      assert.deepEqual(
        res.map((r) => r.response.statusCode),
        [201, 201, 201, 201, 201],
      );

      for (let i = 1; i <= 3; i++) {
        await container.items.create({ id: `changefeed-item-${i}`, pk: "changefeed-pk" });
      }
      const changeFeedIterator = container.items.getChangeFeedIterator({
        changeFeedStartFrom: ChangeFeedStartFrom.Beginning("changefeed-pk"),
        throughputBucket: 4,
      });
      assert.ok(changeFeedIterator.hasMoreResults);
      const res2 = await changeFeedIterator.readNext();
      assert.equal(res2.result.length, 3);
      for (let i = 1; i <= 3; i++) {
        await container.item(`changefeed-item-${i}`, "changefeed-pk").delete();
      }
      const { statusCode } = await bucketClient.database(databaseId).delete();
      assert.equal(statusCode, 204);
    } finally {
      bucketClient.dispose();
    }
  });
});

// The samples the emulator README names as documented gaps fail at their first unsupported
// request with a 400 that names the feature, never with a wrong answer. (Stored procedures,
// ServerSideScripts.js and BulkUpdateWithSproc.js: cosmos.test.mjs, "stored procedures".)
describe("samples of documented gaps", () => {
  test("ChangeFeedIteratorAllVersionsAndDeletes.js, ChangeFeedFullFidelity*.js: 400", async () => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: containerId,
      partitionKey: { paths: ["/name"], version: PartitionKeyDefinitionVersion.V1 },
      changeFeedPolicy: new ChangeFeedPolicy(ChangeFeedRetentionTimeSpan.fromMinutes(5)),
      throughput: 11000,
    });
    const iterator = container.items.getChangeFeedIterator({
      maxItemCount: 1,
      changeFeedStartFrom: ChangeFeedStartFrom.Now(),
      changeFeedMode: ChangeFeedMode.AllVersionsAndDeletes,
    });
    await assert.rejects(iterator.readNext(), (error) => {
      assert.equal(error.code, 400);
      assert.match(error.message, /change feed mode A-IM: 'Full-Fidelity Feed'/);
      return true;
    });
    await finish(databaseId);
  });

  test("AADAuth.js, EntraAuth.js: an Entra ID token is 401 (master key only)", async () => {
    // The SDK sends a bearer token over TLS only, so this takes an --https emulator (its
    // certificate is self-signed), and a stand-in credential: the samples'
    // DefaultAzureCredential would need a tenant.
    const tlsCosmos = await startCosmos(["--https"]);
    const aadClient = new CosmosClient({
      endpoint: tlsCosmos.endpoint,
      agent: new Agent({ rejectUnauthorized: false }),
      aadCredentials: {
        getToken: async () => ({
          token: "entra-token",
          expiresOnTimestamp: Date.now() + 3_600_000,
        }),
      },
    });
    try {
      await assert.rejects(aadClient.databases.readAll().fetchAll(), (error) => {
        assert.equal(error.code, 401);
        assert.match(error.message, /Only master-key authorization is supported by this emulator/);
        return true;
      });
    } finally {
      aadClient.dispose();
      await tlsCosmos.stop();
    }
  });

  test("Query/FullTextSearch.js: ORDER BY RANK FullTextScore is 400 naming it", async () => {
    const { databaseId, containerId } = newIds();
    const { database } = await client.databases.createIfNotExists({ id: databaseId });
    const { container } = await database.containers.createIfNotExists({
      id: containerId,
      partitionKey: { paths: ["/id"] },
      fullTextPolicy: {
        defaultLanguage: "en-US",
        fullTextPaths: [{ path: "/text1", language: "en-US" }],
      },
      indexingPolicy: {
        automatic: true,
        includedPaths: [{ path: "/*" }],
        excludedPaths: [{ path: '/"_etag"/?' }],
        fullTextIndexes: [{ path: "/text1" }],
      },
    });
    await container.items.create({ id: "full_text_item0", text1: "some-text" });
    const query = "SELECT TOP 3 c.text1 FROM c ORDER BY RANK FullTextScore(c.text1, ['artist'])";
    await assert.rejects(
      container.items.query(query, { forceQueryPlan: true }).fetchAll(),
      (error) => {
        assert.equal(error.code, 400);
        assert.match(error.message, /ORDER BY RANK/);
        return true;
      },
    );
    await finish(databaseId);
  });
});
