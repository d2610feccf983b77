/**
 * The library's size, in lines: what a newcomer must hold in mind. The core (src/ without the
 * `exec` command and the OpenTelemetry subpath, each counted apart) is at most 6,500 lines; `exec`
 * and `otel` at most 300 lines each, the dashboard's browser assets at most 800, and no module tells
 * a promise from a value by `instanceof Promise` (a value or a promise is read once, by await).
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'

const CORE_LINES = 6_500

const src = fileURLToPath(new URL('../../src', import.meta.url))
const files = (readdirSync(src, { recursive: true }) as string[]).map((f) => f.split(path.sep).join('/')).sort()
const lines = (file: string) => readFileSync(path.join(src, file), 'utf8').split('\n').length - 1
const total = (chosen: string[]) => chosen.reduce((sum, file) => sum + lines(file), 0)

const ts = files.filter((f) => f.endsWith('.ts'))
const exec = ts.filter((f) => /^cli\/exec[^/]*\.ts$/.test(f))
const otel = ts.filter((f) => f.startsWith('otel/'))
const core = ts.filter((f) => !exec.includes(f) && !otel.includes(f))
const assets = files.filter((f) => f.startsWith('dashboard/assets/') && /\.(js|css)$/.test(f))

test(`the core of src/ is at most ${CORE_LINES} lines`, () => {
  assert.ok(core.length > 40, `found only ${core.length} files under ${src}`)
  const sizes = core.map((f) => `${lines(f)} ${f}`).join('\n')
  assert.ok(total(core) <= CORE_LINES, `the core has ${total(core)} lines, over ${CORE_LINES}:\n${sizes}`)
})

test('the exec command and the OpenTelemetry subpath are at most 300 lines each', () => {
  assert.ok(exec.length > 0 && otel.length > 0, 'the exec and otel files were not found')
  assert.ok(total(exec) <= 300, `src/cli/exec*.ts has ${total(exec)} lines`)
  assert.ok(total(otel) <= 300, `src/otel/ has ${total(otel)} lines`)
})

test("the dashboard's browser assets are at most 800 lines", () => {
  assert.ok(assets.length >= 2, 'the dashboard assets were not found')
  assert.ok(total(assets) <= 800, `src/dashboard/assets has ${total(assets)} lines`)
})

test('no module tells a promise from a value by instanceof Promise', () => {
  const found = ts.filter((f) => /instanceof\s+Promise\b/.test(readFileSync(path.join(src, f), 'utf8')))
  assert.deepEqual(found, [])
})
