/**
 * Imported first (`--import ./dev/nestjs-12.mjs`, or a static import before a dynamic one), makes
 * every later `import '@nestjs/…'` from outside test/fixtures/nestjs-12 resolve to the NestJS 12
 * installed there (a `file:` devDependency, so `npm ci` installs it beside the NestJS 11 at the
 * root). Inside the fixture nothing changes: NestJS 12's own packages find one another there.
 * `require()` is not redirected (Node 20 runs no resolve hook for it), so it serves ES modules only.
 *
 * Plain JavaScript, as Node loads it in its hooks thread too, where tsx is not registered.
 */
import { readFileSync } from 'node:fs'
import { register } from 'node:module'
import { isMainThread } from 'node:worker_threads'

const FIXTURE = new URL('../test/fixtures/nestjs-12/', import.meta.url)
const NESTJS = /^@nestjs\/(common|core|schedule|terminus)(\/|$)/

// The NestJS major the fixture holds, checked before anything is redirected to it.
const NESTJS_FIXTURE_MAJOR = 12

if (isMainThread) {
  const manifest = new URL('node_modules/@nestjs/core/package.json', FIXTURE)
  let version
  try {
    version = JSON.parse(readFileSync(manifest, 'utf8')).version
  } catch {
    throw new Error(`NestJS ${NESTJS_FIXTURE_MAJOR} is not installed in ${FIXTURE.pathname}: run npm ci`)
  }
  if (!String(version).startsWith(`${NESTJS_FIXTURE_MAJOR}.`)) {
    throw new Error(`${FIXTURE.pathname} holds @nestjs/core ${version}, not ${NESTJS_FIXTURE_MAJOR}: run npm ci`)
  }
  register(import.meta.url)
}

/** The resolve hook: a NestJS package named from outside the fixture is found from inside it. */
export async function resolve(specifier, context, next) {
  const outside = !context.parentURL?.startsWith(FIXTURE.href)
  if (NESTJS.test(specifier) && outside)
    return next(specifier, { ...context, parentURL: new URL('package.json', FIXTURE).href })
  return next(specifier, context)
}
