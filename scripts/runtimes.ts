/**
 * The packed tarball under Bun and under Deno, as `.ci/run` runs it:
 *
 *   node --import tsx scripts/runtimes.ts [--runtime bun|deno]
 *
 * Packs the package (`npm pack`, which builds it), installs the tarball and `pg` into a fresh
 * project, and each runtime from its npm package (versions in dev/runtimes.ts) into a folder of
 * its own, meanwhile starting a Postgres (embedded 18, or DATABASE_URL). Then each runtime runs
 * dev/runtime-race.mjs there: ten claimants on their own connections race one occurrence, twenty
 * times; exactly one must win each time. Exits 1 if a race fails, or, under CI=true, if a runtime
 * cannot be installed (otherwise that runtime is left out, saying why).
 */
import { execFile, spawn } from 'node:child_process'
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs, promisify } from 'node:util'
import { CI, startTestServer } from '../dev/postgres.ts'
import { judgeRace, RUNTIMES, type Runtime } from '../dev/runtimes.ts'

const run = promisify(execFile)
const root = fileURLToPath(new URL('..', import.meta.url))
const RACE_MS = 60_000

const { values } = parseArgs({ options: { runtime: { type: 'string' } } })
const chosen = RUNTIMES.filter((r) => values.runtime === undefined || values.runtime.split(',').includes(r.name))
if (chosen.length === 0) {
  console.error(`--runtime must be bun, deno or both (comma-separated), got ${values.runtime}`)
  process.exit(2)
}

const dir = mkdtempSync(path.join(os.tmpdir(), 'pgcl-runtimes-'))
const started = Date.now()
const seconds = () => ((Date.now() - started) / 1000).toFixed(1)
let failed = false
const server = startTestServer()
try {
  const [, installed] = await Promise.all([consumer(), Promise.all(chosen.map(install))])
  const url = (await server).url
  for (const [i, runtime] of chosen.entries()) {
    const bin = installed[i]
    if (bin === undefined) continue
    const { output, errors, code } = await race(runtime, bin, url)
    const problems = code === 0 ? judgeRace(runtime.name, output) : [`exited with ${code}`]
    if (problems.length > 0) {
      failed = true
      console.error(`${runtime.name}: FAILED\n  ${problems.join('\n  ')}\n${output}${errors}`)
    } else {
      const report = JSON.parse(output.trim().split('\n').at(-1)!) as { runtime: string; rounds: unknown[] }
      console.log(
        `${report.runtime}: ${report.rounds.length} rounds of 10 claimants racing one occurrence, one winner each (${seconds()} s)`,
      )
    }
  }
} finally {
  await (await server.catch(() => undefined))?.stop()
  rmSync(dir, { recursive: true, force: true })
}
process.exit(failed ? 1 : 0)

/** A fresh project with the packed tarball and `pg` (the version the lock gives the tests), as a user installs them. */
async function consumer(): Promise<void> {
  const app = path.join(dir, 'app')
  mkdirSync(app)
  await run('npm', ['pack', '--silent', '--pack-destination', app], { cwd: root })
  const tarball = readdirSync(app).find((f) => f.endsWith('.tgz'))
  if (tarball === undefined) throw new Error('npm pack wrote no tarball')
  const pgVersion = (
    JSON.parse(readFileSync(path.join(root, 'node_modules/pg/package.json'), 'utf8')) as { version: string }
  ).version
  writeFileSync(
    path.join(app, 'package.json'),
    JSON.stringify({
      name: 'runtimes-race',
      private: true,
      type: 'module',
      dependencies: { 'pg-cron-lease': `file:./${tarball}`, pg: pgVersion },
    }),
  )
  await run('npm', ['install', '--prefer-offline', '--no-audit', '--no-fund', '--silent'], { cwd: app })
  copyFileSync(path.join(root, 'dev/runtime-race.mjs'), path.join(app, 'runtime-race.mjs'))
}

/** Installs a runtime from npm into a folder of its own: its binary, or undefined when it cannot be had (a failure under CI). */
async function install(runtime: Runtime): Promise<string | undefined> {
  const prefix = path.join(dir, runtime.name)
  const bin = path.join(prefix, 'node_modules', '.bin', runtime.bin)
  try {
    mkdirSync(prefix)
    await run('npm', ['install', '--prefix', prefix, '--no-audit', '--no-fund', '--silent', runtime.spec])
    await run(bin, ['--version'])
    return bin
  } catch (error) {
    const why = `${runtime.name}: cannot install ${runtime.spec} from npm: ${(error as Error).message.split('\n')[0]}`
    if (CI) {
      failed = true
      console.error(`${why} (CI=true: a failure, not a skip)`)
    } else {
      console.log(`# ${why}; left out`)
    }
    return undefined
  }
}

/** Runs the race under `runtime`, bounded: its standard output, its errors, and its exit code. */
function race(
  runtime: Runtime,
  bin: string,
  url: string,
): Promise<{ output: string; errors: string; code: number | null }> {
  return new Promise((resolve) => {
    const child = spawn(bin, runtime.args('runtime-race.mjs'), {
      cwd: path.join(dir, 'app'),
      env: { ...process.env, DATABASE_URL: url, RACE_TABLE: `runtime_${runtime.name}`, NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    let errors = ''
    child.stdout.on('data', (chunk) => {
      output += chunk
    })
    child.stderr.on('data', (chunk) => {
      errors += chunk
    })
    const timer = setTimeout(() => {
      errors += `\n(killed: no result within ${RACE_MS / 1000} s)`
      child.kill('SIGKILL')
    }, RACE_MS)
    child.on('close', (code) => {
      clearTimeout(timer)
      resolve({ output, errors, code })
    })
  })
}
