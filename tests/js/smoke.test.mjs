// The harness itself: both emulators start, answer the JavaScript SDKs, and stop.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { CosmosClient } from "@azure/cosmos";
import { ServiceBusClient } from "@azure/service-bus";

import { startCosmos, startServiceBus } from "./emulators.mjs";

let serviceBus;
let cosmos;

before(async () => {
  [serviceBus, cosmos] = await Promise.all([startServiceBus(), startCosmos()]);
});

after(async () => {
  await Promise.all([serviceBus?.stop(), cosmos?.stop()]);
});

test("a message sent with @azure/service-bus is received and completed", async () => {
  const client = new ServiceBusClient(serviceBus.connectionString);
  try {
    const sender = client.createSender("orders");
    await sender.sendMessages({ body: { hello: "js" }, messageId: "js-smoke-1" });
    const receiver = client.createReceiver("orders");
    const [message] = await receiver.receiveMessages(1, { maxWaitTimeInMs: 5000 });
    assert.equal(message?.messageId, "js-smoke-1");
    assert.deepEqual(message.body, { hello: "js" });
    await receiver.completeMessage(message);
    const rest = await receiver.receiveMessages(1, { maxWaitTimeInMs: 500 });
    assert.equal(rest.length, 0);
    await receiver.close();
    await sender.close();
  } finally {
    await client.close();
  }
});

test("a document written with @azure/cosmos is read back, and a second create is a 409", async () => {
  const client = new CosmosClient({ endpoint: cosmos.endpoint, key: cosmos.key });
  const { database } = await client.databases.createIfNotExists({ id: "js-smoke" });
  const { container } = await database.containers.createIfNotExists({
    id: "items",
    partitionKey: { paths: ["/pk"] },
  });
  await container.items.create({ id: "a", pk: "p", n: 1 });
  const { resource } = await container.item("a", "p").read();
  assert.equal(resource.n, 1);
  await assert.rejects(container.items.create({ id: "a", pk: "p", n: 2 }), (error) => {
    assert.equal(error.code, 409);
    return true;
  });
  client.dispose();
});
