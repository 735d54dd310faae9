// @azure/service-bus against our Service Bus emulator: the paths Microsoft's JavaScript samples
// take (receive loop, streaming subscribe, deferral, dead-lettering, max delivery count,
// sessions), messages sent without a MessageId (the broker assigns one, and the SDK's lock
// renewal depends on it), and batch-delete-messages.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { ServiceBusClient } from "@azure/service-bus";
import { types } from "rhea-promise";

import { startServiceBus } from "./emulators.mjs";

const GUID_N = /^[0-9a-f]{32}$/;
const WAIT = { maxWaitTimeInMs: 5000 };
const QUEUES = ["ids", "loop", "stream", "defer", "dlq", "max-delivery", "delete"];

function queue(name, properties = {}) {
  return {
    Name: name,
    Properties: {
      DeadLetteringOnMessageExpiration: false,
      DefaultMessageTimeToLive: "PT1H",
      DuplicateDetectionHistoryTimeWindow: "PT1M",
      LockDuration: "PT30S",
      MaxDeliveryCount: 3,
      RequiresDuplicateDetection: true,
      RequiresSession: false,
      ...properties,
    },
  };
}

let serviceBus;
let client;
let configDir;

before(async () => {
  configDir = mkdtempSync(join(tmpdir(), "sb-js-"));
  const configPath = join(configDir, "config.json");
  const config = {
    UserConfig: {
      Namespaces: [
        {
          Name: "sbemulatorns",
          Queues: [
            ...QUEUES.map((name) => queue(name)),
            queue("sessions", { RequiresSession: true }),
          ],
          Topics: [],
        },
      ],
      Logging: { Type: "Console" },
    },
  };
  writeFileSync(configPath, JSON.stringify(config));
  serviceBus = await startServiceBus({ configPath });
  client = new ServiceBusClient(serviceBus.connectionString);
});

after(async () => {
  await client?.close();
  await serviceBus?.stop();
  if (configDir) rmSync(configDir, { recursive: true, force: true });
});

/** Receive until `count` messages arrived (each receive waits up to 5 s). */
async function receiveAll(receiver, count) {
  const got = [];
  while (got.length < count) {
    const batch = await receiver.receiveMessages(count - got.length, WAIT);
    assert.ok(batch.length > 0, `only ${got.length} of ${count} messages arrived`);
    got.push(...batch);
  }
  return got;
}

test("messages sent without a MessageId get one, and settlement with auto lock renewal works", async () => {
  const sender = client.createSender("ids");
  await sender.sendMessages([{ body: "first" }, { body: "second" }, { body: "third" }]);
  // Auto lock renewal is on by default (5 minutes): settling stops it by MessageId.
  const receiver = client.createReceiver("ids");
  const messages = await receiveAll(receiver, 3);
  const ids = messages.map((m) => m.messageId);
  for (const id of ids) assert.match(String(id), GUID_N);
  assert.equal(new Set(ids).size, 3);
  const byBody = Object.fromEntries(messages.map((m) => [m.body, m]));
  await receiver.completeMessage(byBody.first);
  await receiver.abandonMessage(byBody.second);
  const [again] = await receiver.receiveMessages(1, WAIT);
  assert.equal(again.messageId, byBody.second.messageId); // the id is the message's own
  await receiver.completeMessage(again);
  await receiver.close(); // with "third" still locked: closing stops its renewal too
  await sender.close();
});

test("a receiveMessages loop drains the queue", async () => {
  const sender = client.createSender("loop");
  await sender.sendMessages(Array.from({ length: 10 }, (_, i) => ({ body: `m${i}` })));
  const receiver = client.createReceiver("loop");
  const bodies = [];
  while (bodies.length < 10) {
    const batch = await receiver.receiveMessages(4, WAIT);
    assert.ok(batch.length > 0);
    for (const message of batch) {
      bodies.push(message.body);
      await receiver.completeMessage(message);
    }
  }
  assert.deepEqual(bodies, Array.from({ length: 10 }, (_, i) => `m${i}`));
  assert.equal((await receiver.peekMessages(1)).length, 0);
  await receiver.close();
  await sender.close();
});

test("subscribe streams messages and completes them automatically", async () => {
  const sender = client.createSender("stream");
  await sender.sendMessages(Array.from({ length: 5 }, (_, i) => ({ body: i })));
  const receiver = client.createReceiver("stream");
  const received = [];
  await new Promise((resolve, reject) => {
    receiver.subscribe({
      async processMessage(message) {
        received.push(message.body);
        if (received.length === 5) resolve();
      },
      async processError(args) {
        reject(args.error);
      },
    });
  });
  await receiver.close();
  assert.deepEqual(received, [0, 1, 2, 3, 4]);
  const check = client.createReceiver("stream");
  assert.deepEqual(await check.receiveMessages(1, { maxWaitTimeInMs: 500 }), []);
  await check.close();
  await sender.close();
});

test("a deferred message is received back by its sequence number", async () => {
  const sender = client.createSender("defer");
  await sender.sendMessages({ body: "later" });
  const receiver = client.createReceiver("defer");
  const [message] = await receiver.receiveMessages(1, WAIT);
  await receiver.deferMessage(message);
  const [deferred] = await receiver.receiveDeferredMessages([message.sequenceNumber]);
  assert.equal(deferred.body, "later");
  assert.equal(deferred.messageId, message.messageId);
  await receiver.completeMessage(deferred);
  await assert.rejects(receiver.receiveDeferredMessages([message.sequenceNumber]), {
    code: "MessageNotFound",
  });
  await receiver.close();
  await sender.close();
});

test("a dead-lettered message is received from the dead-letter queue", async () => {
  const sender = client.createSender("dlq");
  await sender.sendMessages({ body: "poison" });
  const receiver = client.createReceiver("dlq");
  const [message] = await receiver.receiveMessages(1, WAIT);
  await receiver.deadLetterMessage(message, {
    deadLetterReason: "Invalid",
    deadLetterErrorDescription: "cannot parse",
  });
  const deadLetters = client.createReceiver("dlq", { subQueueType: "deadLetter" });
  const [dead] = await deadLetters.receiveMessages(1, WAIT);
  assert.equal(dead.body, "poison");
  assert.equal(dead.deadLetterReason, "Invalid");
  assert.equal(dead.deadLetterErrorDescription, "cannot parse");
  await deadLetters.completeMessage(dead);
  await deadLetters.close();
  await receiver.close();
  await sender.close();
});

test("a message abandoned MaxDeliveryCount times is dead-lettered", async () => {
  const sender = client.createSender("max-delivery");
  await sender.sendMessages({ body: "fails" });
  const receiver = client.createReceiver("max-delivery");
  for (let attempt = 1; attempt <= 3; attempt += 1) {
    const [message] = await receiver.receiveMessages(1, WAIT);
    assert.equal(message.deliveryCount, attempt - 1);
    await receiver.abandonMessage(message);
  }
  const deadLetters = client.createReceiver("max-delivery", { subQueueType: "deadLetter" });
  const [dead] = await deadLetters.receiveMessages(1, WAIT);
  assert.equal(dead.deadLetterReason, "MaxDeliveryCountExceeded");
  await deadLetters.completeMessage(dead);
  await deadLetters.close();
  await receiver.close();
  await sender.close();
});

test("sessions: acceptSession, acceptNextSession and session state", async () => {
  const sender = client.createSender("sessions");
  await sender.sendMessages([
    { body: "a1", sessionId: "a" },
    { body: "b1", sessionId: "b" },
    { body: "a2", sessionId: "a" },
  ]);
  const a = await client.acceptSession("sessions", "a");
  const inA = await receiveAll(a, 2);
  assert.deepEqual(
    inA.map((m) => m.body),
    ["a1", "a2"],
  );
  await a.setSessionState("step-2");
  assert.equal(await a.getSessionState(), "step-2");
  for (const message of await a.peekMessages(10)) assert.equal(message.sessionId, "a");
  for (const message of inA) await a.completeMessage(message);
  await a.close(); // releases the session; it keeps its state
  const next = await client.acceptNextSession("sessions", WAIT);
  assert.equal(next.sessionId, "b");
  const [b1] = await next.receiveMessages(1, WAIT);
  assert.match(String(b1.messageId), GUID_N);
  await next.completeMessage(b1);
  await next.close();
  await sender.close();
});

/** batch-delete-messages as the newer SDKs send it (7.9.5 has no deleteMessages yet), over
 * this SDK's own management link and AMQP encoding. */
async function batchDelete(entityPath, count, beforeEnqueueTime = new Date(Date.now() + 60_000)) {
  const management = client._connectionContext.getManagementClient(entityPath);
  const options = await management.initWithUniqueReplyTo({});
  const quiet = { verbose() {}, info() {}, warning() {}, error() {}, logError() {} };
  const response = await management._makeManagementRequest(
    {
      body: { "message-count": types.wrap_int(count), "enqueued-time-utc": beforeEnqueueTime },
      reply_to: management.replyTo,
      application_properties: { operation: "com.microsoft:batch-delete-messages" },
    },
    quiet,
    options,
  );
  return response.application_properties.statusCode === 204 ? 0 : response.body["message-count"];
}

test("batch-delete-messages deletes unlocked messages enqueued before the cutoff", async () => {
  const sender = client.createSender("delete");
  await sender.sendMessages(Array.from({ length: 4 }, (_, i) => ({ body: `d${i}` })));
  const receiver = client.createReceiver("delete");
  const [locked] = await receiver.receiveMessages(1, WAIT);
  assert.equal(await batchDelete("delete", 2, new Date(0)), 0); // nothing that old
  assert.equal(await batchDelete("delete", 2), 2);
  assert.equal(await batchDelete("delete", 4000), 1);
  assert.equal(await batchDelete("delete", 4000), 0);
  await assert.rejects(batchDelete("delete", 4001), /message-count/);
  await receiver.completeMessage(locked); // a locked message is not deleted
  assert.deepEqual(await receiver.peekMessages(10), []);
  await receiver.close();
  await sender.close();
});
