// Starts our pure-Python emulators as child processes on free 127.0.0.1 ports, for the
// JavaScript SDK tests. Each test file starts what it needs in `before` and stops it in `after`
// by the child's own process id.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const COSMOS_KEY =
  "C2y6yDjf5/R+ob0N8A7Cgv30VRDJIWEHLM+4QDU5DE2nQ9nDuVTqobD4b8mGGyPMbIZnqyMsEcaGQy67XIw/Jw==";
const READY_TIMEOUT_MS = 30_000;

// The Python that has the emulators: $PYTHON (the pytest wrapper passes its own), else the
// project's venv.
export function python() {
  // Resolved here: the emulators run with the repository as their working directory.
  if (process.env.PYTHON) return resolve(process.env.PYTHON);
  const venv = join(REPO, ".venv", "bin", "python");
  if (existsSync(venv)) return venv;
  throw new Error("no Python with the emulators: set PYTHON or run `make setup`");
}

async function startPython(module, args, readyPattern) {
  const child = spawn(python(), ["-m", module, "--host", "127.0.0.1", "--port", "0", ...args], {
    cwd: REPO,
    env: { ...process.env, PYTHONPATH: join(REPO, "src") },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk) => {
    stderr += chunk;
  });
  const match = await new Promise((resolveReady, reject) => {
    let stdout = "";
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${module} not ready within ${READY_TIMEOUT_MS} ms: ${stderr}`));
    }, READY_TIMEOUT_MS);
    child.stdout.on("data", (chunk) => {
      stdout += chunk;
      const found = stdout.match(readyPattern);
      if (found) {
        clearTimeout(timer);
        resolveReady(found);
      }
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${module} exited with ${code} before it was ready: ${stderr}`));
    });
  });
  child.stdout.resume();
  return { child, match, stderr: () => stderr };
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((done) => child.once("exit", done));
  process.kill(child.pid, "SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}

/** Our Service Bus emulator with `configPath` (official Config.json shape) or its default. */
export async function startServiceBus({ configPath } = {}) {
  const args = configPath ? ["--config", configPath] : [];
  const { child, match } = await startPython(
    "servicebus_emulator",
    args,
    /servicebus-emulator listening on ([\d.]+):(\d+)/,
  );
  const port = Number(match[2]);
  return {
    port,
    connectionString:
      `Endpoint=sb://127.0.0.1:${port};SharedAccessKeyName=RootManageSharedAccessKey;` +
      "SharedAccessKey=SAS_KEY_VALUE;UseDevelopmentEmulator=true;",
    stop: () => stop(child),
  };
}

/** Our Cosmos DB emulator over plain HTTP (the JS SDK talks to it as to the vNext emulator). */
export async function startCosmos(extraArgs = []) {
  const { child, match } = await startPython(
    "cosmos_emulator",
    extraArgs,
    /cosmos-emulator listening on (\S+)/,
  );
  return { endpoint: match[1].replace(/\/$/, ""), key: COSMOS_KEY, stop: () => stop(child) };
}

/**
 * The Cosmos emulator's split and merge switch (`POST /_emulator/ranges`, bearer fault token)
 * for an @azure/cosmos `container`; `change` is `{split: id}` or `{merge: [id, id]}`. Answers
 * the ids of the ranges it made; anything but 200 throws with the emulator's answer.
 */
export async function changeRanges(endpoint, faultToken, container, change) {
  const response = await fetch(`${endpoint}/_emulator/ranges`, {
    method: "POST",
    headers: { Authorization: `Bearer ${faultToken}`, "Content-Type": "application/json" },
    body: JSON.stringify({ database: container.database.id, container: container.id, ...change }),
  });
  const text = await response.text();
  if (response.status !== 200) throw new Error(`range switch: ${response.status} ${text}`);
  return JSON.parse(text).made;
}
