// The official TypeScript SDK v2 client (@modelcontextprotocol/client, modern era) against
// `agent-surface-demo serve --stdio --conformance`.
//
// usage: node modern_clients.mjs DEMO_BINARY
//
// The v2 client connects the legacy way unless asked: it is built with
// `versionNegotiation: { mode: 'auto' }`, which probes `server/discover` and must settle on MCP
// 2026-07-28. A call that needs the person's approval then answers `input_required`; the client
// fulfils it through its `elicitation/create` handler and retries the call with the answer.
// Checks: the negotiated version, approval accepted (the call runs), approval declined
// (CONFIRMATION_INVALID {reason: denied}, nothing runs), and progress notifications (onprogress)
// before the result. Prints one line per check and closes with "N passed, M failed"; exits
// non-zero on any failure.
//
// A long-running call as a task (the `io.modelcontextprotocol/tasks` extension, SEP-2663) is not
// checked through this client: @modelcontextprotocol/client 2.4.0 has no tasks runtime. Its task
// types are the 2025-11-25 vocabulary (`tasks/get` etc. are excluded from the typed request
// surface), and although `capabilities.extensions` can declare the extension (and `request()`
// with an explicit result schema may send `tasks/get` / `tasks/cancel` on the 2026 era), the
// 2026-07-28 result decoder rejects `resultType: "task"` on `tools/call` with
// UNSUPPORTED_RESULT_TYPE, so the CreateTaskResult never reaches the caller. The script checks
// what that means for this client instead: not declaring the extension (its default), a
// long-running capability answers it synchronously; and it notes what a client that declares the
// extension gets, so a later SDK that supports tasks shows up here. The task flow itself is
// checked by python/modern_client.py.

import { Client } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { check, finish, note } from './checks.mjs';

const MODERN = '2026-07-28';
const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
const ARGS = ['serve', '--stdio', '--memory', '--conformance'];
const CALL_TIMEOUT_MS = 30_000;
const WATCHDOG_MS = 180_000;

const [demo] = process.argv.slice(2);
if (!demo) {
  console.error('usage: node modern_clients.mjs DEMO_BINARY');
  process.exit(2);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const approvalMessage = (orderId) =>
  `The assistant asks for your approval: Cancel order ${orderId} and refund the customer in full. Approve this action?`;

function payloadOf(result) {
  const text = result?.content?.find((b) => b.type === 'text')?.text;
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const watchdog = setTimeout(() => {
  check('watchdog', false, `still running after ${WATCHDOG_MS / 1000}s`);
  finish();
}, WATCHDOG_MS);

const label = '[typescript sdk v2]';
const answers = ['accept', 'decline'];
const asked = [];
const client = new Client(
  { name: 'agent-surface-js-modern-check', version: '0.0.0' },
  { capabilities: { elicitation: {} }, versionNegotiation: { mode: 'auto' } },
);
client.setRequestHandler('elicitation/create', async (request) => {
  asked.push(request.params);
  return { action: answers.shift() ?? 'cancel' };
});
const transport = new StdioClientTransport({ command: demo, args: ARGS, stderr: 'ignore' });

try {
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  const version = client.getNegotiatedProtocolVersion();
  note(`${label} negotiated protocol version ${version} (era ${client.getProtocolEra()})`);
  check(`${label} negotiates ${MODERN}`, version === MODERN, String(version));
  check(`${label} the era is modern (server/discover)`, client.getProtocolEra() === 'modern' && client.getDiscoverResult() !== undefined, String(client.getProtocolEra()));

  const get = async (orderId) => (await client.callTool({ name: 'orders-get', arguments: { orderId } }, { timeout: CALL_TIMEOUT_MS })).structuredContent?.status;

  // (a) accept
  let result = await client.callTool({ name: 'orders-cancel', arguments: { orderId: 'A-1001' } }, { timeout: CALL_TIMEOUT_MS });
  check(`${label} orders-cancel A-1001, approved → success`, result.isError !== true, JSON.stringify(result));
  check(
    `${label} orders-cancel A-1001, approved → the order is cancelled and refunded`,
    JSON.stringify(result.structuredContent) === JSON.stringify({ orderId: 'A-1001', refundedCents: 4200 }),
    JSON.stringify(result),
  );
  check(
    `${label}   the elicitation handler was called once, with the approval message`,
    asked.length === 1 && asked[0].message === approvalMessage('A-1001'),
    JSON.stringify(asked),
  );
  check(
    `${label}   as a form without fields`,
    asked.length === 1 && (asked[0].mode ?? 'form') === 'form' && JSON.stringify(asked[0].requestedSchema?.properties) === '{}',
    JSON.stringify(asked),
  );

  // (b) decline
  asked.length = 0;
  result = await client.callTool({ name: 'orders-cancel', arguments: { orderId: 'A-1003' } }, { timeout: CALL_TIMEOUT_MS });
  const p = payloadOf(result);
  check(`${label} orders-cancel A-1003, declined → isError`, result.isError === true, JSON.stringify(result));
  check(
    `${label} orders-cancel A-1003, declined → CONFIRMATION_INVALID {reason: denied}, retry no, notProcessed`,
    p?.code === 'CONFIRMATION_INVALID' &&
      p?.retry === 'no' &&
      p?.notProcessed === true &&
      JSON.stringify(p?.details) === JSON.stringify({ reason: 'denied' }),
    JSON.stringify(result),
  );
  check(`${label}   the person was asked once`, asked.length === 1 && asked[0].message === approvalMessage('A-1003'), JSON.stringify(asked));
  check(`${label}   nothing ran: A-1003 is still placed`, (await get('A-1003')) === 'placed');

  // (c) progress
  const events = [];
  result = await client.callTool(
    { name: 'test_tool_with_progress', arguments: {} },
    { timeout: CALL_TIMEOUT_MS, onprogress: (prog) => events.push(['progress', prog.progress, prog.total]) },
  );
  events.push(['result']);
  await sleep(300); // a report arriving late would land after the marker
  const reports = events.filter((e) => e[0] === 'progress');
  check(`${label} test_tool_with_progress → success`, result.isError !== true, JSON.stringify(result));
  check(`${label} test_tool_with_progress → 3 progress reports`, reports.length === 3, JSON.stringify(events));
  check(
    `${label} test_tool_with_progress → progress increases (0, 50, 100 of 100)`,
    JSON.stringify(reports.map((r) => r[1])) === '[0,50,100]' && reports.every((r) => r[2] === 100),
    JSON.stringify(reports),
  );
  check(
    `${label} test_tool_with_progress → every report arrives before the result`,
    events.at(-1)?.[0] === 'result' && events.length === reports.length + 1,
    JSON.stringify(events),
  );

  // (d) the tasks extension not declared (the client's default): a long-running capability
  // answers synchronously, with the ordinary result.
  check(
    `${label} the server advertises ${TASKS_EXTENSION}`,
    client.getServerCapabilities()?.extensions?.[TASKS_EXTENSION] !== undefined,
    JSON.stringify(client.getServerCapabilities()),
  );
  result = await client.callTool({ name: 'slow_compute', arguments: { seconds: 0, label: 'z' } }, { timeout: CALL_TIMEOUT_MS });
  check(
    `${label} slow_compute {seconds: 0}, no tasks extension declared → the ordinary result, no task`,
    result.isError !== true && result.content?.find((b) => b.type === 'text')?.text === '"Computed z"' && result.taskId === undefined,
    JSON.stringify(result),
  );
} catch (e) {
  check(`${label} session`, false, String(e?.stack ?? e));
} finally {
  try {
    await client.close();
  } catch (e) {
    check(`${label} close`, false, String(e));
  }
}

// What a v2 client that declares the tasks extension gets from a long-running call (a note, not
// a check: see the header).
const tasksClient = new Client(
  { name: 'agent-surface-js-modern-check', version: '0.0.0' },
  { capabilities: { extensions: { [TASKS_EXTENSION]: {} } }, versionNegotiation: { mode: 'auto' } },
);
try {
  await tasksClient.connect(new StdioClientTransport({ command: demo, args: ARGS, stderr: 'ignore' }), { timeout: CALL_TIMEOUT_MS });
  const r = await tasksClient.callTool({ name: 'slow_compute', arguments: { seconds: 0, label: 't' } }, { timeout: CALL_TIMEOUT_MS });
  note(`${label} with ${TASKS_EXTENSION} declared, callTool(slow_compute) returned ${JSON.stringify(r)}: the SDK may now support tasks; add the task checks`);
} catch (e) {
  note(`${label} with ${TASKS_EXTENSION} declared, callTool(slow_compute) fails: ${e?.code ?? ''} ${e?.message ?? e} (no tasks support in this SDK; task checks skipped)`);
} finally {
  await tasksClient.close().catch(() => {});
}

clearTimeout(watchdog);
finish();
