// A dependency-free Node client for `hookstate serve` (docs/protocol.md): length-prefixed JSON
// frames over the store's Unix socket. A plugin keeps one connection and calls verbs on it without
// starting a process per call; with no server it can fall back to spawning `hookstate`.
//
//   import { connect } from "./hookstate.mjs";
//   const hs = await connect({ db: "/home/me/.agent/hookstate/state.redb" });
//   const { exit, stdout } = await hs.run(["--scope", "s", "queue", "claim", "q"]);
//   hs.close();
//
// Does not decide anything: what a verb means is the server's; this only frames and matches.

import fs from "node:fs";
import net from "node:net";
import path from "node:path";

/** The protocol version this client speaks (the hello's `protocol`). */
export const PROTOCOL_VERSION = 1;
/** Bytes of a frame's length header (big-endian u32). */
export const FRAME_HEADER_BYTES = 4;
/** Largest frame this client accepts from a server (the server's own reply bound). */
export const REPLY_BYTES_MAX = 1 << 30;
/** How long `connect` waits for the hello, in ms (the CLI waits as long). */
export const HELLO_WAIT_MS = 200;
/** How long `run` waits for an answer by default, in ms (the CLI's lock wait plus a margin). */
export const ANSWER_WAIT_MS = 12_000;

/** The socket of the store at `db` when `serve` was not given `--socket`. */
export function socketPath(db) {
  return `${path.resolve(db)}.sock`;
}

/** One frame's bytes for a JSON-serialisable object. */
export function encodeFrame(value) {
  const payload = Buffer.from(JSON.stringify(value), "utf8");
  const header = Buffer.alloc(FRAME_HEADER_BYTES);
  header.writeUInt32BE(payload.length, 0);
  return Buffer.concat([header, payload]);
}

/**
 * Splits a byte stream into frames: push chunks in, take decoded objects out. Throws on a frame
 * over `max` bytes or a payload that is not JSON (the connection is then unusable).
 */
export class FrameReader {
  constructor(max = REPLY_BYTES_MAX) {
    this.max = max;
    this.buffer = Buffer.alloc(0);
  }

  push(chunk) {
    this.buffer = this.buffer.length === 0 ? chunk : Buffer.concat([this.buffer, chunk]);
    const frames = [];
    while (this.buffer.length >= FRAME_HEADER_BYTES) {
      const len = this.buffer.readUInt32BE(0);
      if (len > this.max) {
        throw new Error(`a frame of ${len} bytes is over the limit of ${this.max}`);
      }
      if (this.buffer.length < FRAME_HEADER_BYTES + len) {
        break;
      }
      const payload = this.buffer.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + len);
      this.buffer = this.buffer.subarray(FRAME_HEADER_BYTES + len);
      frames.push(JSON.parse(payload.toString("utf8")));
    }
    return frames;
  }
}

/**
 * An `error` frame of the server, as an exception: `code` is the protocol's error code, or
 * `needs_stdin`, the client's own, for a verb that reads stdin called without `stdin` (nothing
 * was run; the connection is closed).
 */
export class ServeError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
    /** Whether the request may have taken effect (retry it under the same --idem-key). */
    this.unknownOutcome = code === "commit_failed";
  }
}

/** A connection to a server that said hello. Requests go one at a time, in order. */
export class Client {
  constructor(socket, hello) {
    this.socket = socket;
    this.hello = hello;
    this.nextId = 1;
    this.waiting = null;
    this.queue = Promise.resolve();
    this.reader = new FrameReader();
    this.closed = null;
    socket.on("data", (chunk) => {
      let frames;
      try {
        frames = this.reader.push(chunk);
      } catch (err) {
        this.fail(err);
        socket.destroy();
        return;
      }
      for (const frame of frames) {
        this.deliver(frame);
      }
    });
    socket.on("error", (err) => this.fail(err));
    socket.on("close", () => this.fail(new Error("the server closed the connection")));
  }

  /** The server's pid. */
  get pid() {
    return this.hello.pid;
  }

  /** The store the server serves. */
  get db() {
    return this.hello.db;
  }

  deliver(frame) {
    const waiting = this.waiting;
    if (waiting === null) {
      return;
    }
    if (frame.need === "stdin" && frame.id === waiting.id) {
      if (typeof waiting.stdin === "string") {
        this.socket.write(encodeFrame({ op: "stdin", id: waiting.id, stdin: waiting.stdin }));
        return;
      }
      // No stdin to give: closing tells the server nothing was run. The connection is gone, so
      // every later request says so, not "the server closed the connection".
      const message = "the verb reads stdin and none was given; this connection is closed";
      this.fail(new ServeError("needs_stdin", message));
      this.socket.destroy();
      return;
    }
    if (frame.id !== waiting.id && frame.id !== null) {
      this.settle(null, new Error(`an answer to request ${frame.id}, not ${waiting.id}`));
      return;
    }
    if (typeof frame.error === "string") {
      this.settle(null, new ServeError(frame.error, frame.message));
    } else {
      this.settle(frame, null);
    }
  }

  settle(value, err) {
    const waiting = this.waiting;
    if (waiting === null) {
      return;
    }
    this.waiting = null;
    clearTimeout(waiting.timer);
    if (err) {
      waiting.reject(err);
    } else {
      waiting.resolve(value);
    }
  }

  fail(err) {
    this.closed ??= err;
    this.settle(null, err);
  }

  request(frame, stdin, timeoutMs) {
    const send = () =>
      new Promise((resolve, reject) => {
        if (this.closed) {
          reject(this.closed);
          return;
        }
        const timer = setTimeout(() => {
          this.socket.destroy();
          this.settle(null, new Error(`no answer within ${timeoutMs} ms`));
        }, timeoutMs);
        this.waiting = { id: frame.id, stdin, resolve, reject, timer };
        this.socket.write(encodeFrame(frame));
      });
    const result = this.queue.then(send, send);
    this.queue = result.catch(() => {});
    return result;
  }

  /**
   * Runs a verb: `argv` are the arguments after the program name. Resolves to
   * `{ exit, stdout, stderr }` exactly as the CLI would print and exit (a refusal is exit 1);
   * rejects with a `ServeError` when the server did not run it (or its outcome is unknown).
   */
  run(argv, { env = {}, cwd = process.cwd(), stdin, idemKey, timeoutMs = ANSWER_WAIT_MS } = {}) {
    const id = this.nextId++;
    const args = idemKey === undefined ? argv : ["--idem-key", idemKey, ...argv];
    const frame = { op: "run", id, argv: args, env, cwd: path.resolve(cwd), pid: process.pid };
    return this.request(frame, stdin, timeoutMs).then(({ exit, stdout, stderr }) => ({
      exit,
      stdout,
      stderr,
    }));
  }

  /** Like `run`, and parses stdout as the one JSON object the verbs print. */
  async call(argv, options) {
    const reply = await this.run(argv, options);
    const text = reply.stdout.trim();
    return { ...reply, result: text === "" ? null : JSON.parse(text) };
  }

  /** The server's counters. */
  stats({ timeoutMs = ANSWER_WAIT_MS } = {}) {
    const id = this.nextId++;
    return this.request({ op: "stats", id }, undefined, timeoutMs).then((frame) => frame.stats);
  }

  /** Closes the connection. */
  close() {
    this.closed ??= new Error("the client closed the connection");
    this.socket.end();
  }
}

/** Mode bits of a directory others may write into (group, other). */
const WRITABLE_BY_OTHERS = 0o022;
/** The sticky bit: in such a directory only a file's owner may remove or rename it. */
const STICKY = 0o1000;

/**
 * Throws unless the socket at `where` can only be a listener of this user's: node cannot read a
 * peer's credentials (the Rust client checks `SO_PEERCRED`), so the socket must be owned by this
 * user, in a directory of this user's or root's that no one else may write into (or a sticky
 * one, where no one else may replace it). A request carries arguments, stdin and environment.
 */
export function checkSocket(where) {
  if (typeof process.getuid !== "function") {
    return;
  }
  const me = process.getuid();
  const file = fs.lstatSync(where);
  if (!file.isSocket()) {
    throw new Error(`${where} is not a socket`);
  }
  if (file.uid !== me) {
    throw new Error(`the socket ${where} belongs to uid ${file.uid}, not ${me}`);
  }
  const parent = path.dirname(path.resolve(where));
  const dir = fs.statSync(parent);
  const othersWrite = (dir.mode & WRITABLE_BY_OTHERS) !== 0 && (dir.mode & STICKY) === 0;
  if ((dir.uid !== me && dir.uid !== 0) || othersWrite) {
    throw new Error(`the socket's directory ${parent} may be written by another user`);
  }
}

/**
 * Connects to the server of the store `db` (or the socket `socket`) and waits for its hello.
 * Rejects when there is no server, the socket may be another user's (`checkSocket`), it does not
 * say hello within `helloWaitMs`, refuses the connection, or speaks another protocol: the caller
 * then runs `hookstate` as a process.
 */
export function connect({ db, socket, helloWaitMs = HELLO_WAIT_MS } = {}) {
  const where = socket ?? socketPath(db);
  return new Promise((resolve, reject) => {
    try {
      checkSocket(where);
    } catch (err) {
      reject(err);
      return;
    }
    const stream = net.createConnection(where);
    const reader = new FrameReader();
    const done = (err) => {
      clearTimeout(timer);
      stream.removeAllListeners("data");
      stream.removeAllListeners("error");
      stream.destroy();
      reject(err);
    };
    const timer = setTimeout(() => done(new Error(`no hello within ${helloWaitMs} ms`)), helloWaitMs);
    stream.on("error", (err) => done(err));
    stream.on("data", (chunk) => {
      let frames;
      try {
        frames = reader.push(chunk);
      } catch (err) {
        done(err);
        return;
      }
      if (frames.length === 0) {
        return;
      }
      const hello = frames[0];
      if (typeof hello.error === "string") {
        done(new ServeError(hello.error, hello.message));
      } else if (hello.hookstate !== "serve" || hello.protocol !== PROTOCOL_VERSION) {
        done(new Error(`not a hookstate server of protocol ${PROTOCOL_VERSION}`));
      } else if (frames.length > 1) {
        done(new Error("the server sent frames before a request"));
      } else {
        clearTimeout(timer);
        stream.removeAllListeners("data");
        stream.removeAllListeners("error");
        resolve(new Client(stream, hello));
      }
    });
  });
}
