// Package faults is the broker's fault suite. Each test file injects one
// fault into a real broker process (built from ./cmd/broker) talking to a
// fake Discord or a fake Slack (a fault that both can meet runs on each:
// see forEachPlatform) and to fake agent processes, then checks what the
// people in the thread see and what is left running on the machine.
//
// Run it with:
//
//	go test -race ./faults
package faults
