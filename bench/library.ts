/**
 * The copy of pg-cron-lease the bench measures: every case calls the library, and sends the
 * library's statements, from this one copy. The build (dist/, the code users install) by default,
 * or the source (src/, through tsx) with `--source`, so the bench test needs no build.
 */
import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import type pg from 'pg'
import type * as PgCronLease from '../src/index.ts'
import type * as Otel from '../src/otel/index.ts'

/** The library's public API; the build's and the source's are the same. */
export type Library = typeof PgCronLease

/** The library the bench measures, and its file relative to the working directory. */
export interface LoadedLibrary {
  library: Library
  file: string
}

/** Loads the build, or the source with `source`. */
export async function loadLibrary(source: boolean): Promise<LoadedLibrary> {
  // By path, not by the package's name: inside the repository tsx maps the name to src/ (the
  // `paths` of tsconfig.json), and the default must measure the build.
  const url = new URL(source ? '../src/index.ts' : '../dist/index.mjs', import.meta.url)
  const library: Library = await import(url.href)
  return { library, file: path.relative(process.cwd(), fileURLToPath(url)) }
}

/** `pg-cron-lease/otel` of the same copy as {@link loadLibrary}: the build's, or the source's with `source`. */
export async function loadInstrumentation(source: boolean): Promise<typeof Otel.instrumentCronLeases> {
  const url = new URL(source ? '../src/otel/index.ts' : '../dist/otel.mjs', import.meta.url)
  return ((await import(url.href)) as typeof Otel).instrumentCronLeases
}

/**
 * Another build, for the targets that compare builds: the one a checkout of it built
 * (`dir/dist/index.mjs`), measured in the same run as this one. It may predate parts of the API.
 */
export async function loadBuildIn(dir: string): Promise<LoadedLibrary> {
  const file = path.resolve(dir, 'dist/index.mjs')
  if (!existsSync(file)) throw new Error(`${file} is missing: build that checkout first (npm ci && npm run build)`)
  const library: Library = await import(pathToFileURL(file).href)
  return { library, file: path.relative(process.cwd(), file) }
}

/**
 * A copy of this build loaded apart, every module of it (the build's chunks too): compared with
 * another build, which runs only in its few cases, this build's functions must not be the ones
 * every other case has made fast. With `source`, the source once more (its modules shared).
 */
export async function loadCopy(
  source: boolean,
  cleanups: { add(cleanup: () => unknown): void },
): Promise<LoadedLibrary> {
  if (source) return loadLibrary(true)
  const dir = mkdtempSync(path.join(os.tmpdir(), 'pg-cron-lease-bench-'))
  cleanups.add(() => rmSync(dir, { recursive: true, force: true }))
  cpSync(fileURLToPath(new URL('../dist', import.meta.url)), path.join(dir, 'dist'), { recursive: true })
  return loadBuildIn(dir)
}

/** A statement as the library sent it through a `pg` Pool: a named one, or plain text. */
export interface SentStatement {
  text: string
  /** The name it was prepared under; absent when it went as plain text. */
  name?: string
  values: unknown[]
}

/**
 * A stand-in for `pool` that passes every call through and keeps what was sent, so the bench can
 * send a statement of the library's exactly as the library sends it, without reaching into its
 * modules. The stand-in inherits from the pool, so the library still sees a `pg` Pool (and
 * prepares what it prepares on one).
 */
export function recordingPool(pool: pg.Pool): { db: pg.Pool; sent: SentStatement[] } {
  const sent: SentStatement[] = []
  const query = (config: string | SentStatement, values?: unknown[]) => {
    sent.push(typeof config === 'string' ? { text: config, values: values ?? [] } : { ...config })
    return typeof config === 'string' ? pool.query(config, values) : pool.query(config)
  }
  return { db: Object.create(pool, { query: { value: query } }), sent }
}

/** Sends `statement` through `db` as it was sent: under its name when it had one. */
export function sendAgain(db: pg.Pool, statement: SentStatement): Promise<pg.QueryResult> {
  return statement.name === undefined ? db.query(statement.text, statement.values) : db.query(statement)
}
