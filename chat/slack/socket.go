package slack

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"
	"github.com/slack-go/slack/socketmode"
)

// ackWait bounds the wait to hand an acknowledgement to the connection:
// past Slack's 3 seconds it would come too late, and an event is sent
// again anyway.
const ackWait = 3 * time.Second

// runSocket serves over Socket Mode until ctx ends: socketmode's client
// opens the connection (again, when Slack refreshes it or it drops) and
// every envelope is acknowledged as it comes, before anything is done
// with it (but a modal's submission, whose acknowledgement is its
// answer, within Slack's 3 seconds), then queued for dispatch once (Slack sends an event again
// when its acknowledgement did not come in time: its event_id tells
// it).
func (c *Client) runSocket(ctx context.Context) error {
	sm := socketmode.New(c.api, socketmode.OptionLog(apiLog{c.log}))
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- sm.RunContext(sctx) }()
	for {
		select {
		case ev := <-sm.Events:
			c.onSocket(sm, ev)
		case err := <-done:
			c.setOnline(false)
			c.srv.Accept(false)
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("slack: socket mode: %w", err)
		case <-ctx.Done():
			c.srv.Accept(false)
			stop()
			for {
				select {
				case <-sm.Events: // nothing more is taken
				case <-done:
					c.setOnline(false)
					return nil
				}
			}
		}
	}
}

// onSocket takes one event of socketmode's client.
func (c *Client) onSocket(sm *socketmode.Client, ev socketmode.Event) {
	switch ev.Type {
	case socketmode.EventTypeConnected:
		if ce, ok := ev.Data.(*socketmode.ConnectedEvent); ok && ce.ConnectionCount > 0 {
			c.count(&c.stats.SocketReconnects)
			c.log.Info().Int("connection", ce.ConnectionCount).Msg("Socket Mode connection opened again")
		}
		c.setOnline(true)
		return
	case socketmode.EventTypeHello:
		// Slack sends envelopes once it has said hello.
		c.accept()
		return
	case socketmode.EventTypeConnecting:
		c.setOnline(false)
		return
	case socketmode.EventTypeConnectionError:
		c.log.Warn().Interface("error", ev.Data).Msg("could not open a Socket Mode connection; trying again")
		return
	case socketmode.EventTypeInvalidAuth:
		c.log.Error().Msg("Slack refused the app-level token")
		return
	case socketmode.EventTypeIncomingError, socketmode.EventTypeErrorWriteFailed, socketmode.EventTypeErrorBadMessage:
		c.log.Debug().Str("type", string(ev.Type)).Interface("data", ev.Data).Msg("Socket Mode trouble")
		return
	}
	req := ev.Request
	if req == nil || req.EnvelopeID == "" {
		return
	}
	in := inbound{at: time.Now()}
	if cb, ok := ev.Data.(slackapi.InteractionCallback); ok && cb.Type == slackapi.InteractionTypeViewSubmission {
		// Its acknowledgement answers it: held back for the Server.
		in.form = newFormAck()
		defer c.spawn(func() { c.ack(sm, req.EnvelopeID, in.form.wait(c.ctx, in.at)) })
	} else {
		c.ack(sm, req.EnvelopeID, nil)
	}
	keys := []string{"env:" + req.EnvelopeID}
	switch d := ev.Data.(type) {
	case slackevents.EventsAPIEvent:
		in.event = &d
		if id := eventID(&d); id != "" {
			keys = append(keys, "ev:"+id)
		}
	case slackapi.InteractionCallback:
		in.interaction = &d
	case slackapi.SlashCommand:
		in.command = &d
	default:
		return
	}
	keys = append(keys, deliveryKeys(in, req.Payload)...)
	c.take(in, true, keys...)
}

// ack acknowledges an envelope, with payload if it is not nil.
func (c *Client) ack(sm *socketmode.Client, envelope string, payload json.RawMessage) {
	actx, cancel := context.WithTimeout(c.ctx, ackWait)
	defer cancel()
	var p any
	if payload != nil {
		p = payload
	}
	if err := sm.AckCtx(actx, envelope, p); err != nil {
		c.log.Warn().Err(err).Str("envelope", envelope).Msg("envelope not acknowledged; Slack sends an event again")
	}
}
