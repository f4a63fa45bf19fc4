package fakeslack

import "acpbroker/internal/fakehttp"

// Chaos makes a share of calls fail at random, on top of the scripted
// faults (Inject429, InjectError, InjectDrop…) and the real buckets: a
// long run sees the failures Slack hands out now and then without a
// script naming each one. ErrorStatuses defaults to 503. The zero value
// injects nothing.
type Chaos = fakehttp.Chaos[Call]

// ChaosCounts counts the failures Chaos injected.
type ChaosCounts = fakehttp.ChaosCounts
