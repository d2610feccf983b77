import assert from 'node:assert/strict'
import { describe, test } from 'node:test'
import { describeError } from '../../src/outcome.ts'

/** What every recorded error text must be: one line, no control character, well-formed, bounded. */
function assertClean(text: string) {
  assert.ok(text.length <= 500, `at most 500 units (${text.length})`)
  assert.doesNotMatch(text, /[\p{Cc}\u2028\u2029]/u, 'no control character and no line end')
  assert.ok(!/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(text), 'well-formed UTF-16')
}

describe('the recorded error is one clean line', () => {
  test('the message is cut at the first line end of any kind', () => {
    for (const end of ['\n', '\r', '\r\n', '\u0085', '\u2028', '\u2029']) {
      const text = describeError(new Error(`first${end}second`))
      assert.equal(text, 'Error: first', JSON.stringify(end))
    }
  })

  test('a name with a line end or a NUL is one line too', () => {
    assert.equal(describeError(Object.assign(new Error('msg'), { name: 'Bad\nName' })), 'Bad: msg')
    assert.equal(describeError(Object.assign(new Error('a\0b'), { name: 'N\0N' })), 'N N: a b')
  })

  test('the 500-unit cut never splits a surrogate pair, and lone surrogates become U+FFFD', () => {
    for (let pad = 0; pad < 4; pad++) {
      const text = describeError(new Error(`${'x'.repeat(480 + pad)}${'😀'.repeat(20)}`))
      assertClean(text)
      assert.ok(text.endsWith('…'))
    }
    assert.equal(describeError(new Error('a\ud800b\udc00c')), 'Error: a\ufffdb\ufffdc')
  })

  test('anything thrown gives a clean line', () => {
    const weird: unknown[] = [
      'plain',
      42,
      null,
      undefined,
      Symbol('s'),
      { message: 'x\ny' },
      {
        get name() {
          throw new Error('getter')
        },
      },
      Object.assign(new Error('\u001b[31mred'), { name: '\u2028' }),
    ]
    for (const value of weird) assertClean(describeError(value))
  })
})
