/**
 * Colours for the command's text output: only on a terminal, or when FORCE_COLOR asks for them;
 * NO_COLOR (any non-empty value) turns them off in every case (https://no-color.org).
 */

/** Each colour as a function of the text; every one returns the text as it is when colours are off. */
export type Paint = Record<'plain' | 'bold' | 'dim' | 'red' | 'green' | 'yellow', (text: string) => string>

export function painter(stream: { isTTY?: boolean }, env: Readonly<Record<string, string | undefined>>): Paint {
  const force = env.FORCE_COLOR !== undefined && env.FORCE_COLOR !== '0' && env.FORCE_COLOR !== 'false'
  const on = !env.NO_COLOR && (force || stream.isTTY === true)
  const sgr = (open: number, close: number) => (text: string) => (on ? `\x1b[${open}m${text}\x1b[${close}m` : text)
  return {
    plain: (t) => t,
    bold: sgr(1, 22),
    dim: sgr(2, 22),
    red: sgr(31, 39),
    green: sgr(32, 39),
    yellow: sgr(33, 39),
  }
}
