/**
 * A strict reader of the Prometheus text exposition the command prints (format 0.0.4, ending with
 * OpenMetrics' `# EOF`), for tests that check the output by parsing it rather than by matching
 * text. It accepts only what both formats and node_exporter's textfile collector accept, and throws
 * on anything else, naming the line:
 * - every family declares `# HELP` and then `# TYPE` before its samples, once, and its lines are
 *   contiguous (a family never comes back after another);
 * - HELP texts hold no backslash or double quote (the two formats escape them differently);
 * - a sample is `name{label="value",...} value`, named after the family being read, its label
 *   values escaped with `\\`, `\"` and `\n` only, no label set twice in a family, a value that is a
 *   number, and no timestamp (the textfile collector refuses files with timestamps);
 * - no blank line, no other comment, and `# EOF` as the last line, followed by one line feed.
 */

export interface Sample {
  labels: Record<string, string>
  value: number
}

export interface Family {
  help: string
  type: string
  samples: Sample[]
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/
const NUMBER = /^[+-]?(?:(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?|Inf)$|^NaN$/
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped'])

export function parseExposition(text: string): Map<string, Family> {
  if (!text.endsWith('# EOF\n')) throw new Error('the exposition must end with "# EOF" and a line feed')
  const lines = text.slice(0, -'# EOF\n'.length).split('\n')
  // The text before "# EOF" ends with a line feed too, so the last piece is empty.
  if (lines.pop() !== '') throw new Error('"# EOF" must start a line of its own')
  const families = new Map<string, Family>()
  let current: { name: string; family: Partial<Family> & { samples: Sample[] } } | undefined
  const fail = (n: number, why: string): never => {
    throw new Error(`line ${n + 1}: ${why}: ${JSON.stringify(lines[n])}`)
  }
  for (const [n, line] of lines.entries()) {
    if (line === '') fail(n, 'blank line')
    if (line.startsWith('#')) {
      const meta = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line)
      if (meta === null) fail(n, 'a comment other than HELP, TYPE and the final EOF')
      const [, keyword, name, rest] = meta as unknown as [string, 'HELP' | 'TYPE', string, string]
      if (!METRIC_NAME.test(name)) fail(n, 'invalid metric name')
      if (keyword === 'HELP') {
        if (families.has(name) || current?.name === name) fail(n, `a second HELP for ${name}`)
        if (/[\\"]/.test(rest)) fail(n, 'a backslash or double quote in HELP')
        if (current !== undefined) close(current, n)
        current = { name, family: { help: rest, samples: [] } }
      } else {
        if (current?.name !== name) fail(n, `TYPE for ${name} without its HELP just before`)
        if (current!.family.type !== undefined) fail(n, `a second TYPE for ${name}`)
        if (!TYPES.has(rest)) fail(n, `unknown type ${rest}`)
        current!.family.type = rest
      }
      continue
    }
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$/.exec(line)
    if (sample === null) fail(n, 'not a sample line (name, labels, one value, no timestamp)')
    const [, name, labelText, valueText] = sample as unknown as [string, string, string | undefined, string]
    if (current?.name !== name) fail(n, `a sample of ${name} outside its family`)
    if (current!.family.type === undefined) fail(n, `a sample of ${name} before its TYPE`)
    if (!NUMBER.test(valueText)) fail(n, `value ${valueText} is not a number`)
    const labels = labelText === undefined ? {} : parseLabels(labelText, (why) => fail(n, why))
    const key = JSON.stringify(Object.entries(labels).sort())
    if (current!.family.samples.some((s) => JSON.stringify(Object.entries(s.labels).sort()) === key)) {
      fail(n, `the same labels twice in ${name}`)
    }
    current!.family.samples.push({ labels, value: Number(valueText.replace(/Inf$/, 'Infinity')) })
  }
  if (current !== undefined) close(current, lines.length)
  return families

  function close(open: { name: string; family: Partial<Family> & { samples: Sample[] } }, n: number) {
    if (open.family.type === undefined) fail(n - 1, `${open.name} has no TYPE`)
    families.set(open.name, open.family as Family)
  }
}

/** `{a="x",b="y\"z"}` to its labels, unescaping exactly `\\`, `\"` and `\n`. */
function parseLabels(text: string, fail: (why: string) => never): Record<string, string> {
  const labels: Record<string, string> = {}
  let i = 1
  while (text[i] !== '}') {
    const name = /^[^=]*/.exec(text.slice(i))![0]
    if (!LABEL_NAME.test(name)) fail(`invalid label name ${JSON.stringify(name)}`)
    if (Object.hasOwn(labels, name)) fail(`label ${name} twice`)
    i += name.length
    if (text.slice(i, i + 2) !== '="') fail(`label ${name} without ="`)
    i += 2
    let value = ''
    for (;;) {
      const c = text[i]
      if (c === undefined) fail(`label ${name} has no closing quote`)
      i++
      if (c === '"') break
      if (c !== '\\') {
        value += c
        continue
      }
      const escaped = text[i++]
      if (escaped === '\\' || escaped === '"') value += escaped
      else if (escaped === 'n') value += '\n'
      else fail(`invalid escape \\${escaped} in label ${name}`)
    }
    labels[name] = value
    if (text[i] === ',' && text[i + 1] !== '}') i++
    else if (text[i] !== '}') fail(`expected , and a label, or }, after label ${name}`)
  }
  if (i !== text.length - 1) fail('text after the labels')
  return labels
}
