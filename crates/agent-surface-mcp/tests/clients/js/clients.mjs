// The official TypeScript SDK client v1 (@modelcontextprotocol/sdk, 1.32.2 and 1.30.1) against `agent-surface-demo serve --stdio`.
//
// usage: node clients.mjs DEMO_BINARY CASES_JSON
//
// For every case of cases.json: call the tool through `Client.callTool` (which validates
// structuredContent against a tool's outputSchema), parse the result the way any consumer
// would, and check that an error result carries exactly the expected payload in its text block
// and no structuredContent, and that a success carries its output. Prints one line per check
// and closes with "N passed, M failed"; exits non-zero on any failure.

import { readFileSync } from 'node:fs';
import { check, finish } from './checks.mjs';

// AGENT_SURFACE_SDK names the SDK package (default `@modelcontextprotocol/sdk`, 1.32.2; the
// matrix also runs `sdk-1-30`, the 1.30 line installed under that alias).
const sdk = process.env.AGENT_SURFACE_SDK ?? '@modelcontextprotocol/sdk';
const { Client } = await import(`${sdk}/client/index.js`);
const { StdioClientTransport } = await import(`${sdk}/client/stdio.js`);
const { ElicitRequestSchema, ToolListChangedNotificationSchema } = await import(`${sdk}/types.js`);

const [demo, casesPath] = process.argv.slice(2);
if (!demo || !casesPath) {
  console.error('usage: node clients.mjs DEMO_BINARY CASES_JSON');
  process.exit(2);
}
const spec = JSON.parse(readFileSync(casesPath, 'utf8'));

// Deep match with the matchers of cases.json.
function matches(expected, actual) {
  if (expected !== null && typeof expected === 'object' && !Array.isArray(expected)) {
    if ('$any' in expected) {
      if (expected.$any === 'string') return typeof actual === 'string' && actual.length > 0;
      if (expected.$any === 'integer') return Number.isInteger(actual);
      return false;
    }
    if ('$regex' in expected) return typeof actual === 'string' && new RegExp(expected.$regex).test(actual);
    if (actual === null || typeof actual !== 'object' || Array.isArray(actual)) return false;
    const ek = Object.keys(expected).sort();
    const ak = Object.keys(actual).sort();
    if (JSON.stringify(ek) !== JSON.stringify(ak)) return false;
    return ek.every((k) => matches(expected[k], actual[k]));
  }
  if (Array.isArray(expected)) {
    return Array.isArray(actual) && expected.length === actual.length && expected.every((e, i) => matches(e, actual[i]));
  }
  return expected === actual;
}

function substitute(meta, surface) {
  if (!meta) return undefined;
  const out = {};
  for (const [k, v] of Object.entries(meta)) {
    out[k] = v === '$surfaceId' ? surface.id : v === '$firstVersion' ? surface.version : v;
  }
  return out;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function runSession(name, session, cases) {
  const elicitation = session.elicitation;
  const client = new Client(
    { name: 'agent-surface-js-check', version: '0.0.0' },
    { capabilities: elicitation ? { elicitation: {} } : {} },
  );
  const answers = [...(elicitation ?? [])];
  const elicited = [];
  if (elicitation) {
    client.setRequestHandler(ElicitRequestSchema, async (request) => {
      elicited.push(request.params.message);
      return { action: answers.shift() ?? 'decline' };
    });
  }
  let listChanged = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    listChanged += 1;
  });
  const transport = new StdioClientTransport({ command: demo, args: session.args, stderr: 'ignore' });
  await client.connect(transport);

  const listed = await client.listTools();
  const surface = { id: listed._meta?.['agent-surface/surfaceId'], version: listed._meta?.['agent-surface/surfaceVersion'] };
  check(`[${name}] tools/list carries the surface id and version in _meta`, typeof surface.id === 'string' && Number.isInteger(surface.version));
  const tools = Object.fromEntries(listed.tools.map((t) => [t.name, t]));
  check(`[${name}] hidden admin tool is absent`, !('admin-purge_cache' in tools));
  check(`[${name}] orders-get declares an output schema`, !!tools['orders-get']?.outputSchema);
  check(
    `[${name}] annotations follow the effect`,
    tools['orders-cancel']?.annotations?.destructiveHint === true && tools['orders-get']?.annotations?.readOnlyHint === true &&
      tools['refunds-issue']?.annotations?.openWorldHint === true,
  );
  // The trap is armed: the client has an output-schema validator for orders-get.
  check(`[${name}] the client validates orders-get output`, typeof client.getToolOutputValidator?.('orders-get') === 'function');

  for (const c of cases) {
    const label = `[${name}] ${c.tool}: ${c.name}`;
    if (c.sleepBeforeMs) await sleep(c.sleepBeforeMs);
    const params = { name: c.tool, arguments: c.arguments ?? {} };
    const meta = substitute(c.meta, surface);
    if (meta) params._meta = meta;
    if (c.cancelAfterMs) {
      const controller = new AbortController();
      const pending = client.callTool(params, undefined, { signal: controller.signal });
      await sleep(c.cancelAfterMs);
      controller.abort('stop');
      let aborted = false;
      try {
        await pending;
      } catch {
        aborted = true;
      }
      check(`${label} (the cancelled call rejects)`, aborted);
    }
    let result;
    try {
      result = await client.callTool(params);
    } catch (e) {
      check(label, false, `callTool threw: ${e}`);
      continue;
    }
    const text = result.content?.find((b) => b.type === 'text')?.text;
    // Every result names the id its operator event was logged under: one the server made, never
    // the caller's invocation id (agent input); an error's payload names the same one.
    const correlation = result._meta?.['agent-surface/correlationId'];
    const invocationId = meta?.['agent-surface/invocationId'];
    check(
      `${label} → a correlation id in _meta`,
      typeof correlation === 'string' && correlation.startsWith('c-') && correlation !== invocationId,
      JSON.stringify(result._meta),
    );
    if (c.error) {
      let payload;
      try {
        payload = JSON.parse(text);
      } catch {
        payload = undefined;
      }
      check(`${label} → isError`, result.isError === true);
      check(`${label} → no structuredContent on an error`, result.structuredContent === undefined);
      check(`${label} → exactly one text block`, result.content?.length === 1);
      check(`${label} → payload ${c.error.code}`, matches(c.error, payload), JSON.stringify(payload));
      check(`${label} → the payload names the correlation id`, payload?.correlationId === correlation, JSON.stringify(payload));
    } else {
      let fromText;
      try {
        fromText = JSON.parse(text);
      } catch {
        fromText = undefined;
      }
      check(`${label} → success`, result.isError !== true, text);
      check(`${label} → output`, matches(c.ok, result.structuredContent ?? fromText), JSON.stringify(result.structuredContent ?? fromText));
      if (result.structuredContent !== undefined) {
        check(`${label} → text block is the serialized output`, matches(result.structuredContent, fromText));
      }
    }
    if (c.elicited) check(`${label} → the person was asked`, elicited.includes(c.elicited), JSON.stringify(elicited));
  }
  if (name === 'anonymous') {
    check(`[${name}] the cart checkout announced a tool list change`, listChanged >= 1, `${listChanged}`);
  }
  await client.close();
}

try {
  for (const [name, session] of Object.entries(spec.sessions)) {
    await runSession(name, session, spec.cases.filter((c) => c.session === name));
  }
} catch (e) {
  check('session', false, String(e?.stack ?? e));
}
finish();
