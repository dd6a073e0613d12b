// A real OAuth 2.1 / OpenID authorization server for the tests: npm `oidc-provider`
// (certified), configured the way the MCP authorization spec expects of one
// (basic/authorization.mdx, 2025-06-18 onward): PKCE S256, dynamic client registration
// (RFC 7591), resource indicators (RFC 8707) giving JWT access tokens whose `aud` is the
// requested resource, client credentials, refresh tokens, revocation and introspection.
//
// Login and consent are approved at once, for the account named by `login_hint` (or
// "alice"), granting what the request asked for: a headless client gets its code by
// following redirects from the authorization URL, keeping cookies as a browser would.
//
// Settings (environment): OIDC_PROVIDER_ENTRY (the package's entry file), PORT (0: any), ACCESS_TTL seconds (default 300),
// SCOPES (space-separated resource scopes, default "mcp:read mcp:tools mcp:admin"),
// CONFIDENTIAL_SECRET (the confidential client's secret, required), REDIRECT_URI (the
// static clients' redirect URI). Once listening it prints one JSON line to stdout:
// {"issuer": "http://127.0.0.1:PORT"}. Run with the Node 22 of .tools (tests/oauth_as.py).
import { createServer } from 'node:http';
import { generateKeyPairSync } from 'node:crypto';
import { pathToFileURL } from 'node:url';

// oidc-provider is installed in .tools/oidc (scripts/install-oidc-provider.sh); ESM
// resolves imports from this file's folder, so its entry comes from OIDC_PROVIDER_ENTRY.
const { default: Provider } = await import(pathToFileURL(process.env.OIDC_PROVIDER_ENTRY).href);

const accessTtl = Number(process.env.ACCESS_TTL || 300);
const scopes = (process.env.SCOPES || 'mcp:read mcp:tools mcp:admin').split(' ').filter(Boolean);
const secret = process.env.CONFIDENTIAL_SECRET;
const redirectUri = process.env.REDIRECT_URI || 'http://127.0.0.1:1/callback';
if (!secret) throw new Error('CONFIDENTIAL_SECRET is required');

const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
const jwk = { ...privateKey.export({ format: 'jwk' }), kid: 'test-as-1', use: 'sig', alg: 'RS256' };

const server = createServer();
await new Promise((resolve) => server.listen(Number(process.env.PORT || 0), '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'confidential-client',
      client_secret: secret,
      grant_types: ['client_credentials', 'authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: 'client_secret_basic',
    },
    {
      client_id: 'public-client',
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      redirect_uris: [redirectUri],
      token_endpoint_auth_method: 'none',
    },
  ],
  jwks: { keys: [jwk] },
  scopes: ['openid', 'offline_access', ...scopes],
  pkce: { required: () => true },
  ttl: {
    AccessToken: accessTtl,
    ClientCredentials: accessTtl,
    AuthorizationCode: 60,
    Interaction: 300,
    Grant: 3600,
    Session: 3600,
    RefreshToken: 86400,
  },
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true },
    clientCredentials: { enabled: true },
    revocation: { enabled: true },
    introspection: { enabled: true },
    resourceIndicators: {
      enabled: true,
      defaultResource: async (_ctx, _client, oneOf) => oneOf,
      useGrantedResource: async () => true,
      getResourceServerInfo: async (_ctx, resource) => ({
        scope: scopes.join(' '),
        audience: resource,
        accessTokenTTL: accessTtl,
        accessTokenFormat: 'jwt',
        jwt: { sign: { alg: 'RS256' } },
      }),
    },
  },
  // Refresh tokens for every client allowed the grant (MCP clients seldom ask for
  // offline_access).
  issueRefreshToken: async (_ctx, client) => client.grantTypeAllowed('refresh_token'),
  findAccount: async (_ctx, sub) => ({ accountId: sub, claims: async () => ({ sub }) }),
  conformIdTokenClaims: false,
});
provider.proxy = false;

// Login (for login_hint, or "alice") and consent (to what was asked) approved at once.
server.on('request', async (req, res) => {
  const match = /^\/interaction\/([^/?]+)/.exec(req.url);
  if (!match) return provider.callback()(req, res);
  try {
    const details = await provider.interactionDetails(req, res);
    if (details.prompt.name === 'login') {
      const account = details.params.login_hint || 'alice';
      await provider.interactionFinished(req, res, { login: { accountId: account } }, { mergeWithLastSubmission: false });
      return;
    }
    // Consent: grant what is missing, as asked.
    const grant = details.grantId
      ? await provider.Grant.find(details.grantId)
      : new provider.Grant({ accountId: details.session.accountId, clientId: details.params.client_id });
    const missing = details.prompt.details;
    if (missing.missingOIDCScope) grant.addOIDCScope(missing.missingOIDCScope.join(' '));
    if (missing.missingOIDCClaims) grant.addOIDCClaims(missing.missingOIDCClaims);
    for (const [resource, wanted] of Object.entries(missing.missingResourceScopes || {})) {
      grant.addResourceScope(resource, wanted.join(' '));
    }
    const grantId = await grant.save();
    await provider.interactionFinished(req, res, { consent: { grantId } }, { mergeWithLastSubmission: true });
  } catch (error) {
    res.statusCode = 400;
    res.setHeader('Content-Type', 'text/plain');
    res.end(`interaction failed: ${error.message}`);
  }
});

process.stdout.write(JSON.stringify({ issuer }) + '\n');
for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => server.close(() => process.exit(0)));
