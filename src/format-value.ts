/** Values as text for people: any value in an error message, stored text with its control characters visible. */
import { types } from 'node:util'

// Safe for any value (a throwing getter, a cycle, a revoked Proxy): it runs on the failure path.
export function formatValue(value: unknown): string {
  try {
    return render(value)
  } catch {
    // Any look at a revoked Proxy throws, as may a live one's traps; isProxy asks the engine, so cannot.
    return `${types.isProxy(value) ? 'a Proxy' : 'a value'} that throws when inspected`
  }
}

function render(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(clip(value))
  if (typeof value === 'bigint') return `${value}n`
  if (typeof value === 'function') return `function ${value.name || '(anonymous)'}`
  if (value === null || typeof value !== 'object') return String(value)
  // The engine's own getTime: a Date's toJSON may be replaced, and an Invalid Date has none.
  if (types.isDate(value)) {
    const ms = Date.prototype.getTime.call(value)
    return Number.isNaN(ms) ? 'an Invalid Date' : `a Date of ${new Date(ms).toISOString()}`
  }
  if (Array.isArray(value)) return `an array of length ${value.length}`
  try {
    return clip(JSON.stringify(value) ?? Object.prototype.toString.call(value))
  } catch {
    return Object.prototype.toString.call(value)
  }
}

const clip = (text: string) => (text.length > 80 ? `${text.slice(0, 80)}…` : text)

export const messageOf = (error: unknown): string => (error instanceof Error ? error.message : String(error))

// On one line (else its code), for a line of output.
export function oneLine(error: unknown): string {
  const message = messageOf(error)
  return message.replace(/\s*\n\s*/g, ' ').trim() || String((error as { code?: unknown })?.code ?? 'unknown error')
}

// The backslash is escaped too, so the output reads back without doubt.
const NAMED: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' }

// Callers wrote the table's text: nothing in it may move a terminal's cursor, end a line or hide (U+200B, U+202E).
// The dashboard's `visible()` takes the same characters.
export function escapeControls(text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\\]/gu, (char) => {
    const code = char.codePointAt(0)!
    if (NAMED[char] !== undefined) return NAMED[char]
    if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`
  })
}
