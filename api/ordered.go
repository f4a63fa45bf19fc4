package api

import (
	"container/list"
	"time"
)

// ordered is a map whose entries are kept in the order they were last
// put, oldest first, so that the oldest is found at once: entries are
// put with times that do not go back.
type ordered[V any] struct {
	m     map[string]*list.Element
	order list.List // of *orderedEntry[V], oldest first
}

type orderedEntry[V any] struct {
	key string
	at  time.Time
	v   V
}

func newOrdered[V any]() *ordered[V] { return &ordered[V]{m: map[string]*list.Element{}} }

func (o *ordered[V]) len() int { return len(o.m) }

// get is key's value and when it was put.
func (o *ordered[V]) get(key string) (v V, at time.Time, ok bool) {
	e, ok := o.m[key]
	if !ok {
		return v, at, false
	}
	en := e.Value.(*orderedEntry[V])
	return en.v, en.at, true
}

// put sets key's value, put at at: it becomes the newest.
func (o *ordered[V]) put(key string, v V, at time.Time) {
	if e, ok := o.m[key]; ok {
		en := e.Value.(*orderedEntry[V])
		en.v, en.at = v, at
		o.order.MoveToBack(e)
		return
	}
	o.m[key] = o.order.PushBack(&orderedEntry[V]{key: key, at: at, v: v})
}

func (o *ordered[V]) delete(key string) {
	if e, ok := o.m[key]; ok {
		o.order.Remove(e)
		delete(o.m, key)
	}
}

// trim drops the entries put before since, and the oldest beyond max.
func (o *ordered[V]) trim(since time.Time, max int) {
	for e := o.order.Front(); e != nil; e = o.order.Front() {
		en := e.Value.(*orderedEntry[V])
		if len(o.m) <= max && !en.at.Before(since) {
			return
		}
		o.order.Remove(e)
		delete(o.m, en.key)
	}
}
