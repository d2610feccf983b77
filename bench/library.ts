/**
 * The copy of pg-cron-lease the bench measures: every case calls the library, and sends the
 * library's statements, from this one copy. The build (dist/, the code users install) by default,
 * or the source (src/, through tsx) with `--source`, so the bench test needs no build.
 */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import type * as PgCronLease from '../src/index.ts'

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
