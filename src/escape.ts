// The backslash is escaped too, so the output reads back without doubt.
const NAMED: Record<string, string> = { '\\': '\\\\', '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/**
 * Text from the lease table for a terminal: callers wrote it, so it may hold what a terminal acts on. Escapes every
 * character that can move the cursor, start an escape sequence or end a line, and every invisible format character:
 * `bill\u200Bing` must not read as `billing`, nor U+202E reverse the line. The dashboard's `visible()` takes the same.
 */
export function escapeControls(text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\\]/gu, (char) => {
    const code = char.codePointAt(0)!
    if (NAMED[char] !== undefined) return NAMED[char]
    if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`
    return code > 0xffff ? `\\u{${code.toString(16)}}` : `\\u${code.toString(16).padStart(4, '0')}`
  })
}
