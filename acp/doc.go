// Package acp is the client side of the Agent Client Protocol: one Conn per
// agent process, JSON-RPC 2.0 over newline-delimited stdio, with
// request-scoped routing of responses and per-session delivery of updates.
package acp
