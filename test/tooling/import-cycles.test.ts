/**
 * src/ imports one way: no module reaches itself through its imports, type imports included, so
 * shared types and helpers live in leaf modules. Read from the files as they are, with no tool.
 */
import assert from 'node:assert/strict'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'

const src = fileURLToPath(new URL('../../src', import.meta.url))

/** Each module of src/ (relative path, no extension) and the src/ modules it imports. */
function importGraph(): Map<string, string[]> {
  const files = (readdirSync(src, { recursive: true }) as string[]).filter((f) => f.endsWith('.ts'))
  const graph = new Map<string, string[]>()
  for (const file of files) {
    const text = readFileSync(path.join(src, file), 'utf8')
    const targets = [...text.matchAll(/^\s*(?:import|export)\b[^'"]*?from\s+'(\.{1,2}\/[^']+)'/gm)].map((m) =>
      path.join(path.dirname(file), (m[1] as string).replace(/\.js$/, '')),
    )
    graph.set(file.replace(/\.ts$/, ''), targets)
  }
  return graph
}

/** The first cycle found, as the modules along it, or null. */
function findCycle(graph: Map<string, string[]>): string[] | null {
  const state = new Map<string, 'open' | 'done'>()
  const trail: string[] = []
  const visit = (module: string): string[] | null => {
    if (state.get(module) === 'done' || !graph.has(module)) return null
    if (state.get(module) === 'open') return [...trail.slice(trail.indexOf(module)), module]
    state.set(module, 'open')
    trail.push(module)
    for (const next of graph.get(module) ?? []) {
      const cycle = visit(next)
      if (cycle) return cycle
    }
    trail.pop()
    state.set(module, 'done')
    return null
  }
  for (const module of graph.keys()) {
    const cycle = visit(module)
    if (cycle) return cycle
  }
  return null
}

test('no import cycle among the modules of src/', () => {
  const graph = importGraph()
  assert.ok(graph.size > 40, `read ${graph.size} modules`)
  assert.ok(
    [...graph.values()].some((targets) => targets.length > 3),
    'imports were read',
  )
  assert.equal(findCycle(graph)?.join(' → ') ?? null, null)
})

test('the check finds a cycle when there is one', () => {
  const graph = new Map([
    ['a', ['b']],
    ['b', ['c']],
    ['c', ['a']],
  ])
  assert.deepEqual(findCycle(graph), ['a', 'b', 'c', 'a'])
})
