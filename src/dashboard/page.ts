/** What the dashboard sends a browser: the page shell, its two assets, and the headers on every reply. */
import { readFileSync } from 'node:fs'
import type { ServerResponse } from 'node:http'

// No inline script or style, no other origin, no framing; the login form posts the token nowhere else.
const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
  "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

export function secure(res: ServerResponse): void {
  res.setHeader('Content-Security-Policy', CSP)
  res.setHeader('X-Content-Type-Options', 'nosniff')
  res.setHeader('X-Frame-Options', 'DENY')
  // Not no-referrer: a form's POST would then send `Origin: null`, and the Origin check needs the real one.
  res.setHeader('Referrer-Policy', 'same-origin')
  res.setHeader('Cache-Control', 'no-store')
}

export function send(res: ServerResponse, status: number, type: string, body: string | Buffer): void {
  res.statusCode = status
  res.setHeader('Content-Type', type)
  res.setHeader('Content-Length', Buffer.byteLength(body))
  res.end(body)
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' }
const escapeHtml = (text: string) => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!)

const ASSET_TYPES: Record<string, string> = {
  'app.js': 'text/javascript; charset=utf-8',
  'app.css': 'text/css; charset=utf-8',
  'favicon.svg': 'image/svg+xml',
}
// Files beside this module (dist/assets/ once built), read once: one copy serves the ESM and the CJS build.
const assets = new Map<string, Buffer>()

export function asset(name: string): { type: string; body: Buffer } | undefined {
  if (!Object.hasOwn(ASSET_TYPES, name)) return undefined
  if (!assets.has(name)) assets.set(name, readFileSync(new URL(`./assets/${name}`, import.meta.url)))
  return { type: ASSET_TYPES[name]!, body: assets.get(name)! }
}

// Both pages' head; `title` is HTML already escaped.
function head(title: string, script: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light dark">
<title>${title}</title>
<link rel="icon" href="favicon.svg">
<link rel="stylesheet" href="app.css">
${script}</head>
`
}

// Every URL relative, so it works at any base path; the script builds the rest from the API.
export function shell(table: string, actions: boolean, signedIn: boolean): string {
  const logout = signedIn ? '<form method="post" action="logout"><button type="submit">Sign out</button></form>' : ''
  return `${head(`pg-cron-lease: ${escapeHtml(table)}`, '<script src="app.js" defer></script>\n')}<body data-actions="${actions}">
<header><h1><a href="./">pg-cron-lease</a></h1><span class="table">${escapeHtml(table)}</span>
<span class="tools"><button type="button" id="zone" aria-pressed="false">Show UTC</button>${logout}</span></header>
<div id="stale" role="alert" hidden></div>
<main id="main"><p>Loading…</p></main>
<noscript><p>This page needs JavaScript. The same data is at <a href="api/jobs">api/jobs</a>.</p></noscript>
</body>
</html>
`
}

// `said`: why the last attempt failed.
export function loginPage(table: string, said?: string): string {
  const reason = said === undefined ? '' : `<p class="error" role="alert">${escapeHtml(said)}</p>`
  return `${head('Sign in: pg-cron-lease', '')}<body>
<header><h1>pg-cron-lease</h1><span class="table">${escapeHtml(table)}</span></header>
<main class="login">
<form method="post" action="login">
<label for="token">Dashboard token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Sign in</button>
${reason}
</form>
</main>
</body>
</html>
`
}
