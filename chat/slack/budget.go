package slack

import (
	"strings"
	"sync"
	"time"
)

// rate is a method's budget: per a minute on average, up to burst at
// once; reserve of the burst is kept for urgent calls.
type rate struct {
	perMinute float64
	burst     float64
	reserve   float64
	// perChannel: the limit is each channel's (chat.postMessage), else
	// the workspace's, shared by every thread.
	perChannel bool
}

// rates keep under Slack's tiers (Tier 2: 20 a minute, Tier 3: 50, Tier
// 4: 100; chat.postMessage about one a second in a channel), a little
// below each so that a call never meets a 429 for timing alone. Slack
// counts them per app and workspace: chat.update's 50 a minute are
// shared by every answer streaming at once.
var rates = map[string]rate{
	"chat.postMessage":             {perMinute: 54, burst: 2, perChannel: true},
	"chat.update":                  {perMinute: 45, burst: 20, reserve: 5},
	"chat.delete":                  {perMinute: 45, burst: 10},
	"chat.postEphemeral":           {perMinute: 90, burst: 20},
	"reactions.add":                {perMinute: 45, burst: 15},
	"reactions.remove":             {perMinute: 18, burst: 6},
	"reactions.get":                {perMinute: 45, burst: 10},
	"conversations.replies":        {perMinute: 45, burst: 10},
	"users.info":                   {perMinute: 90, burst: 20},
	"usergroups.users.list":        {perMinute: 18, burst: 6},
	"views.open":                   {perMinute: 90, burst: 20},
	"files.getUploadURLExternal":   {perMinute: 90, burst: 20},
	"files.completeUploadExternal": {perMinute: 90, burst: 20},
}

// budget holds the Web API calls to Slack's limits before they are
// made: a call past its method's budget waits (or is told to) instead of
// spending a 429. Its buckets are bounded: a full one nobody uses is
// dropped.
type budget struct {
	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens  float64
	last    time.Time
	blocked time.Time // a 429 asked to wait until then
}

func newBudget() *budget { return &budget{buckets: map[string]*bucket{}} }

// maxBuckets bounds the buckets before the idle full ones are dropped.
const maxBuckets = 512

// take spends a token of method's budget (in channel, for a method
// limited per channel) and returns 0, or returns how long until one is
// there, spending nothing. An urgent call may spend the reserve.
func (b *budget) take(method, channel string, urgent bool, now time.Time) time.Duration {
	r, ok := rates[method]
	if !ok {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.key(method, channel, r)
	bk := b.buckets[k]
	if bk == nil {
		if len(b.buckets) >= maxBuckets {
			b.sweepLocked(now)
		}
		bk = &bucket{tokens: r.burst, last: now}
		b.buckets[k] = bk
	}
	perSecond := r.perMinute / 60
	bk.tokens = min(r.burst, bk.tokens+now.Sub(bk.last).Seconds()*perSecond)
	bk.last = now
	if now.Before(bk.blocked) {
		return bk.blocked.Sub(now)
	}
	need := 1.0
	if !urgent {
		need += r.reserve
	}
	if bk.tokens >= need-1e-9 { // a token's float sum may miss by a hair
		bk.tokens = max(bk.tokens-1, 0)
		return 0
	}
	return max(time.Duration((need-bk.tokens)/perSecond*float64(time.Second)), time.Millisecond)
}

// block closes method's budget until then: Slack answered 429.
func (b *budget) block(method, channel string, until time.Time) {
	r, ok := rates[method]
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := b.key(method, channel, r)
	bk := b.buckets[k]
	if bk == nil {
		bk = &bucket{last: time.Now()}
		b.buckets[k] = bk
	}
	// Slack counts otherwise than the budget did: past the wait, one
	// call may go, and the rest of the bucket fills again as it would.
	bk.tokens = min(bk.tokens, r.reserve+1)
	bk.blocked = until
}

func (b *budget) key(method, channel string, r rate) string {
	if r.perChannel {
		return method + " " + channel
	}
	return method
}

// sweepLocked drops the buckets that are full again and not blocked:
// they hold nothing a new bucket would not.
func (b *budget) sweepLocked(now time.Time) {
	for k, bk := range b.buckets {
		method, _, _ := strings.Cut(k, " ")
		r := rates[method]
		full := bk.tokens+now.Sub(bk.last).Seconds()*r.perMinute/60 >= r.burst
		if full && !now.Before(bk.blocked) {
			delete(b.buckets, k)
		}
	}
}

// size is how many buckets the budget holds.
func (b *budget) size() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.buckets)
}
