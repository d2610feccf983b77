/**
 * test/integration/schedulers/nestjs.test.ts again, on NestJS 12 with @nestjs/schedule 12 and
 * @nestjs/terminus 12: dev/nestjs-12.mjs, imported before the suite, makes its imports of
 * `@nestjs/…` (and its replica process's) find test/fixtures/nestjs-12.
 */
import '../../../dev/nestjs-12.mjs'
import assert from 'node:assert/strict'

const { NESTJS_MAJOR } = await import('../../helpers/nestjs-major.ts')
assert.equal(NESTJS_MAJOR, 12, 'the suite runs on NestJS 12')
await import('./nestjs.test.ts')
