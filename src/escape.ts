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
