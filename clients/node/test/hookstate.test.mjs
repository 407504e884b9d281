// Tests of the Node client, run by node's built-in test runner (`node --test clients/node/test/`,
// from scripts/test.sh). The framing tests need nothing; the server tests start a real
// `hookstate serve` (the binary in HOOKSTATE_BIN, else the workspace's debug build) on a store in
// a temporary directory and stop it with SIGTERM.

import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

import { checkSocket, connect, encodeFrame, FrameReader, ServeError, socketPath } from "../hookstate.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const bin = process.env.HOOKSTATE_BIN || path.join(here, "..", "..", "..", "target", "debug", "hookstate");
/** How long the server may take to say it listens. */
const START_WAIT_MS = 20_000;

test("a frame is a big-endian length and JSON", () => {
  const frame = encodeFrame({ op: "stats", id: 1 });
  assert.equal(frame.readUInt32BE(0), frame.length - 4);
  assert.deepEqual(JSON.parse(frame.subarray(4).toString()), { op: "stats", id: 1 });
});

test("the reader reassembles frames split anywhere and keeps the rest", () => {
  const bytes = Buffer.concat([encodeFrame({ a: 1 }), encodeFrame({ b: "é" }), encodeFrame({ c: 3 })]);
  for (let cut = 0; cut <= bytes.length; cut++) {
    const reader = new FrameReader();
    const frames = [...reader.push(bytes.subarray(0, cut)), ...reader.push(bytes.subarray(cut))];
    assert.deepEqual(frames, [{ a: 1 }, { b: "é" }, { c: 3 }], `cut at ${cut}`);
  }
});

test("the reader refuses a frame over its bound", () => {
  const reader = new FrameReader(8);
  assert.throws(() => reader.push(encodeFrame({ long: "0123456789" })), /over the limit/);
});

let dir;
let db;
let server;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "hookstate-node-"));
  db = path.join(dir, "store", "state.redb");
  const init = spawnSync(bin, ["--db", db, "init"], { encoding: "utf8" });
  assert.equal(init.status, 0, `${bin} init: ${init.stderr}`);
  // A server a crashed test run leaves behind stops by itself after a minute without a request.
  server = spawn(bin, ["--db", db, "serve", "--idle-exit-s", "60"], { stdio: ["ignore", "pipe", "inherit"] });
  const lines = readline.createInterface({ input: server.stdout });
  const first = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the server did not start")), START_WAIT_MS);
    lines.once("line", (line) => {
      clearTimeout(timer);
      resolve(JSON.parse(line));
    });
    server.once("exit", (code) => reject(new Error(`the server exited ${code}`)));
  });
  assert.equal(first.socket, socketPath(db));
});

after(async () => {
  if (server && server.exitCode === null) {
    const exited = new Promise((resolve) => server.once("exit", (code, signal) => resolve({ code, signal })));
    server.kill("SIGTERM");
    const { code } = await exited;
    assert.equal(code, 0, "the server exits 0 on SIGTERM");
  }
  fs.rmSync(dir, { recursive: true, force: true });
});

test("the hello names the server and its store", async () => {
  const hs = await connect({ db });
  assert.equal(hs.pid, server.pid);
  assert.equal(hs.db, db);
  hs.close();
});

test("a claim, a refusal and an ack answer as the CLI does", async () => {
  const hs = await connect({ db });
  const pushed = await hs.call(["queue", "push", "jobs", "j1", '{"n":1}']);
  assert.equal(pushed.exit, 0, pushed.stderr);
  const claimed = await hs.call(["queue", "claim", "jobs", "--holder", "node"]);
  assert.equal(claimed.result.claimed, true);
  assert.equal(claimed.result.item, "j1");
  const token = claimed.result.token;
  const stale = await hs.call(["queue", "ack", "jobs", "j1", "--token", String(token + 1)]);
  assert.equal(stale.exit, 1, "a stale token is a refusal");
  assert.equal(stale.result.ok, false);
  const acked = await hs.call(["queue", "ack", "jobs", "j1", "--token", String(token)]);
  assert.equal(acked.exit, 0, acked.stderr);
  // What a process prints for the same read.
  const viaCli = spawnSync(bin, ["--db", db, "queue", "claim", "jobs"], {
    encoding: "utf8",
    env: { ...process.env, HOOKSTATE_SERVE: "0" },
  });
  const viaServer = await hs.run(["queue", "claim", "jobs"]);
  assert.deepEqual(viaServer, { exit: viaCli.status, stdout: viaCli.stdout, stderr: viaCli.stderr });
  hs.close();
});

test("an idempotency key replays the first answer", async () => {
  const hs = await connect({ db });
  const first = await hs.call(["counter", "add", "hits", "5"], { idemKey: "node-k1" });
  const again = await hs.call(["counter", "add", "hits", "5"], { idemKey: "node-k1" });
  assert.equal(first.exit, 0, first.stderr);
  assert.equal(again.result.value, first.result.value);
  assert.equal(again.result.replayed, true);
  const read = await hs.call(["counter", "get", "hits"]);
  assert.equal(read.result.value, 5);
  hs.close();
});

test("stdin is sent when the verb asks for it", async () => {
  const hs = await connect({ db });
  const put = await hs.call(["kv", "put", "payload", "--stdin"], { stdin: '{"from":"stdin"}' });
  assert.equal(put.exit, 0, put.stderr);
  const got = await hs.call(["kv", "get", "payload"]);
  assert.deepEqual(got.result.value, { from: "stdin" });
  // Without stdin to give, the client closes and nothing is written; a later request on the
  // closed connection says why, not that the server closed it.
  await assert.rejects(hs.run(["kv", "put", "other", "--stdin"]), (err) => {
    assert.ok(err instanceof ServeError, String(err));
    assert.equal(err.code, "needs_stdin");
    return true;
  });
  await assert.rejects(hs.run(["kv", "get", "other"]), /needs_stdin/);
  const after = await connect({ db });
  assert.equal((await after.call(["kv", "get", "other"])).result.found, false);
  after.close();
});

test("usage errors and refusals are replies, protocol errors are ServeErrors", async () => {
  const hs = await connect({ db });
  const usage = await hs.run(["queue", "claim"]);
  assert.equal(usage.exit, 64);
  assert.match(usage.stderr, /^hookstate: usage: /);
  await assert.rejects(hs.run(["verify"]), (err) => err instanceof ServeError && err.code === "not_served");
  await assert.rejects(hs.run(["--db", path.join(dir, "other.redb"), "kv", "get", "k"]), /not_served/);
  // The connection still serves after both.
  const stats = await hs.stats();
  assert.ok(stats.requests >= 1);
  assert.ok(stats.commits >= 1);
  hs.close();
});

test("a malformed frame gets bad_request and the server keeps serving", async () => {
  const raw = net.createConnection(socketPath(db));
  const reader = new FrameReader();
  const frames = [];
  const got = (n) =>
    new Promise((resolve) => {
      const check = () => (frames.length >= n ? resolve() : raw.once("data", onData));
      const onData = (chunk) => {
        frames.push(...reader.push(chunk));
        check();
      };
      check();
    });
  await got(1);
  const header = Buffer.alloc(4);
  const junk = Buffer.from("{not json");
  header.writeUInt32BE(junk.length);
  raw.write(Buffer.concat([header, junk]));
  await got(2);
  assert.equal(frames[1].error, "bad_request");
  raw.write(encodeFrame({ op: "stats", id: 9 }));
  await got(3);
  assert.equal(frames[2].id, 9);
  raw.destroy();
  const hs = await connect({ db });
  assert.equal((await hs.run(["kv", "get", "nothing"])).exit, 0);
  hs.close();
});

test("connect fails fast without a server", async () => {
  await assert.rejects(connect({ db: path.join(dir, "none.redb") }), /ENOENT|ECONNREFUSED/);
});

/** Why `connect` refused the socket; a connection it made instead is closed and named. */
async function refusal(socket) {
  return connect({ socket }).then(
    (hs) => {
      hs.close();
      return "connected";
    },
    (err) => err.message,
  );
}

test("a socket another user could have put there is not connected to", async (t) => {
  const open = fs.mkdtempSync(path.join(os.tmpdir(), "hookstate-node-open-"));
  const where = path.join(open, "fake.sock");
  const listener = net.createServer((conn) => {
    conn.write(encodeFrame({ hookstate: "serve", protocol: 1, pid: 1, db: "/x" }));
  });
  await new Promise((resolve) => listener.listen(where, resolve));
  try {
    fs.chmodSync(open, 0o700);
    const hs = await connect({ socket: where });
    hs.close();
    // A directory others may write into: the socket may be anyone's.
    fs.chmodSync(open, 0o777);
    assert.match(await refusal(where), /may be written by another user/);
    fs.chmodSync(open, 0o1777);
    assert.doesNotThrow(() => checkSocket(where), "a sticky directory keeps the owner's socket");
    fs.chmodSync(open, 0o700);
    assert.throws(() => checkSocket(open), /is not a socket/);
    if (process.getuid() !== 0) {
      t.diagnostic("not root: the socket cannot be given to another uid here");
      return;
    }
    fs.chownSync(where, 65534, 65534);
    assert.match(await refusal(where), /belongs to uid 65534/);
  } finally {
    await new Promise((resolve) => listener.close(resolve));
    fs.rmSync(open, { recursive: true, force: true });
  }
});
