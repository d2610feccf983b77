/**
 * The major of the `@nestjs/core` this process imports: the devDependencies' 11, or 12 where
 * dev/nestjs-12.mjs was imported first. Read through `import.meta.resolve`, which that hook answers.
 */
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const manifest = new URL('package.json', import.meta.resolve('@nestjs/core'))

export const NESTJS_MAJOR = Number(JSON.parse(readFileSync(manifest, 'utf8')).version.split('.')[0])

/** Node's flags that give a child process the same NestJS as this one: put them before its entry. */
export const NESTJS_FLAGS =
  NESTJS_MAJOR === 12 ? ['--import', fileURLToPath(new URL('../../dev/nestjs-12.mjs', import.meta.url))] : []
