// Headless approval at the test authorization server (provider.mjs), for TypeScript
// clients in the tests: follow its redirects from an authorization URL (login and
// consent approve at once), keeping its cookies as a browser would, until one leaves it;
// return that URL (the client's redirect_uri with `code` and `state`), not fetched.
// The same as approve() in tests/oauth_as.py.
export async function approve(authorizationUrl) {
  const origin = new URL(authorizationUrl).origin;
  const cookies = new Map();
  let url = authorizationUrl;
  for (let hop = 0; hop < 10; hop += 1) {
    const cookie = [...cookies].map(([name, value]) => `${name}=${value}`).join('; ');
    const answer = await fetch(url, { redirect: 'manual', headers: cookie ? { cookie } : {} });
    for (const line of answer.headers.getSetCookie()) {
      const [pair] = line.split(';');
      const at = pair.indexOf('=');
      cookies.set(pair.slice(0, at).trim(), pair.slice(at + 1).trim());
    }
    const location = answer.headers.get('location');
    if (!location) throw new Error(`no redirect from ${url}: ${answer.status} ${(await answer.text()).slice(0, 300)}`);
    url = new URL(location, url).href;
    if (new URL(url).origin !== origin) return url;
  }
  throw new Error('too many redirects at the authorization server');
}
