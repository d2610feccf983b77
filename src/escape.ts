/**
 * Text from the lease table shown on a terminal. A job name or holder is whatever a caller wrote,
 * so it may hold characters a terminal acts on.
 */

// The shortest escapes, for the characters people know by them; the backslash is escaped too, so
// every backslash in the output starts an escape and the text can be read back without doubt.
const NAMED: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * Writes every character that can move the cursor, start an escape sequence or end a line as a
 * visible escape: the C0 controls, DEL and the C1 controls (`\p{Cc}`), U+2028 and U+2029, and the
 * backslash itself. Everything else is left as it is.
 *
 * @example
 * escapeControls('a\nb\x1b[31m') // 'a\\nb\\x1b[31m'
 * escapeControls('x\u2028y') // 'x\\u2028y'
 */
export function escapeControls(text: string): string {
  return text.replace(/[\p{Cc}\u2028\u2029\\]/gu, (char) => {
    const code = char.charCodeAt(0)
    return NAMED[char] ?? (code <= 0xff ? `\\x${hex(code, 2)}` : `\\u${hex(code, 4)}`)
  })
}

function hex(code: number, digits: number): string {
  return code.toString(16).padStart(digits, '0')
}
