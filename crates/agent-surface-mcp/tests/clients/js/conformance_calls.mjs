// The conformance suites' tool calls, made by the TypeScript SDK v1 client against
// `agent-surface-demo serve --stdio --memory --conformance`, with their exact answers asserted
// (conformance-calls.json): the suite's own checks pass against a server that answers anything.
//
// usage: node conformance_calls.mjs DEMO_BINARY CALLS_JSON
// AGENT_SURFACE_SDK names the SDK package to load (default `@modelcontextprotocol/sdk`; the
// matrix also runs `sdk-1-30`, the 1.30 line installed under that alias).

import { readFileSync } from 'node:fs';
import { check, finish } from './checks.mjs';

const sdk = process.env.AGENT_SURFACE_SDK ?? '@modelcontextprotocol/sdk';
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const { version } = JSON.parse(readFileSync(new URL(`./node_modules/${sdk}/package.json`, import.meta.url), 'utf8'));

const [demo, callsPath] = process.argv.slice(2);
if (!demo || !callsPath) {
  console.error('usage: node conformance_calls.mjs DEMO_BINARY CALLS_JSON');
  process.exit(2);
}
const { calls } = JSON.parse(readFileSync(callsPath, 'utf8'));
const deepEqual = (a, b) => JSON.stringify(canonical(a)) === JSON.stringify(canonical(b));
function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v !== null && typeof v === 'object') return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  return v;
}

try {
  const client = new Client({ name: 'agent-surface-conformance-calls', version: '0.0.0' }, { capabilities: {} });
  const transport = new StdioClientTransport({
    command: demo,
    args: ['serve', '--stdio', '--memory', '--conformance'],
    stderr: 'ignore',
  });
  await client.connect(transport);
  await client.listTools();
  for (const c of calls) {
    const label = `[sdk ${version}] ${c.scenario}: ${c.tool}`;
    const progress = [];
    let result;
    try {
      const options = c.progress ? { onprogress: (p) => progress.push(p.progress) } : undefined;
      result = await client.callTool({ name: c.tool, arguments: c.arguments }, undefined, options);
    } catch (e) {
      check(label, false, `callTool threw: ${e}`);
      continue;
    }
    check(`${label} → isError ${c.isError}`, (result.isError === true) === c.isError, JSON.stringify(result));
    const blocks = result.content ?? [];
    check(`${label} → exactly one text block`, blocks.length === 1 && blocks[0].type === 'text', JSON.stringify(blocks));
    let value;
    try {
      value = JSON.parse(blocks[0]?.text);
    } catch {
      value = undefined;
    }
    if (c.isError) {
      check(`${label} → no structuredContent on the error`, result.structuredContent === undefined);
      check(`${label} → code ${c.error.code}, retry ${c.error.retry}`, value?.code === c.error.code && value?.retry === c.error.retry, blocks[0]?.text);
      check(`${label} → the fixture's message`, typeof value?.message === 'string' && value.message.startsWith(c.error.messageStartsWith), value?.message);
    } else {
      check(`${label} → the fixture's output`, deepEqual(value, c.output), blocks[0]?.text);
      if (result.structuredContent !== undefined) {
        check(`${label} → structuredContent is the output`, deepEqual(result.structuredContent, c.output));
      }
    }
    if (c.progress) {
      const increasing = progress.every((p, i) => i === 0 || progress[i - 1] <= p);
      check(`${label} → ${c.progress} increasing progress notifications`, progress.length >= c.progress && increasing, JSON.stringify(progress));
    }
  }
  await client.close();
} catch (e) {
  check('session', false, String(e?.stack ?? e));
}
finish();
