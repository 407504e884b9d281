// A stand-in for claude-code-hermit's `bun proposal.ts micro <dir> resolve <id> --action <a>`,
// written for the micro_resolve bench: read the queue file whole, splice the entry out, rewrite
// the file (temp file + rename, no fsync, no lock, as spec §0.2's writeFileAtomic), then append
// the micro-resolved ledger line. Usage: bun micro-resolve.ts <state dir> <MP-id> --action <a>
import fs from 'node:fs';
import path from 'node:path';

const [dir, id, , action] = process.argv.slice(2);
const file = path.join(dir, 'state', 'micro-proposals.json');
const data = JSON.parse(fs.readFileSync(file, 'utf-8'));
const pending: any[] = Array.isArray(data.pending) ? data.pending : [];
const index = pending.findIndex((entry) => entry.id === id);
if (index === -1) {
  console.log('NONE|no-match');
  process.exit(0);
}
const [entry] = pending.splice(index, 1);
const temp = `${file}.${process.pid}.tmp`;
fs.writeFileSync(temp, JSON.stringify(data, null, 2) + '\n');
fs.renameSync(temp, file);
const ts = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
const line = { ts, type: 'micro-resolved', micro_id: id, action, question: entry.question };
fs.appendFileSync(path.join(dir, 'state', 'proposal-metrics.jsonl'), JSON.stringify(line) + '\n');
console.log(`RESOLVED|${id}|${action}`);
