// Package acp is the client side of the Agent Client Protocol: one Conn per
// agent process, JSON-RPC 2.0 over newline-delimited stdio, with
// request-scoped routing of responses and per-session delivery of updates.
// The agent's file and terminal requests are decoded here and served by
// a Host (see acp/host); words for people are chat's.
package acp
