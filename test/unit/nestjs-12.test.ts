/**
 * test/unit/nestjs.test.ts again, on NestJS 12 with @nestjs/schedule 12: dev/nestjs-12.mjs, imported
 * before the suite, makes its imports of `@nestjs/…` find test/fixtures/nestjs-12. The children of
 * its last block load the build from this repository, so NestJS 11: the packed tarball's tests
 * (test/tooling/package.test.ts) load the build on 12.
 */
import '../../dev/nestjs-12.mjs'
import assert from 'node:assert/strict'

const { NESTJS_MAJOR } = await import('../helpers/nestjs-major.ts')
assert.equal(NESTJS_MAJOR, 12, 'the suite runs on NestJS 12')
await import('./nestjs.test.ts')
