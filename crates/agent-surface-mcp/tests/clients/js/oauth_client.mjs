// The official TypeScript SDK client (@modelcontextprotocol/sdk) against
// `agent-surface-demo serve --http … --oauth-jwks …`: the MCP endpoint as an OAuth 2.1 resource
// server.
//
// usage: node oauth_client.mjs DEMO_BINARY JWKS_JSON ED25519_PRIVATE_PEM
//
// Without a token the client gets the 401 and its `WWW-Authenticate: Bearer resource_metadata=…`;
// with an auth provider it follows the challenge: fetches the protected resource metadata, finds the
// authorization server there, and starts its sign-in flow (the redirect names our resource, RFC 8707)
// — no authorization server exists, so the flow stops at the redirect and `connect` throws
// `UnauthorizedError`. Tokens minted here with the test key: a valid one lists and calls tools;
// one for another audience is a 401 `invalid_token`, one without the scope a 403
// `insufficient_scope`. Nothing leaves the machine: requests to any host but the demo's are
// answered 404 by the fetch wrapper. Prints one line per check and closes with "N passed, M failed".

import { spawn } from 'node:child_process';
import { createPrivateKey, sign } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { check, finish } from './checks.mjs';

const [demo, jwksPath, pemPath] = process.argv.slice(2);
if (!demo || !jwksPath || !pemPath) {
  console.error('usage: node oauth_client.mjs DEMO_BINARY JWKS_JSON ED25519_PRIVATE_PEM');
  process.exit(2);
}
const ISSUER = 'https://id.example';

// The demo, with the resource server on; its URL from the first line it prints.
const server = spawn(demo, ['serve', '--http', '127.0.0.1:0', '--memory', '--oauth-jwks', jwksPath, '--oauth-issuer', ISSUER, '--oauth-scope', 'shop'], {
  stdio: ['ignore', 'pipe', 'ignore'],
});
const url = await new Promise((resolve, reject) => {
  const lines = createInterface({ input: server.stdout });
  lines.once('line', (line) => resolve(line.replace(/^listening on /, '').trim()));
  server.once('exit', (code) => reject(new Error(`the demo exited (${code})`)));
});
const origin = new URL(url).origin;

// Every request the client makes, and its answer; other hosts never reached.
const seen = [];
const recordingFetch = async (input, init) => {
  const target = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
  if (target.origin !== origin) {
    seen.push({ url: target.href, status: 404, offline: true });
    return new Response('not here', { status: 404 });
  }
  const response = await fetch(input, init);
  seen.push({ url: target.href, status: response.status, challenge: response.headers.get('www-authenticate') });
  return response;
};

// A JWT signed with the test Ed25519 key (kid ed-1 in the JWKS).
const key = createPrivateKey(readFileSync(pemPath));
const b64 = (value) => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url');
function mint(overrides = {}) {
  const now = Math.floor(Date.now() / 1000);
  const claims = { iss: ISSUER, aud: origin, sub: 'alice', iat: now, exp: now + 300, scope: 'shop', ...overrides };
  const signingInput = `${b64({ alg: 'EdDSA', typ: 'JWT', kid: 'ed-1' })}.${b64(claims)}`;
  return `${signingInput}.${sign(null, Buffer.from(signingInput), key).toString('base64url')}`;
}

async function connect(options) {
  const client = new Client({ name: 'agent-surface-oauth-check', version: '0.0.0' });
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: recordingFetch, ...options });
  await client.connect(transport);
  return client;
}

async function refused(name, options) {
  seen.length = 0;
  try {
    const client = await connect(options);
    await client.close();
    return { error: undefined, seen: [...seen] };
  } catch (error) {
    return { error, seen: [...seen] };
  }
}

try {
  // 1. No token, no auth provider: the 401 and its challenge reach the client.
  const metadataUrl = `${origin}/.well-known/oauth-protected-resource`;
  let { error, seen: requests } = await refused('no token');
  check('no token: connect fails with the HTTP status 401', error instanceof StreamableHTTPError && error.code === 401, String(error));
  const first = requests.find((r) => r.status === 401);
  check(
    'no token: WWW-Authenticate is Bearer with resource_metadata',
    first?.challenge === `Bearer resource_metadata="${metadataUrl}"`,
    JSON.stringify(first),
  );

  // 2. An auth provider: the client follows the challenge to the metadata and the authorization server.
  let redirectedTo;
  const provider = {
    get redirectUrl() { return 'http://127.0.0.1:1/callback'; },
    get clientMetadata() { return { redirect_uris: ['http://127.0.0.1:1/callback'], client_name: 'agent-surface-oauth-check' }; },
    clientInformation: () => ({ client_id: 'agent-surface-check' }),
    tokens: () => undefined,
    saveTokens: () => {},
    redirectToAuthorization: (authorizationUrl) => { redirectedTo = authorizationUrl; },
    saveCodeVerifier: () => {},
    codeVerifier: () => 'verifier',
  };
  ({ error, seen: requests } = await refused('auth provider', { authProvider: provider }));
  check('auth provider: connect throws UnauthorizedError after the 401', error instanceof UnauthorizedError, String(error?.stack ?? error));
  const metadata = requests.find((r) => r.url === metadataUrl);
  check('auth provider: the client fetched the resource metadata named in the challenge', metadata?.status === 200, JSON.stringify(requests));
  check(
    'auth provider: the client went to the authorization server the metadata names',
    requests.some((r) => r.offline && r.url.startsWith(ISSUER)),
    JSON.stringify(requests),
  );
  check(
    'auth provider: the sign-in redirect names this resource (RFC 8707) and the scope',
    redirectedTo?.href?.startsWith(ISSUER) &&
      // The resource is the server's root; either spelling of it (the server accepts both in `aud`).
      [origin, `${origin}/`].includes(new URL(redirectedTo).searchParams.get('resource')) &&
      new URL(redirectedTo).searchParams.get('scope') === 'shop',
    String(redirectedTo),
  );

  // 3. A valid token: tools are listed and called.
  const bearer = (token) => ({ requestInit: { headers: { Authorization: `Bearer ${token}` } } });
  try {
    const client = await connect(bearer(mint()));
    const { tools } = await client.listTools();
    check('valid token: tools/list answers', tools.length > 0, `${tools.length} tools`);
    await client.close();
  } catch (e) {
    check('valid token: tools/list answers', false, String(e));
  }

  // 4. Another audience: 401 invalid_token.
  ({ error, seen: requests } = await refused('wrong audience', bearer(mint({ aud: 'http://127.0.0.1:1/' }))));
  const invalid = requests.find((r) => r.status === 401);
  check('wrong audience: 401', error instanceof StreamableHTTPError && error.code === 401, String(error));
  check(
    'wrong audience: WWW-Authenticate has error="invalid_token" and resource_metadata',
    invalid?.challenge?.startsWith('Bearer error="invalid_token"') && invalid.challenge.includes(`resource_metadata="${metadataUrl}"`),
    JSON.stringify(invalid),
  );

  // 5. No scope: 403 insufficient_scope naming the scope.
  ({ error, seen: requests } = await refused('no scope', bearer(mint({ scope: 'other' }))));
  const forbidden = requests.find((r) => r.status === 403);
  check('missing scope: 403', error instanceof StreamableHTTPError && error.code === 403, String(error));
  check(
    'missing scope: WWW-Authenticate has error="insufficient_scope", scope="shop"',
    forbidden?.challenge === `Bearer error="insufficient_scope", scope="shop", resource_metadata="${metadataUrl}"`,
    JSON.stringify(forbidden),
  );

  // 6. The plain HTTP binding under the same resource server.
  const api = await fetch(`${origin}/api/capabilities`, { headers: { Authorization: `Bearer ${mint()}` } });
  check('HTTP binding: a valid token reads the capabilities', api.status === 200, String(api.status));
  const anonymous = await fetch(`${origin}/api/capabilities`);
  check(
    'HTTP binding: no token is 401 with the same challenge',
    anonymous.status === 401 && anonymous.headers.get('www-authenticate') === `Bearer resource_metadata="${metadataUrl}"`,
    `${anonymous.status} ${anonymous.headers.get('www-authenticate')}`,
  );
} finally {
  server.kill();
}
finish();
