package fakediscord

import "acpbroker/internal/fakehttp"

// Chaos makes a share of REST requests fail at random, on top of the
// scripted faults (Inject429, InjectError, InjectDrop) and the real
// buckets: a long run sees the failures Discord hands out now and then
// without a script naming each one. ErrorStatuses defaults to 502, which
// discordgo retries. The zero value injects nothing.
type Chaos = fakehttp.Chaos[Request]

// ChaosCounts counts the failures Chaos injected.
type ChaosCounts = fakehttp.ChaosCounts
