// The same trivial tool as the benchmark's Rust servers, on the official TypeScript SDK server
// (@modelcontextprotocol/sdk), over stdio. Used by `cargo bench -p agent-surface-mcp` as a
// side-by-side when `cargo xtask clients` has installed the SDK into .tools/node.

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { z } from 'zod';

const server = new McpServer({ name: 'bench-echo', version: '0.0.0' });
server.registerTool(
  'bench-echo',
  {
    description: 'Echo the text back.',
    inputSchema: { text: z.string() },
    outputSchema: { text: z.string() },
    annotations: { readOnlyHint: true, idempotentHint: true },
  },
  async ({ text }) => ({ content: [{ type: 'text', text: JSON.stringify({ text }) }], structuredContent: { text } }),
);
await server.connect(new StdioServerTransport());
