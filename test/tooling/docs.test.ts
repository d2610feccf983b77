/**
 * The docs, checked like code. Every relative link in README.md, CONTRIBUTING.md, CHANGELOG.md and
 * docs/*.md resolves to a file (and to a heading, for a `#anchor`); the README stays short and
 * names the whole API; prose wraps at 100 characters; every fenced block names its language; and
 * every ```ts or ```js block either type-checks against the library (with the free names declared
 * in PRELUDE below) or opens with `// excerpt of examples/<file>` and is a run of consecutive lines
 * of that file, which the examples test executes. CONTRIBUTING.md states the same rules.
 */
import assert from 'node:assert/strict'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'
import { describe, test } from 'node:test'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { OPTIONS, optionsOf } from '../../src/options.ts'
import { claimSql, createTableSql, DEFAULT_TABLE, probeSql } from '../../src/sql.ts'

const root = fileURLToPath(new URL('../..', import.meta.url))
const DOCS = [
  'README.md',
  'CONTRIBUTING.md',
  'CHANGELOG.md',
  ...readdirSync(path.join(root, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
]
// The changelog's entries are one line each, as written when each change lands.
const WRAPPED = DOCS.filter((file) => file !== 'CHANGELOG.md')
// A changelog entry says what changed in a line; the detail is in the guide it links to.
const MAX_CHANGELOG_ENTRY = 200
const CHANGELOG_SECTIONS = ['Upgrading from the original package', 'Added', 'Changed', 'Fixed']
const README_MAX_LINES = 400
// Prose and tables wrap at 100 characters; ts and js code may reach 120, the formatter's width.
// Other blocks hold what cannot wrap: a crontab line, a command's real output.
const MAX_WIDTH = 100
const MAX_CODE_WIDTH = 120
const LANGUAGES = new Set(['ts', 'js', 'sh', 'sql', 'text', 'ini', 'json', 'yaml', 'prisma', 'nginx'])
const CODE_WIDTH = (lang: string) => (lang === 'ts' || lang === 'js' ? MAX_CODE_WIDTH : Infinity)
const EXCERPT = /^\/\/ excerpt of (examples\/\S+)$/

/**
 * Names the docs' code blocks use without defining them: the application's own functions and
 * objects around the library. Everything the library exports is imported by the blocks
 * themselves, so a renamed export or a changed signature fails here.
 */
const PRELUDE = `
declare const pool: import('pg').Pool
declare const client: import('pg').PoolClient
declare const knex: import('knex').Knex
declare const prisma: { $queryRawUnsafe<T = unknown>(query: string, ...values: unknown[]): Promise<T> }
declare const alerts: { send(jobName: string, error: unknown): void }
declare const tracer: { startSpan(name: string, options?: object): { end(): void } }
declare function pendingBatches(): Promise<string[]>
declare function importBatch(batch: string, options?: { signal?: AbortSignal }): Promise<void>
declare function chargeCustomers(options?: { signal?: AbortSignal }): Promise<void>
declare function exportEverything(options: { signal: AbortSignal }): Promise<void>
declare function sendReport(): Promise<void>
declare function refreshCache(): Promise<void>
declare function buildReports(): Promise<void>
declare function sweep(): Promise<void>
declare function sync(options?: { signal?: AbortSignal }): Promise<void>
declare function compact(): Promise<void>
declare function cleanup(): Promise<void>
declare function sendDigest(): Promise<void>
declare function sendInvoices(): Promise<void>
declare function closeLedger(client: import('pg').PoolClient): Promise<void>
`

interface Doc {
  file: string
  lines: string[]
  /** GitHub's anchor for each heading. */
  anchors: Set<string>
  links: { target: string; line: number }[]
  blocks: { lang: string; body: string[]; line: number }[]
  /** The language of each line (1-based) inside a fenced block, fences included. */
  fenced: Map<number, string>
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens. */
function slug(heading: string): string {
  return heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\p{M}\p{Pc} -]/gu, '')
    .replace(/ /g, '-')
}

function readDoc(file: string): Doc {
  const lines = readFileSync(path.join(root, file), 'utf8').replace(/\n$/, '').split('\n')
  const doc: Doc = { file, lines, anchors: new Set(), links: [], blocks: [], fenced: new Map() }
  const seen = new Map<string, number>()
  let block: Doc['blocks'][number] | undefined
  for (const [i, line] of lines.entries()) {
    const fence = /^(\s*)(```|~~~)(.*)$/.exec(line)
    if (block) {
      doc.fenced.set(i + 1, block.lang)
      if (fence && fence[3] === '') {
        doc.blocks.push(block)
        block = undefined
      } else block.body.push(line)
      continue
    }
    if (fence) {
      block = { lang: fence[3]!.trim(), body: [], line: i + 1 }
      doc.fenced.set(i + 1, block.lang)
      continue
    }
    const heading = /^#{1,6}\s+(.*?)\s*#*$/.exec(line)
    if (heading) {
      const base = slug(heading[1]!)
      const n = seen.get(base) ?? 0
      seen.set(base, n + 1)
      doc.anchors.add(n === 0 ? base : `${base}-${n}`)
    }
    // Links outside code spans: [text](target) and ![alt](target), and [label]: target.
    const prose = line.replace(/`[^`]*`/g, '')
    for (const m of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) doc.links.push({ target: m[1]!, line: i + 1 })
    const reference = /^\s*\[[^\]]+\]:\s*(\S+)/.exec(prose)
    if (reference) doc.links.push({ target: reference[1]!, line: i + 1 })
  }
  assert.equal(block, undefined, `${file}: a code block opened at line ${block?.line} is never closed`)
  return doc
}

const docs = new Map(DOCS.map((file) => [file, readDoc(file)]))

describe('the docs hold together', () => {
  test(`README.md is at most ${README_MAX_LINES} lines and opens with a table of contents`, () => {
    const readme = docs.get('README.md')!
    assert.ok(readme.lines.length <= README_MAX_LINES, `README.md has ${readme.lines.length} lines`)
    const firstSection = readme.lines.findIndex((line) => line.startsWith('## '))
    const contents = readme.lines.slice(0, firstSection).filter((line) => /^- \[.+\]\(#.+\)$/.test(line))
    assert.ok(contents.length >= 8, 'a list of links to the sections before the first section')
  })

  test('every relative link resolves to a file, and every #anchor to a heading of that file', () => {
    const broken: string[] = []
    for (const doc of docs.values()) {
      for (const { target, line } of doc.links) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto:
        const [file = '', anchor] = target.split('#')
        const resolved =
          file === '' ? doc.file : path.posix.normalize(path.posix.join(path.posix.dirname(doc.file), file))
        const where = `${doc.file}:${line} → ${target}`
        if (!existsSync(path.join(root, resolved))) {
          broken.push(`${where}: no file ${resolved}`)
          continue
        }
        if (anchor === undefined) continue
        const linked = docs.get(resolved) ?? (resolved.endsWith('.md') ? readDoc(resolved) : undefined)
        if (!linked || statSync(path.join(root, resolved)).isDirectory()) broken.push(`${where}: not a document`)
        else if (!linked.anchors.has(anchor)) broken.push(`${where}: no heading #${anchor} in ${resolved}`)
      }
    }
    assert.deepEqual(broken, [])
  })

  test(`prose and tables wrap at ${MAX_WIDTH} characters, ts and js code at ${MAX_CODE_WIDTH}`, () => {
    const wide = WRAPPED.flatMap((file) => {
      const doc = docs.get(file)!
      return doc.lines.flatMap((line, i) => {
        const width = [...line].length
        const lang = doc.fenced.get(i + 1)
        const max = lang === undefined ? MAX_WIDTH : CODE_WIDTH(lang)
        return width > max ? [`${file}:${i + 1} (${width} > ${max})`] : []
      })
    })
    assert.deepEqual(wide, [])
  })

  test(`every fenced block names its language, one of ${[...LANGUAGES].join(', ')}`, () => {
    const unnamed = [...docs.values()].flatMap((doc) =>
      doc.blocks.filter((b) => !LANGUAGES.has(b.lang)).map((b) => `${doc.file}:${b.line} ('${b.lang}')`),
    )
    assert.deepEqual(unnamed, [])
  })
})

describe('the README describes the library as it is', () => {
  const readme = docs.get('README.md')!
  const section = (heading: string) => {
    const start = readme.lines.indexOf(`## ${heading}`)
    assert.ok(start >= 0, `README.md has a section ## ${heading}`)
    const end = readme.lines.findIndex((line, i) => i > start && line.startsWith('## '))
    return readme.lines.slice(start, end < 0 ? undefined : end).join('\n')
  }

  test('the API section names every export of src/index.ts, and every option of withCronLease', () => {
    const index = readFileSync(path.join(root, 'src/index.ts'), 'utf8')
    const exported = [...index.matchAll(/export (?:type )?\{([^}]*)\}/g)].flatMap((m) =>
      m[1]!
        .split(',')
        .map((name) => name.replace(/^\s*type\s+/, '').trim())
        .filter(Boolean),
    )
    assert.ok(exported.length > 30, `${exported.length} exports found`)
    const api = section('API')
    const missing = [...exported, ...optionsOf('withCronLease')].filter((name) => !api.includes(`\`${name}`))
    assert.deepEqual(missing, [])
  })

  test('the API section names every option of every entry point, and the keep-alive keys, in code', () => {
    const api = section('API')
    const inCode = [...api.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)
    const named = (name: string) => inCode.some((code) => new RegExp(`\\b${name}\\b`).test(code))
    const options = [...Object.keys(OPTIONS), 'beatMs', 'extendMs']
    assert.ok(options.length >= 20, `${options.length} options found`)
    assert.deepEqual(
      options.filter((name) => !named(name)),
      [],
    )
  })

  // The README sketches the probe's and the claim's rules; the whole text is on the statements page.
  test('the sketch under "How it works" shows the rules of the probe and the claim in the order they run', () => {
    const how = section('How it works')
    assert.ok(how.includes('](docs/statements.md'), 'it links to the statements page for the whole text')
    const block = readme.blocks.find((b) => b.lang === 'sql' && b.line > readme.lines.indexOf('## How it works'))
    assert.ok(block, 'a sql block under ## How it works')
    assert.ok(block.body.length <= 15, `the sketch is at most 15 lines, it has ${block.body.length}`)
    const sketch = block.body.join('\n')
    const body = claimText()
    // Each rule as the statements write it, and as the sketch may abbreviate it (no schema quotes, no prefixes).
    const rules: [string, RegExp][] = [
      [
        'lease.lease_until > clock_timestamp() OR lease.last_occurrence >= ',
        /lease_until > clock_timestamp\(\) OR last_occurrence >= occurrence/,
      ],
      ['WHEN slot.at > clock.at + $5::integer', /occurrence > clock_timestamp\(\) \+ tolerance/],
      ['FOR UPDATE SKIP LOCKED', /FOR UPDATE SKIP LOCKED/],
      ['ON CONFLICT (job_name) DO UPDATE', /ON CONFLICT \(job_name\) DO UPDATE/],
      ['WHERE lease.lease_until <= clock_timestamp()', /WHERE lease\.lease_until <= clock_timestamp\(\)/],
      [
        'AND NOT coalesce(lease.last_occurrence >= EXCLUDED.last_occurrence',
        /AND NOT (coalesce\()?lease\.last_occurrence >= EXCLUDED\.last_occurrence/,
      ],
    ]
    const inBody = rules.map(([text]) => body.indexOf(text))
    assert.deepEqual(
      rules.filter((_, i) => inBody[i]! < 0).map(([text]) => text),
      [],
      'every rule is in the statements as sent',
    )
    const inSketch = rules.map(([, pattern]) => sketch.search(pattern))
    assert.deepEqual(
      rules.filter((_, i) => inSketch[i]! < 0).map(([text]) => text),
      [],
      'every rule is in the sketch',
    )
    assert.deepEqual(
      [...inBody].sort((a, b) => a - b),
      inBody,
      'the statements hold them in this order',
    )
    assert.deepEqual(
      [...inSketch].sort((a, b) => a - b),
      inSketch,
      'the sketch shows them in the same order',
    )
  })
})

describe('the statements page lists what the library sends', () => {
  const statements = docs.get('docs/statements.md')!

  test('the block under "The claim" is the probe and the claim as the library sends them, line for line', () => {
    const heading = statements.lines.indexOf('## The claim')
    assert.ok(heading >= 0, 'docs/statements.md has a section ## The claim')
    const block = statements.blocks.find((b) => b.lang === 'sql' && b.line > heading)
    assert.ok(block, 'a sql block under ## The claim')
    assert.equal(block.body.join('\n'), claimText())
  })

  test('it names every statement builder src/sql.ts exports', () => {
    const source = readFileSync(path.join(root, 'src/sql.ts'), 'utf8')
    const builders = [...source.matchAll(/^export function (\w+Sql)\(/gm)].map((m) => m[1]!)
    assert.ok(builders.length >= 12, `${builders.length} statement builders found`)
    const text = statements.lines.join('\n')
    assert.deepEqual(
      builders.filter((name) => !text.includes(`\`${name}`)),
      [],
    )
  })
})

/** The current shape's probe and claim for the default table, as the statements page shows them. */
function claimText(): string {
  return `${probeSql(DEFAULT_TABLE)};\n\n${claimSql(DEFAULT_TABLE, 'history')};`
}

describe('the migrations guide shows the table as the library creates it', () => {
  /** The column names of the table `createTableSql` creates, in order. */
  const tableColumns = () => {
    const ddl = createTableSql('cron_leases')
    // The lease table's own block: the history table follows it.
    const body = ddl.slice(ddl.indexOf('(') + 1, ddl.indexOf(');'))
    return [...body.matchAll(/^\s+([a-z_]+)\s+[A-Z]/gm)].map((m) => m[1]!)
  }
  const migrations = docs.get('docs/migrations.md')!

  test('the CREATE TABLE under "The table" names every column, in the order createTableSql makes them', () => {
    const columns = tableColumns()
    assert.ok(columns.length >= 13, `${columns.length} columns read from createTableSql`)
    const block = migrations.blocks.find((b) => b.lang === 'sql' && b.body[0] === 'CREATE TABLE "cron_leases" (')
    assert.ok(block, 'docs/migrations.md has a sql block opening with CREATE TABLE "cron_leases" (')
    const shown = block.body.flatMap((line) => /^\s+([a-z_]+)\s+[A-Z]/.exec(line)?.[1] ?? [])
    assert.deepEqual(shown, columns)
  })

  test('the Prisma model maps every column of the table, so prisma migrate sees no drift', () => {
    const block = migrations.blocks.find((b) => b.lang === 'prisma' && b.body[0]?.startsWith('model '))
    assert.ok(block, 'docs/migrations.md has a prisma model block')
    const mapped = block.body
      .filter((line) => /^\s+\w+\s+\w/.test(line) && !/^\s+@@/.test(line))
      .map((line) => /@map\("([a-z_]+)"\)/.exec(line)?.[1] ?? line.trim().split(/\s+/)[0]!)
    assert.deepEqual(mapped, tableColumns())
  })
})

describe('the docs say how to run it, with commands that exist', () => {
  const scripts = Object.keys(JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).scripts ?? {})
  /** The npm scripts a line tells the reader to run: `npm run <name>`, and `npm test` for `test`. */
  const npmScripts = (line: string) =>
    [...line.matchAll(/\bnpm (?:run(?:-script)? ([\w:.-]+)|(test)\b)/g)].map((m) => (m[1] ?? m[2])!)

  test('before its Usage section, the README runs the demo and the tests from a clone: npm run demo, npm test', () => {
    const readme = docs.get('README.md')!
    const usage = readme.lines.indexOf('## Usage')
    assert.ok(usage > 0, 'README.md has a section ## Usage')
    const commands = readme.blocks
      .filter((block) => block.lang === 'sh' && block.line < usage)
      .flatMap((block) => block.body.map((line) => line.split('#')[0]!.trim()))
    for (const command of ['npm run demo', 'npm test']) {
      assert.ok(commands.includes(command), `a sh block before ## Usage has the command \`${command}\``)
    }
  })

  test('every npm run <script> and npm test in the docs names a script of package.json', () => {
    const named = [...docs.values()].flatMap((doc) =>
      doc.lines.flatMap((line, i) => npmScripts(line).map((script) => ({ script, at: `${doc.file}:${i + 1}` }))),
    )
    assert.ok(named.length > 20, `${named.length} npm commands found`)
    const unknown = named.filter(({ script }) => !scripts.includes(script)).map(({ script, at }) => `${at}: ${script}`)
    assert.deepEqual(unknown, [])
  })
})

describe('the changelog is one short line per change, under one heading for the next release', () => {
  const changelog = docs.get('CHANGELOG.md')!
  const version = JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')).version as string

  test(`every entry is one line of at most ${MAX_CHANGELOG_ENTRY} characters`, () => {
    const problems: string[] = []
    for (const [i, line] of changelog.lines.entries()) {
      const at = `CHANGELOG.md:${i + 1}`
      if (/^\s+\S/.test(line)) problems.push(`${at}: an entry continues on a second line`)
      else if (line.startsWith('- ') && line.length > MAX_CHANGELOG_ENTRY) {
        problems.push(`${at}: ${line.length} characters; link to the guide for the detail`)
      }
    }
    assert.deepEqual(problems, [])
  })

  test("the releases are one heading each, the newest the version package.json names; none is a bare 'Unreleased'", () => {
    const releases = changelog.lines.filter((line) => line.startsWith('## '))
    assert.equal(releases[0], `## ${version} (unreleased)`, "the first release heading names package.json's version")
    assert.equal(new Set(releases).size, releases.length, 'no release heading appears twice')
    assert.deepEqual(
      releases.filter((heading) => /unreleased/i.test(heading) && heading !== releases[0]),
      [],
      'only the next release is unreleased',
    )
  })

  test('every entry sits under Added, Changed or Fixed, or the upgrading notes', () => {
    let section: string | undefined
    const misplaced: string[] = []
    for (const [i, line] of changelog.lines.entries()) {
      if (line.startsWith('## ')) section = undefined
      else if (line.startsWith('### ')) section = line.slice(4)
      else if (line.startsWith('- ') && (section === undefined || !CHANGELOG_SECTIONS.includes(section))) {
        misplaced.push(`CHANGELOG.md:${i + 1}: under ${section ?? 'no section'}`)
      }
    }
    assert.deepEqual(misplaced, [])
  })
})

describe("CONTRIBUTING.md's repository layout matches the tree", () => {
  const ROOTS = ['src', 'sql', 'test', 'dev', 'examples', 'bench', 'scripts', 'docs']
  // What a run writes, git-ignored, so a fresh clone has none of it.
  const OUTPUT = new Set(['bench/results'])
  const exists = (p: string) => existsSync(path.join(root, p))

  /**
   * The paths the layout block names. A line that starts at the margin opens a directory; a name
   * after it, or on an indented line below it, is read inside that directory, or else from the
   * root (`test/integration/schedulers/examples.test.ts`, `bench/`). Names are the words that end in `/` or
   * in a file extension; everything else is description.
   */
  function layout(): { named: Set<string>; unresolved: string[] } {
    const doc = docs.get('CONTRIBUTING.md')!
    const heading = doc.lines.indexOf('## Repository layout')
    const block = doc.blocks.find((b) => b.lang === 'text' && b.line > heading)
    assert.ok(heading >= 0 && block, 'CONTRIBUTING.md has ## Repository layout with a text block')
    const named = new Set<string>()
    const unresolved: string[] = []
    let current = ''
    for (const line of block.body) {
      const words = line
        .trim()
        .split(/\s+/)
        .map((word) => word.replace(/^[(`]+|[),;:.`]+$/g, ''))
      for (const [k, word] of words.entries()) {
        if (!/^[\w.-]+(\/[\w.-]+)*\/?$/.test(word)) continue
        if (!word.endsWith('/') && !/\.(ts|mjs|js|sql|md|svg|json)$/.test(word)) continue
        const name = word.replace(/\/$/, '')
        const opens = k === 0 && !/^\s/.test(line)
        const candidates = opens ? [name] : [path.posix.join(current, name), name]
        const found = candidates.filter(exists)
        if (found.length === 0) unresolved.push(`${word} (in ${current || 'the root'})`)
        for (const p of found) named.add(p)
        if (opens) current = name
      }
    }
    return { named, unresolved }
  }

  test('every file and directory the layout names exists', () => {
    const { named, unresolved } = layout()
    assert.ok(named.size > 30, `${named.size} paths named`)
    assert.deepEqual(unresolved, [])
  })

  test('the layout names every directory of src, sql, test, dev, examples, bench, scripts and docs', () => {
    const { named } = layout()
    const directories = ROOTS.flatMap((dir) => [
      dir,
      ...readdirSync(path.join(root, dir), { withFileTypes: true })
        .filter((entry) => entry.isDirectory() && !entry.name.startsWith('.'))
        .map((entry) => `${dir}/${entry.name}`)
        .filter((sub) => !OUTPUT.has(sub)),
    ])
    const covered = (dir: string) => named.has(dir) || [...named].some((p) => p.startsWith(`${dir}/`))
    assert.deepEqual(
      directories.filter((dir) => !covered(dir)),
      [],
    )
  })
})

describe('every ts and js block runs or compiles', () => {
  const blocks = [...docs.values()].flatMap((doc) =>
    doc.blocks.filter((b) => b.lang === 'ts' || b.lang === 'js').map((b) => ({ ...b, file: doc.file })),
  )

  test('an excerpt is a run of consecutive lines of the examples/ file it names', () => {
    const mismatched: string[] = []
    for (const block of blocks) {
      const source = EXCERPT.exec(block.body[0] ?? '')?.[1]
      if (source === undefined) continue
      const at = `${block.file}:${block.line}`
      if (!source.startsWith('examples/') || !existsSync(path.join(root, source))) {
        mismatched.push(`${at}: no file ${source}`)
        continue
      }
      const lines = readFileSync(path.join(root, source), 'utf8').split('\n')
      if (!containsRun(lines, block.body.slice(1))) mismatched.push(`${at}: not a run of lines of ${source}`)
    }
    assert.deepEqual(mismatched, [])
  })

  test('every other block type-checks against the library, under the project tsconfig', () => {
    const checked = blocks.filter((b) => !EXCERPT.test(b.body[0] ?? ''))
    const dir = path.join(root, 'docs', '.blocks')
    const files = new Map<string, string>([[path.join(dir, 'prelude.d.ts'), PRELUDE]])
    const origin = new Map<string, string>()
    for (const block of checked) {
      const name = `${block.file.replace(/[/.]/g, '_')}_${block.line}.${block.lang === 'js' ? 'mjs' : 'mts'}`
      // `export {}` makes each block a module: its own names shadow the prelude's.
      files.set(path.join(dir, name), `${block.body.join('\n')}\nexport {}\n`)
      origin.set(path.join(dir, name), `${block.file}:${block.line + 1}`)
    }
    const diagnostics = typeCheck(files)
    const messages = diagnostics.map((d) => {
      const text = ts.flattenDiagnosticMessageText(d.messageText, '\n')
      if (!d.file || d.start === undefined) return text
      const { line } = d.file.getLineAndCharacterOfPosition(d.start)
      const block = origin.get(path.normalize(d.file.fileName))
      if (!block) return `${d.file.fileName}:${line + 1}: ${text}`
      const [file, first] = block.split(':')
      return `${file}:${Number(first) + line}: ${text}`
    })
    assert.deepEqual(messages, [])
    assert.ok(checked.length >= 10, `${checked.length} blocks checked`)
  })
})

/** Whether `run` appears in `lines` as consecutive lines, all shifted by one indentation. */
function containsRun(lines: string[], run: string[]): boolean {
  if (run.length === 0) return false
  for (let start = 0; start + run.length <= lines.length; start++) {
    const first = lines[start]!
    if (!first.endsWith(run[0]!)) continue
    const indent = first.slice(0, first.length - run[0]!.length)
    if (indent.trim() !== '') continue
    if (run.every((line, k) => lines[start + k] === (line === '' ? '' : indent + line))) return true
  }
  return false
}

/** Type-checks in-memory files with the project's compiler options (JS with checkJs). */
function typeCheck(files: Map<string, string>): readonly ts.Diagnostic[] {
  const configPath = path.join(root, 'tsconfig.json')
  const config = ts.getParsedCommandLineOfConfigFile(
    configPath,
    {},
    {
      ...ts.sys,
      onUnRecoverableConfigFileDiagnostic: (d) => assert.fail(ts.flattenDiagnosticMessageText(d.messageText, '\n')),
    },
  )!
  const options: ts.CompilerOptions = { ...config.options, noEmit: true, allowJs: true, checkJs: true }
  const host = ts.createCompilerHost(options)
  const read = host.readFile.bind(host)
  const exists = host.fileExists.bind(host)
  const getSourceFile = host.getSourceFile.bind(host)
  host.readFile = (f) => files.get(path.normalize(f)) ?? read(f)
  host.fileExists = (f) => files.has(path.normalize(f)) || exists(f)
  host.getSourceFile = (f, languageVersion, ...rest) => {
    const text = files.get(path.normalize(f))
    return text === undefined
      ? getSourceFile(f, languageVersion, ...rest)
      : ts.createSourceFile(f, text, languageVersion, true)
  }
  const program = ts.createProgram({ rootNames: [...files.keys()], options, host })
  const own = new Set(files.keys())
  return ts
    .getPreEmitDiagnostics(program)
    .filter((d) => d.file === undefined || own.has(path.normalize(d.file.fileName)))
}

describe("CONTRIBUTING.md's tests by guarantee name code that exists", () => {
  /** Every source file under src/, read once. */
  const source = () =>
    (readdirSync(path.join(root, 'src'), { recursive: true }) as string[])
      .filter((f) => f.endsWith('.ts'))
      .map((f) => readFileSync(path.join(root, 'src', f), 'utf8'))
      .join('\n')

  test('each function it says keeps a guarantee is defined in src/ (ctx.x: a property of the context)', () => {
    const doc = docs.get('CONTRIBUTING.md')!
    const start = doc.lines.indexOf('### Tests by guarantee')
    assert.ok(start >= 0, 'CONTRIBUTING.md has ### Tests by guarantee')
    const end = doc.lines.findIndex((line, i) => i > start && line.startsWith('#'))
    const section = doc.lines.slice(start, end).join('\n')
    const src = source()
    const names = [...section.matchAll(/`((?:ctx\.)?[a-z][A-Za-z]+)(?:\([^`]*\))?`/g)].map((m) => m[1]!)
    assert.ok(names.length >= 10, `${names.length} names found`)
    const missing = names.filter((name) =>
      name.startsWith('ctx.')
        ? !new RegExp(`\\b${name.slice(4)}: `).test(src)
        : !new RegExp(`\\b(?:function|const) ${name}\\b`).test(src),
    )
    assert.deepEqual(missing, [])
  })
})
