// Package render turns one turn of a thread into safe HTML for the web
// front end: the person's prompt and the agent's answer from Markdown,
// thoughts folded, each tool call with its input, output and diffs, the
// plan, files shown, notices, status and usage. Everything a person or an
// agent wrote is text in it, never markup. It holds no state and serves
// nothing: its functions are pure and safe for concurrent use.
package render
