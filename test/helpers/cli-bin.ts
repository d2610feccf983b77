/**
 * The pg-cron-lease bin as the package ships it, for the files that run it as a child process: built
 * from tsdown.config.ts into a temporary directory laid out like an installed package
 * (package.json, dist/cli.mjs, node_modules), beside the same bin with no node_modules (`pg` cannot
 * be found), and the pools of two replicas on the test database.
 */
import assert from 'node:assert/strict'
import { spawn } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { after, before } from 'node:test'
import { fileURLToPath } from 'node:url'
import type pg from 'pg'
import { build, type UserConfig } from 'tsdown'
import { testDatabaseUrl, testPool } from '../../dev/postgres.ts'
import config from '../../tsdown.config.ts'
import { finished } from './child.ts'

export const ROOT = fileURLToPath(new URL('../..', import.meta.url))
const PACKAGE = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'))
export const BIN_PATH: string = PACKAGE.bin['pg-cron-lease']

export interface Run {
  code: number | null
  stdout: string
  stderr: string
}

/** What {@link useBuiltBin} makes before the file's tests: filled in by its `before` hook. */
export interface BuiltBin {
  url: string
  pool: pg.Pool
  /** Another replica's pool: what the admin commands must reach. */
  replica: pg.Pool
  installed: string
  bare: string
}

/**
 * Builds the bin before the file's tests and removes it after; `cli` runs it with a clean colour
 * environment and DATABASE_URL set to the test database, unless `env` says otherwise (a value of
 * undefined removes the variable).
 */
export function useBuiltBin() {
  const built = {} as BuiltBin
  let done!: () => void
  // Resolved once the bin is built: a file's own hooks wait for it, whatever order they run in.
  const ready = new Promise<BuiltBin>((resolve) => (done = () => resolve(built)))
  before(async () => {
    built.url = await testDatabaseUrl()
    built.pool = await testPool()
    built.replica = await testPool()
    const entry = (config as UserConfig[]).find((c) => typeof c.entry === 'object' && 'cli' in (c.entry as object))
    assert.ok(entry, 'tsdown.config.ts has a cli entry')
    built.installed = mkdtempSync(path.join(os.tmpdir(), 'pgcl-cli-'))
    await build({ ...entry, config: false, cwd: ROOT, outDir: path.join(built.installed, 'dist'), logLevel: 'error' })
    copyFileSync(path.join(ROOT, 'package.json'), path.join(built.installed, 'package.json'))
    symlinkSync(path.join(ROOT, 'node_modules'), path.join(built.installed, 'node_modules'), 'dir')
    built.bare = mkdtempSync(path.join(os.tmpdir(), 'pgcl-cli-bare-'))
    mkdirSync(path.join(built.bare, 'dist'))
    copyFileSync(path.join(built.installed, BIN_PATH), path.join(built.bare, BIN_PATH))
    done()
  })
  after(async () => {
    await built.pool?.end()
    await built.replica?.end()
    for (const dir of [built.installed, built.bare]) if (dir) rmSync(dir, { recursive: true, force: true })
  })
  async function cli(args: string[], env: Record<string, string | undefined> = {}, dir?: string): Promise<Run> {
    const childEnv: NodeJS.ProcessEnv = { ...process.env, DATABASE_URL: built.url }
    for (const key of ['NO_COLOR', 'FORCE_COLOR', 'NODE_OPTIONS']) delete childEnv[key]
    for (const [key, value] of Object.entries(env)) {
      if (value === undefined) delete childEnv[key]
      else childEnv[key] = value
    }
    const bin = path.join(dir ?? built.installed, BIN_PATH)
    const { code, stdout, stderr } = await finished(spawn(process.execPath, [bin, ...args], { env: childEnv }))
    return { code, stdout, stderr }
  }
  return { built, ready, cli }
}

/** A failure: the exit code, nothing on stdout, and exactly one line on stderr without a stack. */
export function assertFails(run: Run, code: 1 | 2, message: RegExp) {
  assert.equal(run.code, code, `exit code (stdout: ${run.stdout}, stderr: ${run.stderr})`)
  assert.equal(run.stdout, '')
  assert.match(run.stderr, /^pg-cron-lease: [^\n]+\n$/, 'one line on stderr')
  assert.doesNotMatch(run.stderr, /\bat .*:\d+:\d+/, 'no stack trace')
  assert.match(run.stderr, message)
}
