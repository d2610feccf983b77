/**
 * Colours for the command's text output: only on a terminal, or when FORCE_COLOR asks for them;
 * NO_COLOR (any non-empty value) turns them off in every case (https://no-color.org).
 */

export interface Paint {
  plain(text: string): string
  bold(text: string): string
  dim(text: string): string
  red(text: string): string
  green(text: string): string
  yellow(text: string): string
}

export function painter(stream: NodeJS.WriteStream, env: NodeJS.ProcessEnv): Paint {
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
