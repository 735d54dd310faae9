// @azure/cosmos (the JavaScript SDK, pinned in package-lock.json) against our Cosmos emulator:
// the common paths an app takes, and each fix of issue 26 (bulk, the bare-array patch body,
// the indexing directive, computed properties). The same fixes are tested through the Python
// SDK in tests/cosmos_emulator/test_cosmos_bulk.py and test_cosmos_js_fixes.py.
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";

import {
  BulkOperationType,
  ChangeFeedMode,
  ChangeFeedStartFrom,
  CosmosClient,
  StatusCodes,
} from "@azure/cosmos";

import { startCosmos } from "./emulators.mjs";

let cosmos;
let client;
let database;

before(async () => {
  cosmos = await startCosmos();
  // Default options: the account metadata advertises the plain-HTTP URL the emulator serves,
  // so endpoint discovery keeps talking to it (as with the vNext emulator over HTTP).
  client = new CosmosClient({ endpoint: cosmos.endpoint, key: cosmos.key });
  ({ database } = await client.databases.createIfNotExists({ id: "js-cosmos" }));
});

after(async () => {
  client?.dispose();
  await cosmos?.stop();
});

async function newContainer(definition = {}) {
  const { container } = await database.containers.create({
    id: `c-${randomUUID()}`,
    partitionKey: { paths: ["/pk"] },
    ...definition,
  });
  return container;
}

async function rejectsWith(promise, code) {
  await assert.rejects(promise, (error) => {
    assert.equal(error.code, code, error.message);
    return true;
  });
}

async function queryIds(container, query, options = {}) {
  const { resources } = await container.items.query(query, options).fetchAll();
  return resources.map((row) => row.id).sort();
}

describe("common paths", () => {
  test("databases and containers: create, read, createIfNotExists, delete", async () => {
    const id = `db-${randomUUID()}`;
    const { database: db, statusCode } = await client.databases.create({ id });
    assert.equal(statusCode, 201);
    await rejectsWith(client.databases.create({ id }), 409);
    const { container } = await db.containers.createIfNotExists({
      id: "things",
      partitionKey: { paths: ["/pk"] },
      defaultTtl: -1,
    });
    const { resource } = await container.read();
    assert.deepEqual(resource.partitionKey.paths, ["/pk"]);
    assert.equal(resource.defaultTtl, -1);
    const again = await db.containers.createIfNotExists({ id: "things", partitionKey: "/pk" });
    assert.equal(again.resource.id, "things");
    await db.delete();
    await rejectsWith(db.read(), 404);
  });

  test("items: create, read, replace, upsert, delete; 409 and 404", async () => {
    const container = await newContainer();
    const { resource: created, statusCode } = await container.items.create({
      id: "o1",
      pk: "a",
      n: 1,
    });
    assert.equal(statusCode, 201);
    assert.ok(created._etag && created._rid && created._ts);
    await rejectsWith(container.items.create({ id: "o1", pk: "a" }), 409);
    // The same id in another logical partition is another item.
    await container.items.create({ id: "o1", pk: "b" });
    const { resource: read } = await container.item("o1", "a").read();
    assert.equal(read.n, 1);
    const { resource: replaced } = await container
      .item("o1", "a")
      .replace({ id: "o1", pk: "a", n: 2 });
    assert.equal(replaced.n, 2);
    assert.notEqual(replaced._etag, created._etag);
    const upserted = await container.items.upsert({ id: "o2", pk: "a", n: 3 });
    assert.equal(upserted.statusCode, 201);
    const upsertedAgain = await container.items.upsert({ id: "o2", pk: "a", n: 4 });
    assert.equal(upsertedAgain.statusCode, 200);
    await container.item("o1", "a").delete();
    // A read of a missing item answers 404 (the SDK returns it rather than throwing).
    const missing = await container.item("o1", "a").read();
    assert.equal(missing.statusCode, 404);
    assert.equal(missing.resource, undefined);
    await rejectsWith(container.item("o1", "a").delete(), 404);
  });

  test("a stale etag is 412; the current one wins", async () => {
    const container = await newContainer();
    const { resource: first } = await container.items.create({ id: "l", pk: "a", owner: "x" });
    const { resource: second } = await container
      .item("l", "a")
      .replace(
        { id: "l", pk: "a", owner: "y" },
        { accessCondition: { type: "IfMatch", condition: first._etag } },
      );
    await rejectsWith(
      container
        .item("l", "a")
        .replace(
          { id: "l", pk: "a", owner: "z" },
          { accessCondition: { type: "IfMatch", condition: first._etag } },
        ),
      412,
    );
    await rejectsWith(
      container
        .item("l", "a")
        .delete({ accessCondition: { type: "IfMatch", condition: first._etag } }),
      412,
    );
    const { resource } = await container.item("l", "a").read();
    assert.equal(resource.owner, "y");
    assert.equal(resource._etag, second._etag);
  });

  test("queries: parameters, one partition or all, ORDER BY, COUNT, paging", async () => {
    const container = await newContainer();
    for (const [id, pk, n] of [
      ["1", "a", 5],
      ["2", "b", 1],
      ["3", "a", 3],
      ["4", "c", 4],
    ]) {
      await container.items.create({ id, pk, n, kind: n > 2 ? "big" : "small" });
    }
    const big = await queryIds(container, {
      query: "SELECT * FROM c WHERE c.kind = @kind",
      parameters: [{ name: "@kind", value: "big" }],
    });
    assert.deepEqual(big, ["1", "3", "4"]);
    const inA = await queryIds(
      container,
      { query: "SELECT c.id FROM c WHERE c.n > @min", parameters: [{ name: "@min", value: 3 }] },
      { partitionKey: "a" },
    );
    assert.deepEqual(inA, ["1"]);
    const { resources: ordered } = await container.items
      .query("SELECT VALUE c.id FROM c ORDER BY c.n DESC")
      .fetchAll();
    assert.deepEqual(ordered, ["1", "4", "3", "2"]);
    const { resources: counted } = await container.items
      .query("SELECT VALUE COUNT(1) FROM c")
      .fetchAll();
    assert.deepEqual(counted, [4]);
    const pages = [];
    const iterator = container.items.query("SELECT * FROM c", { maxItemCount: 3 });
    while (iterator.hasMoreResults()) {
      const { resources } = await iterator.fetchNext();
      if (resources.length) pages.push(resources.length);
    }
    assert.equal(
      pages.reduce((a, b) => a + b, 0),
      4,
    );
    assert.ok(pages.length >= 2, `expected several pages, got ${pages}`);
  });

  test("transactional batch: all or nothing in one partition", async () => {
    const container = await newContainer();
    await container.items.create({ id: "taken", pk: "a" });
    const ok = await container.items.batch(
      [
        { operationType: BulkOperationType.Create, resourceBody: { id: "b1", pk: "a" } },
        { operationType: BulkOperationType.Upsert, resourceBody: { id: "b2", pk: "a", v: 1 } },
        { operationType: BulkOperationType.Read, id: "taken" },
      ],
      "a",
    );
    assert.deepEqual(
      ok.result.map((r) => r.statusCode),
      [201, 201, 200],
    );
    const failed = await container.items.batch(
      [
        { operationType: BulkOperationType.Create, resourceBody: { id: "b3", pk: "a" } },
        { operationType: BulkOperationType.Create, resourceBody: { id: "taken", pk: "a" } },
      ],
      "a",
    );
    assert.equal(failed.code, StatusCodes.MultiStatus);
    assert.deepEqual(
      failed.result.map((r) => r.statusCode),
      [424, 409],
    );
    const missing = await container.item("b3", "a").read();
    assert.equal(missing.statusCode, 404);
  });

  test("change feed from the beginning, then only what is new", async () => {
    const container = await newContainer();
    await container.items.create({ id: "1", pk: "a" });
    await container.items.create({ id: "2", pk: "b" });
    const iterator = container.items.getChangeFeedIterator({
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
    });
    const seen = [];
    for (;;) {
      const page = await iterator.readNext();
      if (page.statusCode === StatusCodes.NotModified) break;
      seen.push(...page.result.map((d) => d.id));
    }
    assert.deepEqual(seen.sort(), ["1", "2"]);
    await container.items.upsert({ id: "1", pk: "a", v: 2 });
    await container.items.create({ id: "3", pk: "c" });
    const next = await iterator.readNext();
    assert.equal(next.statusCode, 200);
    assert.deepEqual(next.result.map((d) => d.id).sort(), ["1", "3"]);
    const idle = await iterator.readNext();
    assert.equal(idle.statusCode, StatusCodes.NotModified);
  });
});

describe("bulk (non-atomic batches by partition key range)", () => {
  test("items.bulk: per-operation partition keys and statuses", async () => {
    const container = await newContainer();
    await container.items.create({ id: "taken", pk: "a", v: 0 });
    await container.items.create({ id: "r", pk: "b", v: 1 });
    const responses = await container.items.bulk([
      { operationType: BulkOperationType.Create, resourceBody: { id: "x", pk: "a" } },
      { operationType: BulkOperationType.Create, resourceBody: { id: "x", pk: "b" } },
      { operationType: BulkOperationType.Create, resourceBody: { id: "taken", pk: "a" } },
      { operationType: BulkOperationType.Upsert, resourceBody: { id: "u", pk: "c", v: 1 } },
      { operationType: BulkOperationType.Read, id: "r", partitionKey: "b" },
      { operationType: BulkOperationType.Delete, id: "missing", partitionKey: "a" },
      {
        operationType: BulkOperationType.Patch,
        id: "r",
        partitionKey: "b",
        resourceBody: { operations: [{ op: "incr", path: "/v", value: 5 }] },
      },
    ]);
    assert.deepEqual(
      responses.map((r) => r.statusCode),
      [201, 201, 409, 201, 200, 404, 200],
    );
    assert.equal(responses[4].resourceBody.v, 1);
    assert.equal(responses[0].eTag, responses[0].resourceBody._etag);
    // Nothing was rolled back by the failures.
    assert.equal((await container.item("x", "a").read()).statusCode, 200);
    assert.equal((await container.item("x", "b").read()).statusCode, 200);
    assert.equal((await container.item("u", "c").read()).resource.v, 1);
    assert.equal((await container.item("r", "b").read()).resource.v, 6);
    assert.equal((await container.item("taken", "a").read()).resource.v, 0);
  });

  test("items.bulk with continueOnError false stops at the first failure", async () => {
    const container = await newContainer();
    await container.items.create({ id: "taken", pk: "a" });
    const responses = await container.items.bulk(
      [
        { operationType: BulkOperationType.Create, resourceBody: { id: "before", pk: "a" } },
        { operationType: BulkOperationType.Create, resourceBody: { id: "taken", pk: "a" } },
        { operationType: BulkOperationType.Create, resourceBody: { id: "after", pk: "a" } },
      ],
      { continueOnError: false },
    );
    assert.deepEqual(
      responses.map((r) => r.statusCode),
      [201, 409, 424],
    );
    assert.equal((await container.item("after", "a").read()).statusCode, 404);
  });

  test("executeBulkOperations: per-operation responses and errors", async () => {
    const container = await newContainer();
    await container.items.create({ id: "taken", pk: "a" });
    // executeBulkOperations wants the partition key on every operation.
    const results = await container.items.executeBulkOperations([
      {
        operationType: BulkOperationType.Create,
        partitionKey: "a",
        resourceBody: { id: "n1", pk: "a" },
      },
      {
        operationType: BulkOperationType.Create,
        partitionKey: "a",
        resourceBody: { id: "taken", pk: "a" },
      },
      {
        operationType: BulkOperationType.Replace,
        partitionKey: "z",
        id: "n2",
        resourceBody: { id: "n2", pk: "z" },
      },
      {
        operationType: BulkOperationType.Upsert,
        partitionKey: "b",
        resourceBody: { id: "n3", pk: "b" },
      },
    ]);
    assert.equal(results.length, 4);
    assert.equal(results[0].response?.statusCode, 201);
    assert.equal(results[1].error?.code, 409);
    assert.equal(results[2].error?.code, 404);
    assert.equal(results[3].response?.statusCode, 201);
    assert.deepEqual(await queryIds(container, "SELECT c.id FROM c"), ["n1", "n3", "taken"]);
  });
});

describe("patch", () => {
  test("item.patch with a bare array of operations (what the JS SDK sends)", async () => {
    const container = await newContainer();
    await container.items.create({ id: "p", pk: "a", n: 1, tags: [] });
    const { resource } = await container.item("p", "a").patch([
      { op: "incr", path: "/n", value: 2 },
      { op: "add", path: "/tags/-", value: "js" },
      { op: "set", path: "/status", value: "done" },
    ]);
    assert.equal(resource.n, 3);
    assert.deepEqual(resource.tags, ["js"]);
    assert.equal((await container.item("p", "a").read()).resource.status, "done");
  });

  test("item.patch with {operations, condition}: a false condition is 412", async () => {
    const container = await newContainer();
    await container.items.create({ id: "p", pk: "a", n: 1 });
    await rejectsWith(
      container.item("p", "a").patch({
        condition: "FROM c WHERE c.n = 2",
        operations: [{ op: "set", path: "/n", value: 9 }],
      }),
      412,
    );
    const { resource } = await container.item("p", "a").patch({
      condition: "FROM c WHERE c.n = 1",
      operations: [{ op: "set", path: "/n", value: 9 }],
    });
    assert.equal(resource.n, 9);
  });

  test("a patch of the partition key is refused and changes nothing", async () => {
    const container = await newContainer();
    await container.items.create({ id: "p", pk: "a", n: 1 });
    await rejectsWith(
      container.item("p", "a").patch({ operations: [{ op: "set", path: "/pk", value: "b" }] }),
      400,
    );
    assert.equal((await container.item("p", "a").read()).resource.n, 1);
  });
});

describe("indexing directive", () => {
  test("indexingDirective exclude: left out of queries, not of reads", async () => {
    const container = await newContainer();
    await container.items.create({ id: "in", pk: "a", foo: "bar" });
    await container.items.create(
      { id: "out", pk: "a", foo: "bar" },
      { indexingDirective: "exclude" },
    );
    const query = {
      query: "SELECT * FROM root r WHERE r.foo = @foo",
      parameters: [{ name: "@foo", value: "bar" }],
    };
    assert.deepEqual(await queryIds(container, query), ["in"]);
    assert.deepEqual(await queryIds(container, "SELECT * FROM c", { partitionKey: "a" }), ["in"]);
    // Point reads and the change feed still see it (items.readAll is a query in this SDK).
    assert.equal((await container.item("out", "a").read()).resource.foo, "bar");
    const feed = container.items.getChangeFeedIterator({
      changeFeedStartFrom: ChangeFeedStartFrom.Beginning(),
    });
    const { result: changes } = await feed.readNext();
    assert.deepEqual(changes.map((d) => d.id).sort(), ["in", "out"]);
    // A later write with include brings it back.
    await container.items.upsert(
      { id: "out", pk: "a", foo: "bar" },
      { indexingDirective: "include" },
    );
    assert.deepEqual(await queryIds(container, query), ["in", "out"]);
  });

  test("with automatic indexing off only items written with include are queryable", async () => {
    const container = await newContainer();
    const { resource: definition } = await container.read();
    await container.replace({ ...definition, indexingPolicy: { automatic: false } });
    await container.items.create({ id: "plain", pk: "a", foo: "bar" });
    await container.items.create(
      { id: "inc", pk: "a", foo: "bar" },
      { indexingDirective: "include" },
    );
    assert.deepEqual(await queryIds(container, "SELECT * FROM c WHERE c.foo = 'bar'"), ["inc"]);
  });
});

describe("computed properties", () => {
  const computedProperties = [
    { name: "cp_lowerName", query: "SELECT VALUE LOWER(c.name) FROM c" },
    { name: "cp_total", query: "SELECT VALUE c.price * c.qty FROM c" },
  ];

  test("usable in WHERE, ORDER BY and SELECT; not returned by SELECT *", async () => {
    const container = await newContainer({ computedProperties });
    assert.deepEqual((await container.read()).resource.computedProperties, computedProperties);
    await container.items.create({ id: "1", pk: "a", name: "Widget", price: 3, qty: 2 });
    await container.items.create({ id: "2", pk: "b", name: "GADGET", price: 10, qty: 1 });
    const { resources: rows } = await container.items
      .query("SELECT c.id, c.cp_lowerName FROM c WHERE c.cp_lowerName = 'gadget'")
      .fetchAll();
    assert.deepEqual(rows, [{ id: "2", cp_lowerName: "gadget" }]);
    const { resources: ordered } = await container.items
      .query("SELECT VALUE c.id FROM c ORDER BY c.cp_total DESC")
      .fetchAll();
    assert.deepEqual(ordered, ["2", "1"]);
    const { resources: star } = await container.items
      .query("SELECT * FROM c WHERE c.id = '1'", { partitionKey: "a" })
      .fetchAll();
    assert.equal(star[0].name, "Widget");
    assert.equal("cp_lowerName" in star[0], false);
  });

  test("a definition outside the documented subset is refused with the reason", async () => {
    await assert.rejects(
      newContainer({
        computedProperties: [{ name: "cp", query: "SELECT VALUE c.a FROM c WHERE c.a > 1" }],
      }),
      (error) => {
        assert.equal(error.code, 400);
        assert.match(error.message, /WHERE/);
        return true;
      },
    );
    await rejectsWith(
      newContainer({ computedProperties: [{ name: "id", query: "SELECT VALUE c.a FROM c" }] }),
      400,
    );
  });
});

describe("built-in functions and the ?: / ?? operators (issue 38)", () => {
  // The JavaScript SDK asks the gateway for a query plan before every cross-partition query,
  // a path the Python SDK takes only after a 400 / 1004; the results must be the same.
  test("in queries and in computed properties", async () => {
    const container = await newContainer({
      computedProperties: [
        { name: "cp_area", query: "SELECT VALUE POWER(c.side, 2) FROM c" },
        { name: "cp_size", query: 'SELECT VALUE c.side > 2 ? "big" : "small" FROM c' },
      ],
    });
    await container.items.create({ id: "1", pk: "a", side: 3, label: "door" });
    await container.items.create({ id: "2", pk: "b", side: 1.5 });
    const { resources: rows } = await container.items
      .query(
        'SELECT c.id, c.cp_area, c.cp_size, c.label ?? CONCAT("#", c.id) AS label, ' +
          "IS_INTEGER(c.side) ? 'whole' : 'part' AS kind FROM c ORDER BY c.cp_area DESC",
      )
      .fetchAll();
    assert.deepEqual(rows, [
      { id: "1", cp_area: 9, cp_size: "big", label: "door", kind: "whole" },
      { id: "2", cp_area: 2.25, cp_size: "small", label: "#2", kind: "part" },
    ]);
    const { resources: documented } = await container.items
      .query(
        'SELECT VALUE [ROUND(-2.5), StringToNumber("3.14"), ARRAY_SLICE([1, 2, 3], -2, 1), ' +
          'DateTimeAdd("mm", 1, "2020-07-09T23:20:13.4575530Z"), REPLICATE("x", 1e15)]',
      )
      .fetchAll();
    assert.deepEqual(documented, [[-3, 3.14, [2], "2020-08-09T23:20:13.4575530Z"]]);
  });
});

describe("documented gaps answer 400 naming the feature", () => {
  test("stored procedures", async () => {
    const container = await newContainer();
    await assert.rejects(
      container.scripts.storedProcedures.create({ id: "sp", body: "function () {}" }),
      (error) => {
        assert.equal(error.code, 400);
        assert.match(error.message, /stored procedures/);
        return true;
      },
    );
  });

  test("the all-versions-and-deletes change feed", async () => {
    const container = await newContainer();
    const iterator = container.items.getChangeFeedIterator({
      changeFeedStartFrom: ChangeFeedStartFrom.Now(),
      changeFeedMode: ChangeFeedMode.AllVersionsAndDeletes,
    });
    await assert.rejects(iterator.readNext(), (error) => {
      assert.equal(error.code, 400);
      assert.match(error.message, /Full-Fidelity/);
      return true;
    });
  });

  test("FullTextScore", async () => {
    const container = await newContainer();
    await container.items.create({ id: "1", pk: "a", text: "hello" });
    await assert.rejects(
      container.items
        .query("SELECT TOP 1 c.id FROM c ORDER BY RANK FullTextScore(c.text, ['hello'])")
        .fetchAll(),
      (error) => {
        assert.equal(error.code, 400);
        assert.match(error.message, /FullTextScore/);
        return true;
      },
    );
  });
});

describe("session consistency (issue 38)", () => {
  test("the session token of a write is sent back on the next read", async () => {
    // The SDK keeps a container's token only when the response names the container by its
    // resource id (x-ms-content-path), and sends tokens only when the client asks for
    // session consistency itself: a request plugin shows what it then sends.
    const sent = [];
    const recording = new CosmosClient({
      endpoint: cosmos.endpoint,
      key: cosmos.key,
      consistencyLevel: "Session",
      plugins: [
        {
          on: "request",
          plugin: async (context, diagnosticNode, next) => {
            sent.push({ path: context.path, token: context.headers["x-ms-session-token"] });
            return next(context, diagnosticNode);
          },
        },
      ],
    });
    try {
      const { id } = await newContainer();
      const container = recording.database(database.id).container(id);
      const { headers } = await container.items.create({ id: "o1", pk: "a", v: 1 });
      const token = headers["x-ms-session-token"];
      assert.match(token, /^0:-1#\d+$/);
      const { resource } = await container.item("o1", "a").read();
      assert.equal(resource.v, 1);
      assert.equal(sent.at(-1).token, token);

      const replaced = await container.item("o1", "a").replace({ id: "o1", pk: "a", v: 2 });
      const next = replaced.headers["x-ms-session-token"];
      assert.equal(Number(next.split("#")[1]), Number(token.split("#")[1]) + 1);
      assert.equal((await container.item("o1", "a").read()).resource.v, 2);
      assert.equal(sent.at(-1).token, next);
    } finally {
      recording.dispose();
    }
  });
});
