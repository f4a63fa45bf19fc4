// Package api is the broker's HTTP API: programs start prompts in chat
// threads (or, without a chat, in threads of their own), follow their
// turns as Server-Sent Events, cancel them and answer their permission
// requests, with bearer tokens that say what each may do. Its OpenAPI
// document is openapi.json, served at /v1/openapi.json.
package api
