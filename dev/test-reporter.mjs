/**
 * The entry point `node --test --test-reporter=` loads for dev/test-summary.ts. The runner loads
 * its reporters before the hooks of `--import tsx` apply (Node 20), so a reporter written in
 * TypeScript is reached through tsx's own import function.
 */
import { tsImport } from 'tsx/esm/api'

const { default: testSummary } = await tsImport('./test-summary.ts', import.meta.url)

/** The reporter: Node's TAP output, with a list of the failing tests before its closing counts. */
export default testSummary
