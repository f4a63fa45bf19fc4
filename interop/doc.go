// Package interop holds tests that run real ACP agents (installed from npm
// into testdata/interop) as subprocesses and drive them with the broker's
// acp package over their real stdio: the SDK's example agent, codex-acp
// against internal/fakeopenai, and claude-agent-acp against
// internal/fakeanthropic, which also starts a stdio MCP server built from
// testdata/factsmcp. An agent whose files are missing is skipped; run
// `npm ci` in testdata/interop to install them.
package interop
