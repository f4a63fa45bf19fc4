// Package chat defines what a chat front end needs from the broker and
// renders a turn's progress as chat text; platforms live in subpackages.
package chat

import (
	"context"

	"acpbroker/adapter"
)

// Engine is the turn engine as a chat platform uses it.
type Engine interface {
	Submit(thread string, p *adapter.Prompt) error
	Cancel(thread string, cause error) bool
	Reset(thread string, cause error)
	Status(thread string) adapter.ThreadStatus
}

var _ Engine = (*adapter.Engine)(nil)

// Platform is a chat front end. Run serves conversations until ctx ends or
// the platform's input is exhausted, then returns after its own goroutines
// are gone.
type Platform interface {
	Run(ctx context.Context) error
}
