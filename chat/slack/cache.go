package slack

import (
	"container/list"
	"time"
)

// cache remembers up to n values for ttl each: the least recently used
// goes first when it is full, and an entry older than ttl is gone. It
// is not safe for concurrent use.
type cache[V any] struct {
	n   int
	ttl time.Duration
	m   map[string]*list.Element
	l   *list.List // most recently used first
}

type cacheEntry[V any] struct {
	key string
	v   V
	at  time.Time
}

func newCache[V any](n int, ttl time.Duration) *cache[V] {
	return &cache[V]{n: n, ttl: ttl, m: map[string]*list.Element{}, l: list.New()}
}

// get returns the value of k, if it is there and not too old.
func (c *cache[V]) get(k string, now time.Time) (V, bool) {
	var zero V
	e, ok := c.m[k]
	if !ok {
		return zero, false
	}
	ent := e.Value.(*cacheEntry[V])
	if now.Sub(ent.at) > c.ttl {
		c.l.Remove(e)
		delete(c.m, k)
		return zero, false
	}
	c.l.MoveToFront(e)
	return ent.v, true
}

// put sets k to v, as of now.
func (c *cache[V]) put(k string, v V, now time.Time) {
	if e, ok := c.m[k]; ok {
		ent := e.Value.(*cacheEntry[V])
		ent.v, ent.at = v, now
		c.l.MoveToFront(e)
		return
	}
	c.m[k] = c.l.PushFront(&cacheEntry[V]{key: k, v: v, at: now})
	// The oldest go first: past the bound, and any past their time.
	for c.l.Len() > 0 {
		last := c.l.Back()
		ent := last.Value.(*cacheEntry[V])
		if c.l.Len() <= c.n && now.Sub(ent.at) <= c.ttl {
			break
		}
		c.l.Remove(last)
		delete(c.m, ent.key)
	}
}

// add records k and reports whether it was not there.
func (c *cache[V]) add(k string, v V, now time.Time) bool {
	if _, ok := c.get(k, now); ok {
		return false
	}
	c.put(k, v, now)
	return true
}

// remove forgets k.
func (c *cache[V]) remove(k string) {
	if e, ok := c.m[k]; ok {
		c.l.Remove(e)
		delete(c.m, k)
	}
}

// len is how many entries the cache holds.
func (c *cache[V]) len() int { return len(c.m) }
