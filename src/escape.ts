/** Text from the lease table on a terminal: callers wrote it, so it may hold what a terminal acts on. */

// The backslash is escaped too, so the output reads back without doubt.
const NAMED: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * Escapes every character that can move the cursor, start an escape sequence or end a line.
 *
 * @example
 * escapeControls('a\nb\x1b[31m') // 'a\\nb\\x1b[31m'
 */
export function escapeControls(text: string): string {
  return text.replace(/[\p{Cc}\u2028\u2029\\]/gu, (char) => {
    const code = char.charCodeAt(0)
    const byte = code <= 0xff
    return NAMED[char] ?? `\\${byte ? 'x' : 'u'}${code.toString(16).padStart(byte ? 2 : 4, '0')}`
  })
}
