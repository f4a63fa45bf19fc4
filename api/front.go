package api

import (
	"context"
	"errors"

	"acpbroker/acp"
	"acpbroker/adapter"
)

// Front is where prompts run: a chat platform's threads, or threads of
// the API's own when the broker serves no chat. Its methods are safe
// from any goroutine.
type Front interface {
	// Start opens a thread in Job.Channel (or writes into Job.Thread) and
	// submits the prompt, its Sink made by Job.Sink over the thread's
	// own. It returns once the prompt is submitted, or with why nothing
	// was (see the Err values).
	Start(ctx context.Context, j Job) (Placed, error)
	// Channel is the channel thread is in; ErrNoThread if it is none of
	// the front's threads.
	Channel(ctx context.Context, thread string) (string, error)
	// Answer answers an open permission request of a turn it runs, for
	// the client: ErrAnswered when it was answered already (or closed),
	// ErrNoOption for an option the request does not offer.
	Answer(req *acp.PermissionRequest, optionID, client string) error
	// Cancel ends thread's running turn with cause.
	Cancel(thread string, cause error) bool
}

// Job is a prompt for a Front.
type Job struct {
	Channel, Thread string
	Agent           string
	// Client is the token's name; Text the prompt as people see it,
	// Blocks what the agent gets.
	Client string
	Text   string
	Blocks []acp.ContentBlock
	Sink   func(adapter.Sink) adapter.Sink
}

// Placed is where a Job runs.
type Placed struct {
	Thread, Channel, Link string
}

// A Front's refusals, which the API answers with their own statuses.
var (
	ErrNotServed = errors.New("not a channel the bot serves")
	ErrNoThread  = errors.New("no such thread")
	ErrOffline   = errors.New("the chat is not connected")
	ErrAnswered  = errors.New("the permission request is no longer open")
	ErrNoOption  = errors.New("not one of the request's options")
)
