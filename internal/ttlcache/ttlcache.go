// Package ttlcache is a bounded map whose entries also expire: the
// least recently used goes first when it is full, and an entry is gone
// once it is older than its time to live, read from a clock passed in.
package ttlcache

import (
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Cache is golang-lru's simplelru.LRU with a time on each entry. The
// library's own expirable.LRU does not fit here: it starts a goroutine
// that nothing can stop (in v2) for every cache, reads time.Now itself,
// and cannot take an entry whose time is in the past (a key recalled
// from the store expires a day after it was first sent, not a day
// after the broker read it).
//
// A Cache is not safe for concurrent use: its owner holds its own lock.
type Cache[K comparable, V any] struct {
	lru *simplelru.LRU[K, entry[V]]
	ttl time.Duration
	now func() time.Time
}

type entry[V any] struct {
	v  V
	at time.Time
}

// New is a Cache of at most size entries, each kept for ttl after it
// was put; now is its clock (nil: time.Now). size must be positive.
func New[K comparable, V any](size int, ttl time.Duration, now func() time.Time) *Cache[K, V] {
	lru, err := simplelru.NewLRU[K, entry[V]](size, nil)
	if err != nil {
		panic("ttlcache: " + err.Error())
	}
	if now == nil {
		now = time.Now
	}
	return &Cache[K, V]{lru: lru, ttl: ttl, now: now}
}

// expired reports whether an entry put at at has outlived its time.
func (c *Cache[K, V]) expired(at, now time.Time) bool { return now.Sub(at) >= c.ttl }

// Get is k's value, if it is there and not too old; it becomes the most
// recently used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	return c.get(k, c.lru.Get)
}

// Peek is k's value, if it is there and not too old, leaving the order
// of use as it is.
func (c *Cache[K, V]) Peek(k K) (V, bool) {
	return c.get(k, c.lru.Peek)
}

func (c *Cache[K, V]) get(k K, read func(K) (entry[V], bool)) (V, bool) {
	e, ok := read(k)
	if !ok {
		var zero V
		return zero, false
	}
	if c.expired(e.at, c.now()) {
		c.lru.Remove(k)
		var zero V
		return zero, false
	}
	return e.v, true
}

// Put sets k to v as of now: it becomes the most recently used.
func (c *Cache[K, V]) Put(k K, v V) { c.PutAt(k, v, c.now()) }

// PutAt sets k to v as put at at (in the past when it is recalled), and
// forgets the least recently used entries that have outlived their time.
// An entry already too old is not kept.
func (c *Cache[K, V]) PutAt(k K, v V, at time.Time) {
	now := c.now()
	if c.expired(at, now) {
		c.lru.Remove(k)
		return
	}
	c.lru.Add(k, entry[V]{v: v, at: at})
	for {
		_, e, ok := c.lru.GetOldest()
		if !ok || !c.expired(e.at, now) {
			return
		}
		c.lru.RemoveOldest()
	}
}

// ContainsOrPut puts k if it is not there (or too old), and reports
// whether it was there.
func (c *Cache[K, V]) ContainsOrPut(k K, v V) bool {
	if _, ok := c.Get(k); ok {
		return true
	}
	c.Put(k, v)
	return false
}

// Remove forgets k.
func (c *Cache[K, V]) Remove(k K) { c.lru.Remove(k) }

// Len is how many entries the Cache holds, some perhaps too old to be
// read.
func (c *Cache[K, V]) Len() int { return c.lru.Len() }
